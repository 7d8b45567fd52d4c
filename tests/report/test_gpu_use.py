"""The report names the trials that kept their GPUs busy under 80% of the time, from a
synthetic sweep whose reports carry gpu_util_pct (tests/synthetic_sweep.py). No Ray."""

from __future__ import annotations

import pytest

import hpsearch
from hpsearch.report import load_sweep, write_report
from hpsearch.report._accounting import gpu_use

from synthetic_sweep import make_sweep


def busy(params, epoch):
    """fp32 trials measure nothing (a node without nvidia-ml-py); bf16 trials sit exactly
    on the line (80%: not named); fp16 trials are starved: 50% at epoch 1, 70% after."""
    return {"fp32": None, "bf16": 80.0, "fp16": 50.0 if epoch == 1 else 70.0}[
        params["precision"]]


@pytest.fixture(scope="module")
def starved(tmp_path_factory):
    sweep = make_sweep(tmp_path_factory.mktemp("starved") / "runs", gpu_util=busy)
    return sweep, hpsearch.read_trials(sweep)


def test_gpu_use_names_the_trials_under_80_percent_least_busy_first(starved):
    sweep, trials = starved
    fp16 = trials[trials.precision == "fp16"]
    # Worked by hand from the table: a trial ASHA stopped at epoch 1 reported 50% once;
    # the one that trained 9 epochs reported 50 then 70 eight times: 610 / 9.
    assert sorted(fp16.epochs) == [1, 1, 1, 1, 9]
    expected = {str(t): ((50.0, 50.0) if e == 1 else (610 / 9, 50.0))
                for t, e in zip(fp16.trial_id, fp16.epochs)}
    use = gpu_use(load_sweep(sweep))
    got = {r["trial_id"]: (r["util_pct"], r["lowest_pct"]) for r in use["idle"]}
    assert got.keys() == expected.keys()
    assert all(got[t] == pytest.approx(expected[t]) for t in expected), (got, expected)
    assert [r["util_pct"] for r in use["idle"]] == pytest.approx([50.0] * 4 + [610 / 9])
    # Measured: the 5 fp16 trials and the 4 bf16 ones that reported (the failed one never
    # did); the 6 fp32 trials held GPU time without a figure.
    assert (use["measured"], use["unmeasured"]) == (9, 6)
    held = {str(t): g for t, g in zip(trials.trial_id, trials.gpu_s)}
    assert [r["gpu_s"] for r in use["idle"]] == [held[r["trial_id"]] for r in use["idle"]]


def test_the_report_says_which_trials_starved_their_gpus_and_why_it_matters(starved):
    sweep, trials = starved
    md = write_report(sweep).md.read_text()
    fp16 = trials[trials.precision == "fp16"]
    held_h = fp16.gpu_s.sum() / 3600
    assert held_h == pytest.approx(1760 / 3600)  # 4 x 160 s + 1120 s
    said = next(ln for ln in md.splitlines() if "busy less than 80%" in ln)
    assert said.startswith("5 of 9 trial(s) kept their GPUs busy less than 80% of the time "
                           "while training (`gpu_util_pct`, the mean of their reports), "
                           "holding 0.4889 GPU-hours.")
    assert "input pipeline" in said and "paid for them bought nothing" in said
    assert said.endswith("6 other trial(s) held GPUs without measuring it.")
    rows = [ln for ln in md.splitlines()
            if ln.startswith("| ") and ("| 50.0 | 50.0 |" in ln or "| 67.8 | 50.0 |" in ln)]
    assert sorted(r.split(" | ")[0].lstrip("| ") for r in rows) == sorted(fp16.trial_id)
    compute = next(ln for ln in md.splitlines() if ln.startswith("| **Compute**"))
    assert "5 trial(s) kept their GPUs busy under 80% of the time" in compute


def test_a_sweep_without_utilisation_says_how_to_measure_it(sweep):
    md = write_report(sweep).md.read_text()
    # Every trial but the failed one held GPU time; none reported gpu_util_pct.
    assert "15 trial(s) held GPUs but reported no utilisation (`gpu_util_pct`): install " \
           "nvidia-ml-py on the GPU nodes to measure it." in md
    compute = next(ln for ln in md.splitlines() if ln.startswith("| **Compute**"))
    assert "busy under" not in compute


def test_a_sweep_whose_gpus_were_busy_names_none(storage):
    sweep = make_sweep(storage, gpu_util=lambda params, epoch: 95.0)
    md = write_report(sweep).md.read_text()
    assert "Every trial that measured its GPU utilisation (15) kept its GPUs busy at least " \
           "80% of the time while training." in md
    assert "busy less than" not in md
