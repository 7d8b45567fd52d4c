"""``benchmarks/record_curves.py``: the same sample of the space on every run, every
evaluation of every run as a row, and a recording that resumes where it stopped."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import record_curves  # noqa: E402

SPACE = str(ROOT / "search_spaces" / "quickstart.yaml")


def test_the_sample_is_the_same_each_time_and_inside_the_space():
    first, again = record_curves.configs(SPACE, 8), record_curves.configs(SPACE, 8)
    assert first == again and len({c["lr"] for c in first}) == 8
    assert all(1e-4 <= c["lr"] <= 3e-2 and c["warmup_steps"] in (0, 10, 20, 30, 40)
               and c["precision"] in ("fp32", "bf16") for c in first)


def test_a_recording_keeps_every_evaluation_and_resumes_without_repeating(tmp_path):
    out = tmp_path / "curves.parquet"
    done = record_curves.record(SPACE, out, n_configs=2, seeds=1, procs=1, minutes=None)
    assert done["ran"] == 2
    table = pd.read_parquet(out)
    assert len(table) == 2 * 6  # quickstart's max_t: 6 epochs a run
    run = table[table.config_id == 0].sort_values("epoch")
    assert list(run.epoch) == [1, 2, 3, 4, 5, 6] and run.elapsed_s.is_monotonic_increasing
    assert list(run.status)[-1] == "completed" and run.value.notna().all()
    done = record_curves.record(SPACE, out, n_configs=2, seeds=2, procs=1, minutes=None)
    assert done["ran"] == 2  # only seed 1 of each configuration was missing
    table = pd.read_parquet(out)
    assert table.groupby(["config_id", "seed"]).size().to_dict() == {
        (0, 0): 6, (0, 1): 6, (1, 0): 6, (1, 1): 6}


def test_a_table_says_which_machine_recorded_it_and_another_machine_cannot_extend_it(tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "curves.parquet"
    record_curves.record(SPACE, out, n_configs=1, seeds=1, procs=1, minutes=None)
    here = record_curves.recorded_on(out)
    assert here == f"{record_curves.machine()}; 1 process(es)" and "torch" in here
    table = pq.read_table(out)  # the same runs, as another machine would have left them
    pq.write_table(table.replace_schema_metadata(
        {**table.schema.metadata, record_curves.MACHINE_KEY: b"another CPU; 1 process(es)"}), out)
    with pytest.raises(SystemExit, match="was recorded on another CPU"):
        record_curves.record(SPACE, out, n_configs=1, seeds=2, procs=1, minutes=None)
    assert len(pd.read_parquet(out)) == 6  # nothing added, nothing lost
