"""`hpsearch ls` and list_sweeps: the table, --json, damaged sweeps beside healthy ones,
and the default storage ($HPSEARCH_STORAGE)."""

from __future__ import annotations

import json
from datetime import timedelta

import pandas as pd
import pytest
from click.testing import CliRunner
from synthetic_sweep import T0, make_sweep

import hpsearch
from hpsearch.cli import main
from hpsearch.store.layout import DEFAULT_STORAGE, default_storage
from hpsearch.store.listing import LISTING_KEYS, list_sweeps


@pytest.fixture
def storage(tmp_path):
    root = tmp_path / "runs"
    make_sweep(root, "night-1", start=T0 - timedelta(days=1), seed=1)
    make_sweep(root, "night-2", start=T0, seed=2, status="interrupted")
    return root


def test_list_sweeps_summarises_each_sweep_newest_first(storage):
    rows = list_sweeps(storage)
    assert [r["name"] for r in rows] == ["night-2", "night-1"]
    for row in rows:
        assert tuple(row) == LISTING_KEYS
        trials = hpsearch.read_trials(storage / row["name"])
        best = trials.loc[trials.best_value.idxmin()]
        assert row["best_value"] == best.best_value and row["best_trial"] == best.trial_id
        assert row["best_config"]["lr"] == best.lr
        assert row["best_config"]["precision"] == best.precision
        assert ("loss_scale_init" in row["best_config"]) == (best.precision == "fp16")
        assert row["worker_hours"] == pytest.approx(trials.worker_s.sum() / 3600)
        assert row["gpu_hours"] == pytest.approx(trials.gpu_s.sum() / 3600)
        assert row["trials_ended"] == int(trials.status.isin(
            ["completed", "stopped_by_asha", "failed", "diverged"]).sum())
        assert row["trials_planned"] == 16
        assert (row["metric"], row["mode"]) == ("val_loss", "min")
        assert row["started_at"].startswith(("2026-01-29T01:00", "2026-01-30T01:00"))
        assert row["ended_at"] > row["started_at"]
    assert rows[0]["status"] == "interrupted" and rows[1]["status"] == "finished"


def test_ls_prints_a_table_and_the_same_as_json(storage):
    runner = CliRunner()
    out = runner.invoke(main, ["ls", "--storage", str(storage)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "TRIALS", "BEST", "WORKER-H", "STARTED",
                                "ENDED", "BEST", "CONFIG"]
    rows = list_sweeps(storage)
    assert len(rows) == 2 and len(lines) == 1 + len(rows), out.output  # a line per sweep
    for line, row in zip(lines[1:], rows, strict=True):
        assert line.startswith(row["name"]) and row["status"] in line
        assert f"{row['trials_ended']}/16" in line
        assert f"val_loss {row['best_value']:.4g}" in line
        assert f"lr={row['best_config']['lr']:.4g}" in line
        assert f"{row['worker_hours']:.3g}" in line
    as_json = runner.invoke(main, ["ls", "--json", "--storage", str(storage)])
    assert as_json.exit_code == 0
    assert json.loads(as_json.output) == json.loads(json.dumps(rows))


def _damage(sweep, how):
    if how == "truncated trials.parquet":
        data = sweep.trials.read_bytes()
        sweep.trials.write_bytes(data[: len(data) // 2])
    elif how == "garbage trials.parquet":
        sweep.trials.write_bytes(b"not a parquet file at all")
    elif how == "manifest is a JSON list":
        sweep.manifest.write_text("[1, 2, 3]\n")
    elif how == "no status column":
        pd.read_parquet(sweep.trials).drop(columns="status").to_parquet(sweep.trials)
    elif how == "trials.parquet is a directory":
        sweep.trials.unlink()
        (sweep.trials / "part-0.parquet").parent.mkdir()
    elif how == "manifest is not JSON":
        sweep.manifest.write_text("{not json")


@pytest.mark.parametrize("how", ["truncated trials.parquet", "garbage trials.parquet",
                                 "manifest is a JSON list", "no status column",
                                 "trials.parquet is a directory", "manifest is not JSON"])
def test_a_damaged_sweep_is_listed_as_damaged_and_the_others_as_usual(storage, how):
    from hpsearch.store.layout import SweepDir

    _damage(SweepDir(storage.resolve() / "night-1"), how)
    rows = {r["name"]: r for r in list_sweeps(storage)}
    assert rows["night-2"]["status"] == "interrupted" and rows["night-2"]["best_value"]
    damaged = rows["night-1"]
    assert damaged["status"].startswith("damaged: ")
    assert len(damaged["status"]) <= len("damaged: ") + 80
    expected = {"truncated trials.parquet": "cannot be read as a table",
                "garbage trials.parquet": "cannot be read as a table",
                "manifest is a JSON list": "is not a JSON object",
                "no status column": "no status column",
                "trials.parquet is a directory": "trials.parquet is a directory",
                "manifest is not JSON": "cannot be read"}[how]
    assert expected in damaged["status"]
    assert tuple(damaged) == LISTING_KEYS and damaged["best_value"] is None
    out = CliRunner().invoke(main, ["ls", "--storage", str(storage)])
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if ln.startswith("night-1"))
    assert line.split(None, 1)[1] == damaged["status"]
    as_json = CliRunner().invoke(main, ["ls", "--json", "--storage", str(storage)])
    assert as_json.exit_code == 0 and len(json.loads(as_json.output)) == 2


def test_ls_and_resume_default_to_hpsearch_storage(storage, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HPSEARCH_STORAGE", str(storage))
    out = CliRunner().invoke(main, ["ls"])
    assert out.exit_code == 0 and "night-1" in out.output and "night-2" in out.output
    other = tmp_path / "elsewhere"
    other.mkdir()
    out = CliRunner().invoke(main, ["ls", "--storage", str(other)])  # the flag wins
    assert out.exit_code == 0 and out.output.strip() == f"no sweeps in {other}"
    out = CliRunner().invoke(main, ["resume", "--help"])
    assert "$HPSEARCH_STORAGE" in out.output


def test_default_storage_is_flag_then_environment_then_space_then_runs(monkeypatch):
    monkeypatch.delenv("HPSEARCH_STORAGE", raising=False)
    assert default_storage() == DEFAULT_STORAGE == "./runs"
    assert default_storage(space_storage="/data/space") == "/data/space"
    monkeypatch.setenv("HPSEARCH_STORAGE", "/data/env")
    assert default_storage(space_storage="/data/space") == "/data/env"
    assert default_storage("/data/flag", space_storage="/data/space") == "/data/flag"
    monkeypatch.setenv("HPSEARCH_STORAGE", "")  # empty counts as unset
    assert default_storage(space_storage="/data/space") == "/data/space"
    assert default_storage("") == DEFAULT_STORAGE
