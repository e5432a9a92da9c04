"""A PostgreSQL server that cannot start fails the PostgreSQL tests under CI and skips them,
saying why, elsewhere (``tests/pgfixtures.py``)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tests import pgfixtures


def broken_pgserver(monkeypatch: pytest.MonkeyPatch) -> None:
    def get_server(root: Path, cleanup_mode: str) -> None:
        raise RuntimeError("initdb: cannot be run as root")

    monkeypatch.setitem(sys.modules, "pgserver", types.SimpleNamespace(get_server=get_server))


def outcome(root: Path) -> BaseException:
    """What ``start_server`` raised: pytest's failure or its skip (caught here, so that a skip
    where a failure is due fails this test instead of skipping it)."""
    try:
        pgfixtures.start_server(root)
    except (pytest.fail.Exception, pytest.skip.Exception) as exc:
        return exc
    raise AssertionError("a server started from a broken pgserver")


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_under_ci_a_server_that_cannot_start_fails(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path, ci: str) -> None:
    broken_pgserver(monkeypatch)
    monkeypatch.setenv("CI", ci)
    exc = outcome(tmp_path / "data")
    assert isinstance(exc, pytest.fail.Exception), exc
    assert str(exc).startswith("PostgreSQL tests cannot run under CI: pgserver could not start "
                               f"PostgreSQL in {tmp_path / 'data'}: initdb: cannot be run as root")


def test_under_ci_a_missing_pgserver_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pgserver", None)  # import raises ImportError
    monkeypatch.setenv("CI", "true")
    exc = outcome(tmp_path / "data")
    assert isinstance(exc, pytest.fail.Exception), exc
    assert "the pgserver package is not installed" in str(exc)


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_elsewhere_it_skips_and_warns_with_the_reason(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, ci: str | None) -> None:
    broken_pgserver(monkeypatch)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.warns(pytest.PytestWarning, match="PostgreSQL tests are skipped: pgserver could "
                      "not start.*cannot be run as root"), \
            pytest.raises(pytest.skip.Exception, match="cannot be run as root"):
        pgfixtures.start_server(tmp_path / "data")
