"""The ``spotplane`` command line.

Each command group lives in its own module of ``controlplane.cli`` and registers its
subcommands here. Errors derived from :class:`SpotplaneError` print one line (``--debug`` for the
traceback) and exit 2 for bad input, 1 for failures.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence

from controlplane import __version__
from controlplane.cli import clusters, control, data, fairshare, money
from controlplane.core import logging as splog
from controlplane.core.errors import SpotplaneError

Handler = Callable[[argparse.Namespace], int | None]


Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

# One module per command group; each has ``register(subparsers)``.
COMMAND_GROUPS: list[Register] = [data.register, control.register, money.register, fairshare.register,
                                  clusters.register]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spotplane",
        description="Run many tenants' GPU jobs on spot capacity across clouds, cheaply and on time.",
    )
    parser.add_argument("--version", action="version", version=f"spotplane {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="dataset directory (default: $SPOTPLANE_DATA_DIR, ../shared/data, ~/.cache/spotplane/data)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for register in COMMAND_GROUPS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    splog.configure("DEBUG" if args.debug else None)
    handler: Handler = args.handler
    try:
        return int(handler(args) or 0)
    except SpotplaneError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"spotplane: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("spotplane: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
