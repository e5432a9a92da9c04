"""The "Modules, by floor" section of docs/architecture.md, from each module's first docstring line.

``python -m tools.modules_doc`` rewrites the section; ``tests/test_layers.py`` checks that it is
current, so a module added, moved or renamed shows up in the map the next engineer reads.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
HEADING = "## Modules, by floor\n"


def floors() -> list[list[str]]:
    """The layers of the import-linter contract, top floor first, each a list of packages."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "floors"]
    return [[p.strip() for p in layer.split("|")] for layer in contract["layers"]]


def summary(path: Path) -> str:
    """The first line of the module's docstring (its one-line summary)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.strip().splitlines()[0] if doc.strip() else "(no docstring)"


def modules_of(package: str, taken: set[Path]) -> list[Path]:
    """The package's modules not claimed by a deeper package of another floor, sorted."""
    base = ROOT / package.replace(".", "/")
    found = [base.with_suffix(".py")] if base.with_suffix(".py").is_file() else sorted(base.rglob("*.py"))
    return [p for p in found if p not in taken and "__pycache__" not in p.parts]


def section() -> str:
    """The section's text: one heading per floor, one line per module."""
    layers = floors()
    claimed: dict[str, list[Path]] = {}
    taken: set[Path] = set()
    packages = [p for layer in layers for p in layer]
    for package in sorted(packages, key=lambda p: -p.count(".")):  # deeper packages first
        claimed[package] = modules_of(package, taken)
        taken.update(claimed[package])
    out = [HEADING]
    for number, layer in zip(range(len(layers), 0, -1), layers, strict=True):
        out.append(f"\n**floor {number}: {' | '.join(layer)}**\n\n")
        for package in layer:
            for path in claimed[package]:
                out.append(f"- `{path.relative_to(ROOT)}` — {summary(path)}\n")
    return "".join(out)


def current(doc: str) -> str:
    """``doc`` with its modules section replaced by :func:`section` (it runs to the file's end)."""
    return doc[: doc.index(HEADING)] + section()


def main() -> int:
    DOC.write_text(current(DOC.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
