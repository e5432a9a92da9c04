"""The floors of docs/architecture.md, enforced: import-linter's layers contract, every module on
one floor, and no first-party import hidden inside a function without a reason written beside it."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tools.modules_doc import DOC, current

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
PACKAGES: list[str] = CONFIG["root_packages"]
LAYERS = [name.strip() for row in CONFIG["contracts"][0]["layers"] for name in row.split("|")]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _floor(module: str) -> str | None:
    return next((layer for layer in LAYERS if module == layer or module.startswith(layer + ".")), None)


def test_every_module_stands_on_one_floor() -> None:
    unplaced = [m for m in _modules() if _floor(m) is None and m not in PACKAGES]
    assert unplaced == [], f"modules on no floor of [tool.importlinter]: {unplaced}"


def _said_why(lines: list[str], i: int) -> bool:
    """A comment on the import's line, or above the block of imports it belongs to."""
    if "#" in lines[i]:
        return True
    while i > 0 and lines[i - 1].strip().startswith(("from ", "import ")):
        i -= 1
    return i > 0 and lines[i - 1].strip().startswith("#")


def _function_imports(path: Path) -> list[tuple[int, str]]:
    """First-party imports inside a function body with no comment on their line or the line above."""
    lines = path.read_text().splitlines()
    found = []
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            mod = (node.module if isinstance(node, ast.ImportFrom) and node.level == 0 else
                   node.names[0].name if isinstance(node, ast.Import) else None)
            if mod is None or mod.split(".")[0] not in PACKAGES:
                continue
            if not _said_why(lines, node.lineno - 1):
                found.append((node.lineno, mod))
    return found


def test_no_first_party_import_inside_a_function_without_a_reason() -> None:
    hidden = {str(p.relative_to(ROOT)): imps for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
              if (imps := _function_imports(p))}
    assert hidden == {}, f"move these imports to the module's top, or say why beside them: {hidden}"


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is installed by `make venv`")
def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)

    def lint() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, capture_output=True,
                              text=True, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})

    kept = lint()
    assert kept.returncode == 0, kept.stdout[-2000:]
    quota = tmp_path / "policies" / "quota.py"
    quota.write_text(quota.read_text() + "\n\ndef _upward() -> None:\n    import serve.app  # noqa\n")
    broken = lint()
    assert broken.returncode == 1
    assert "policies.quota -> serve.app" in broken.stdout


def test_the_architecture_docs_list_every_module_with_its_summary() -> None:
    """docs/architecture.md's module map is what the tree holds (``python -m tools.modules_doc``
    rewrites it after a module is added, moved or renamed)."""
    text = DOC.read_text()
    assert current(text) == text, "run `python -m tools.modules_doc` and commit docs/architecture.md"
