"""Draw a seeded, stratified random sample of mutmut's mutants (docs/mutation.md, "Sampled run").

Reads the mutant names mutmut wrote into `mutants/**/*.py.meta` (``--generate`` runs mutmut's
generation step first, without running any test), groups them by stratum (the policies, the reconcile phases, the store,
the quota actor) and prints a uniform random sample of each stratum, one name a line. The same
seed and sizes on the same tree give the same sample.

    python -m tools.mutation_sample --generate --seed 2026 > sample.txt
    nice -n 15 mutmut run --max-children 2 $(cat sample.txt)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
from pathlib import Path

# stratum -> (path prefix of the mutated files, default sample size)
STRATA: dict[str, tuple[str, int]] = {
    "policies": ("policies/", 80),
    "reconcile": ("controlplane/reconcile/", 80),
    "store": ("controlplane/store/", 60),
    "quota actor": ("actors/quota.py", 40),
}


def mutant_names(root: Path) -> dict[str, list[str]]:
    """Every mutant name under `root` (mutmut's `mutants/`), sorted, per stratum."""
    out: dict[str, list[str]] = {s: [] for s in STRATA}
    for meta in sorted(root.rglob("*.py.meta")):
        rel = meta.relative_to(root).as_posix()[: -len(".meta")]
        for stratum, (prefix, _) in STRATA.items():
            if rel.startswith(prefix):
                out[stratum].extend(json.loads(meta.read_text())["exit_code_by_key"])
    return {s: sorted(names) for s, names in out.items()}


def generate() -> None:
    """mutmut's own first step of ``mutmut run``: copy the tree into ``mutants/`` and mutate it."""
    from mutmut.__main__ import (  # mutmut only where mutants are generated
        copy_also_copy_files,
        copy_src_dir,
        create_mutants,
        setup_source_paths,
    )

    Path("mutants").mkdir(exist_ok=True)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the sample
        copy_src_dir()
        copy_also_copy_files()
        setup_source_paths()
        create_mutants(2)


def draw(names: dict[str, list[str]], sizes: dict[str, int], seed: int) -> dict[str, list[str]]:
    """A uniform sample without replacement of each stratum, one `random.Random(seed)` in order."""
    rng = random.Random(seed)
    return {s: sorted(rng.sample(names[s], min(sizes[s], len(names[s])))) for s in STRATA}


def main(argv: list[str] | None = None) -> int:
    """Print the sample (stdout) and the population and sample sizes (stderr)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--mutants", type=Path, default=Path("mutants"))
    ap.add_argument("--generate", action="store_true",
                    help="generate the mutants first (mutmut's config in pyproject.toml)")
    for stratum, (_, n) in STRATA.items():
        ap.add_argument(f"--{stratum.replace(' ', '-')}", type=int, default=n,
                        help=f"sample size of the {stratum} stratum (default {n})")
    args = ap.parse_args(argv)
    if args.generate:
        generate()
    if not args.mutants.is_dir():
        ap.error(f"--mutants: {args.mutants} is not a directory; pass --generate")
    sizes = {s: getattr(args, s.replace(" ", "_")) for s in STRATA}
    names = mutant_names(args.mutants)
    sample = draw(names, sizes, args.seed)
    for stratum, picked in sample.items():
        print(f"{stratum}: {len(picked)} of {len(names[stratum])}", file=sys.stderr)
        for name in picked:
            print(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
