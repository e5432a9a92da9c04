"""Fixtures of the cluster tests that boot emulated machines."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.clusters.bootemu import Bridge, bridged


@pytest.fixture
def bridge() -> Iterator[Bridge]:
    """A bridge for this test's emulated machines, removed after it."""
    with bridged() as made:
        yield made
