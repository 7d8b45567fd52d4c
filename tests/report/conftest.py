"""Fixtures of the report tests: synthetic sweeps (tests/synthetic_sweep.py)."""

from __future__ import annotations

import pytest
from synthetic_sweep import make_sweep


@pytest.fixture
def storage(tmp_path):
    return tmp_path / "runs"


@pytest.fixture
def sweep(storage):
    return make_sweep(storage)
