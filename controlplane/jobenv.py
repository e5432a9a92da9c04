"""The environment a tenant's job process sees: an explicit allow-list, nothing inherited.

A Ray job's entrypoint inherits the environment of the Raylet / dashboard agent that starts it
(whatever the process that started the Ray cluster had), and ``runtime_env`` can only add to it.
So the executor runs every entrypoint through this launcher::

    python -m controlplane.jobenv KEY1,KEY2 -- python train.py --steps 10

which keeps only :data:`SYSTEM_KEYS`, Ray's own connection variables (``RAY_*``, the job's own
cluster), the variables the executor sets for the job (:data:`SPOTPLANE_KEYS`) and the user's
own keys (``KEY1,KEY2``: the job spec's ``env``), then ``exec``s the command. Any other variable
(``SPOTPLANE_ADMIN_TOKEN``, cloud credentials, ...) is dropped, whatever the cluster's raylet had.
This module imports nothing but the standard library: it runs before the user's program.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

SYSTEM_KEYS = frozenset({
    "PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME",
    "SHELL", "TERM", "PYTHONPATH", "PYTHONUNBUFFERED", "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
})
SPOTPLANE_KEYS = frozenset({
    "SPOTPLANE_JOB_ID", "SPOTPLANE_REPLICA_ID", "SPOTPLANE_TENANT_ID", "SPOTPLANE_ARTIFACT_URI",
    "SPOTPLANE_S3_ENDPOINT_URL", "SPOTPLANE_CHECKPOINT_ACTOR", "SPOTPLANE_RAY_NAMESPACE",
    "SPOTPLANE_NODE_ID", "SPOTPLANE_PLACEMENT_GROUP",
})
RAY_PREFIX = "RAY_"
# numeric libraries' settings (BLAS kernel, threads): they change floating-point results
NUMERIC_PREFIXES = ("OPENBLAS_", "MKL_", "OMP_", "KMP_", "NVPL_", "BLIS_", "NUMEXPR_", "GOTO_")
RESERVED_PREFIX = "SPOTPLANE_"  # the executor's names: a user's env cannot set or extend them


def user_keys(env: Mapping[str, str]) -> list[str]:
    """The user's own variable names a job keeps (``SPOTPLANE_*`` names are the executor's)."""
    return sorted(k for k in env if not k.startswith(RESERVED_PREFIX) and k and "," not in k)


def allowed(environ: Mapping[str, str], extra: Sequence[str] = ()) -> dict[str, str]:
    """``environ`` filtered to the allow-list plus ``extra`` names."""
    keep = SYSTEM_KEYS | SPOTPLANE_KEYS | set(extra)
    return {k: v for k, v in environ.items()
            if k in keep or k.startswith(RAY_PREFIX) or k.startswith(NUMERIC_PREFIXES)}


def main(argv: Sequence[str]) -> int:
    """``KEYS -- command...``: exec the command in the filtered environment."""
    args = list(argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m controlplane.jobenv KEY1,KEY2 -- command [args...]", file=sys.stderr)
        return 2
    extra = [k for k in args[0].split(",") if k]
    command = args[2:]
    os.execvpe(command[0], command, allowed(os.environ, extra))
    return 127  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
