"""Tables of a sampled mutation run (docs/mutation.md, "Sampled run").

Reads the sample (one mutant name a line, from ``tools/mutation_sample.py``), mutmut's results in
``mutants/**/*.py.meta`` and the hand classification of every mutant that was not killed
(``docs/mutation-survivors.tsv``: name, class, status after the added tests, reason), and prints
per stratum and overall: what was run, killed, what survived by class, and the kill rate among
behaviour-changing mutants with a 95 % Wilson interval (overall: weighted by stratum size).

    python -m tools.mutation_report sample.txt docs/mutation-survivors.tsv
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

from mutmut.stats import status_by_exit_code

from tools.mutation_sample import STRATA, mutant_names

CLASSES = ("equivalent", "message", "sql-case", "logging", "behaviour")
Z95 = 1.959963984540054
KILLED = ("killed", "timeout", "segfault")  # a timeout or a crash is a test run that failed


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k / n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (mid - half, mid + half)


def statuses(root: Path) -> dict[str, str]:
    """Every mutant's last status under mutmut's ``mutants/`` (killed, survived, no tests, ...)."""
    out: dict[str, str] = {}
    for meta in root.rglob("*.py.meta"):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            out[name] = status_by_exit_code[code]
    return out


def stratum_of(name: str) -> str:
    """The stratum of a mutant name (its module path as a file prefix)."""
    path = name.split(".x")[0].replace(".", "/") + ".py"
    return next(s for s, (prefix, _) in STRATA.items() if path.startswith(prefix))


def _killed_after(row: dict[str, str]) -> bool:
    """A behaviour-changing survivor that the added tests kill (message text and the other
    classes stay in their columns, so that both tables have the same denominators)."""
    return row["class"] == "behaviour" and row["after"] == "killed"


def main(argv: list[str] | None = None) -> int:
    """Print the markdown tables (before and after the added tests)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sample", type=Path)
    ap.add_argument("survivors", type=Path)
    ap.add_argument("--mutants", type=Path, default=Path("mutants"))
    args = ap.parse_args(argv)
    sample = [s for s in args.sample.read_text().split() if s]
    status = statuses(args.mutants)
    with args.survivors.open() as f:
        rows = {r["name"]: r for r in csv.DictReader(f, delimiter="\t")}
    population = {s: len(v) for s, v in mutant_names(args.mutants).items()}
    for when in ("before", "after"):
        print(f"\n{when} the added tests\n")
        print("| stratum | mutants | sampled | run | killed | not killed: equivalent "
              "| message text | SQL case | logging | behaviour | of these, no test reached "
              "| kill rate, behaviour-changing | 95 % Wilson |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        total_w, est, var, pooled = 0.0, 0.0, 0.0, [0, 0]
        for stratum in STRATA:
            names = [n for n in sample if stratum_of(n) == stratum]
            run = [n for n in names if status[n] in (*KILLED, "survived", "no tests")]
            killed = sum(1 for n in run if status[n] in KILLED)
            no_test = sum(1 for n in run if status[n] == "no tests")
            by_class = dict.fromkeys(CLASSES, 0)
            for n in run:
                if status[n] in ("survived", "no tests"):
                    if n not in rows:
                        raise SystemExit(f"{n} is not classified in {args.survivors}")
                    if when == "after" and _killed_after(rows[n]):
                        killed += 1
                    else:
                        by_class[rows[n]["class"]] += 1
            if when == "after":
                no_test = sum(1 for n in run if status[n] == "no tests"
                              and not _killed_after(rows[n]))
            denom = killed + by_class["behaviour"]
            lo, hi = wilson(killed, denom)
            rate = killed / denom if denom else float("nan")
            print(f"| {stratum} | {population[stratum]} | {len(names)} | {len(run)} | {killed} | "
                  + " | ".join(str(by_class[c]) for c in CLASSES)
                  + f" | {no_test} | {killed}/{denom} = {100 * rate:.1f} % "
                  f"| {100 * lo:.1f}-{100 * hi:.1f} % |")
            if denom and run:
                w = population[stratum] * denom / len(run)  # behaviour-changing mutants, est.
                total_w += w
                est += w * rate
                var += w * w * rate * (1 - rate) / denom
                pooled[0] += killed
                pooled[1] += denom
        p = est / total_w
        half = Z95 * math.sqrt(var) / total_w
        lo, hi = wilson(*pooled)
        print(f"\noverall, weighted by stratum: {100 * p:.1f} % "
              f"(95 %: {100 * max(p - half, 0):.1f}-{100 * min(p + half, 1):.1f} %, normal); "
              f"pooled sample: {pooled[0]}/{pooled[1]} = {100 * pooled[0] / pooled[1]:.1f} % "
              f"(95 % Wilson {100 * lo:.1f}-{100 * hi:.1f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
