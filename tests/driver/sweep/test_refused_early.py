"""What ``run_sweep`` refuses before it connects to Ray or makes anything. No Ray."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hpsearch.driver.sweep.run import run_sweep
from hpsearch.errors import InvalidArgumentError
from hpsearch.space import load_space

QUICKSTART = Path(__file__).parents[3] / "search_spaces" / "quickstart.yaml"


def test_a_misspelt_warm_start_name_is_refused_and_leaves_no_sweep_behind(tmp_path):
    """Checked after the sweep's directory was made, the name left a sweep listed as
    running with no trial, and the corrected command was refused as a sweep that exists."""
    (tmp_path / "night-1").mkdir()
    spec = load_space(QUICKSTART)
    spec = replace(spec, search=replace(spec.search, warm_start=("nigth-1",)))
    with pytest.raises(InvalidArgumentError, match="--warm-start 'nigth-1': no earlier sweep"):
        run_sweep(spec, name="night-2", storage=str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["night-1"]
