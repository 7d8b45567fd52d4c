"""`hpsearch report` on synthetic sweeps: the files, their images, the facts they state
(best configuration, ledger, funnel), and sweeps that went wrong. No Ray."""

from __future__ import annotations

import base64
import io
import json
import math
import re
import subprocess
import sys
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

import hpsearch
from hpsearch.cli import main
from hpsearch.errors import SweepNotFoundError
from hpsearch.report import _comparison, equal_budget, find_previous, load_sweep, write_report
from hpsearch.report._facts import funnel, ledger
from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import new_manifest, write_manifest

from synthetic_sweep import EPOCH_S, SPACE, STARTUP_S, T0, make_sweep


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One synthetic sweep and its report, written once for the tests that only read."""
    sweep = make_sweep(tmp_path_factory.mktemp("written") / "runs")
    return sweep, write_report(sweep)


def html_images(text: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', text)]


def test_report_is_one_self_contained_page_whose_images_decode(written):
    sweep, paths = written
    assert paths == (sweep.report_html, sweep.report_md)
    html = paths.html.read_text()
    # Nothing to fetch: no script, no stylesheet link, every image inline.
    assert "<script" not in html and "<link" not in html
    assert not re.search(r'(src|href)="(?!data:|#)', html)
    images = html_images(html)
    assert len(images) >= 7
    for png in images:
        with Image.open(io.BytesIO(png)) as im:
            im.load()
            assert im.format == "PNG" and im.size[0] >= 300 and im.size[1] >= 150
    # The Markdown links the same figures, saved next to it.
    md = paths.md.read_text()
    linked = re.findall(r"!\[[^\]]*\]\((report-images/[a-z_]+\.png)\)", md)
    assert len(linked) == len(images)
    for rel in linked:
        assert (sweep.path / rel).read_bytes() in images


def test_markdown_and_html_list_the_best_configuration_of_the_trial_table(written):
    sweep, paths = written
    trials = hpsearch.read_trials(sweep)
    best = trials.loc[trials["best_value"].idxmin()]
    md, html = paths.md.read_text(), paths.html.read_text()
    summary = next(ln for ln in md.splitlines() if ln.startswith("| **Best**"))
    assert f"from trial {best.trial_id}" in summary
    assert f"val\\_loss {best.best_value:.4g}" in summary
    config = next(ln for ln in md.splitlines() if ln.startswith("| **Configuration**"))
    assert f"lr={best.lr:.4g}" in config and f"warmup\\_steps={best.warmup_steps}" in config
    assert f"precision={best.precision}" in config
    rerun = next(ln for ln in md.splitlines() if ln.startswith("| **Rerun it**"))
    assert f"--set lr={float(best.lr)!r}" in rerun and str(sweep.space) in rerun
    assert f"from trial {best.trial_id}" in html


def test_ledger_adds_up_to_the_trial_tables_worker_and_gpu_seconds(written):
    sweep, paths = written
    trials = hpsearch.read_trials(sweep)
    data = load_sweep(sweep)
    book = ledger(data)
    assert book.worker_s == pytest.approx(trials["worker_s"].sum(), rel=1e-12)
    assert book.gpu_s == pytest.approx(trials["gpu_s"].sum(), rel=1e-12)
    assert book.worker_s > 0 and book.gpu_s > 0
    assert math.fsum(v["worker_s"] for v in book.by_status.values()) == \
        pytest.approx(book.worker_s, rel=1e-12)
    assert math.fsum(v["gpu_s"] for v in book.by_status.values()) == \
        pytest.approx(book.gpu_s, rel=1e-12)
    assert sum(v["trials"] for v in book.by_status.values()) == len(trials)
    stopped = trials[trials.status == "stopped_by_asha"]
    assert book.asha_worker_s == pytest.approx(stopped["worker_s"].sum(), rel=1e-12)
    assert book.asha_gpu_s == pytest.approx(stopped["gpu_s"].sum(), rel=1e-12)
    # The Markdown's total row states those sums.
    md = paths.md.read_text()
    total = next(ln for ln in md.splitlines() if ln.startswith("| total |"))
    assert f"| {trials['worker_s'].sum():.1f} | {trials['gpu_s'].sum():.1f} |" in total


def test_saved_estimate_extends_each_stopped_trial_to_max_t_at_its_own_rate(written):
    sweep, _ = written
    data = load_sweep(sweep)
    book = ledger(data)
    trials = hpsearch.read_trials(sweep).set_index("trial_id")
    stopped = trials[trials.status == "stopped_by_asha"]
    assert {d["trial_id"] for d in book.saved_detail} == set(stopped.index)
    workers = SPACE["resources"]["workers"]
    for d in book.saved_detail:
        row = stopped.loc[d["trial_id"]]
        rate = EPOCH_S[row.precision]  # the synthetic sweep's seconds per epoch
        assert d["rate_s"] == pytest.approx(rate)
        assert d["saved_worker_s"] == pytest.approx(rate * (9 - row.epochs) * workers)
        assert d["saved_gpu_s"] == pytest.approx(d["saved_worker_s"])  # 1 GPU per worker
    own = [d for d in book.saved_detail if d["how"] == "own reports"]
    assert own and all(stopped.loc[d["trial_id"]].epochs > 1 for d in own)
    assert book.saved_worker_s == pytest.approx(math.fsum(d["saved_worker_s"]
                                                          for d in book.saved_detail))


def test_funnel_counts_trials_per_rung_and_where_they_stopped(written):
    sweep, _ = written
    trials = hpsearch.read_trials(sweep)
    rows = {r["milestone"]: r for r in funnel(load_sweep(sweep))}
    assert list(rows) == ["before", 1, 3, 9]
    for mark in (1, 3, 9):
        assert rows[mark]["reached"] == int((trials.epochs >= mark).sum())
    asha = trials[trials.status == "stopped_by_asha"]
    assert rows[1]["stopped_by_asha"] == int((asha.epochs < 3).sum())
    assert rows[3]["stopped_by_asha"] == int(((asha.epochs >= 3) & (asha.epochs < 9)).sum())
    assert rows[9]["ended_otherwise"] == {"completed": int((trials.status == "completed").sum())}
    assert rows["before"]["ended_otherwise"] == {"failed": 1}
    assert rows[1]["went_on"] == rows[3]["reached"]


def test_importance_compares_trials_at_one_budget(written):
    sweep, paths = written
    data = load_sweep(sweep)
    mark, frame = equal_budget(data, min_trials=5)
    trials = hpsearch.read_trials(sweep)
    assert mark == 9 and len(frame) == int((trials.epochs >= 9).sum())
    history = hpsearch.read_history(sweep)
    for row in frame.itertuples():
        at = history[(history.trial_id == row.trial_id) & (history.epoch == 9)]
        assert row.value == at.val_loss.iloc[0]
    mark, frame = equal_budget(data, min_trials=8)  # fewer reached 9 and 3: the first rung
    assert mark == 1 and len(frame) == int(np.isfinite(
        history[history.epoch == 1].val_loss).sum())
    html = paths.html.read_text()
    assert "equal-budget rows: the 5 trials that reached epoch 9" in html
    assert "<td>lr</td>" in html  # the importance table


def test_failed_trials_show_their_error_escaped(written):
    _, paths = written
    html, md = paths.html.read_text(), paths.md.read_text()
    assert "\x1b" not in html and "\x1b" not in md
    assert "RuntimeError: CUDA error: out of memory\\x1b[31m | &lt;b&gt;x&lt;/b&gt;" in html
    assert "<b>x</b>" not in html
    assert "out of memory\\\\x1b\\[31m \\| \\<b\\>x\\</b\\>" in md


def test_report_of_a_sweep_with_no_trial_says_so(storage):
    sweep = SweepDir(storage.resolve() / "empty")
    sweep.path.mkdir(parents=True)
    import yaml

    sweep.space.write_text(yaml.safe_dump(SPACE))
    manifest = new_manifest(name="empty", argv=["hpsearch", "run", "x.yaml"], seed=0,
                            cluster={"CPU": 2.0}, address=None,
                            objective={"metric": "val_loss", "mode": "min"})
    manifest["status"] = "no_trial_completed"
    write_manifest(sweep, manifest)
    paths = write_report(sweep)
    md = paths.md.read_text()
    assert "no\\_trial\\_completed" in md
    assert "no trial reported a finite objective value" in md
    assert "No trial has started." in md
    assert not list(sweep.report_images.glob("*.png"))


def test_report_of_an_interrupted_all_failed_sweep(storage):
    sweep = make_sweep(storage, "broken", n=3, status="interrupted", specials=False)
    trials = pd.read_parquet(sweep.trials)
    trials["status"] = "failed"
    trials["error"] = "ValueError: bad\rline"
    trials.to_parquet(sweep.trials)
    md = write_report(sweep).md.read_text()
    assert "interrupted" in md and "`hpsearch resume broken`" in md
    assert md.count("ValueError: bad\\\\rline") == 3


@pytest.mark.parametrize("damage", ["garbage", "directory", "no_status", "no_space"])
def test_report_of_a_damaged_sweep_names_what_it_could_not_read(storage, damage):
    sweep = make_sweep(storage, "hurt")
    if damage == "garbage":
        sweep.trials.write_bytes(b"PAR1 not really")
    elif damage == "directory":
        sweep.trials.unlink()
        sweep.trials.mkdir()
    elif damage == "no_status":
        pd.read_parquet(sweep.trials).drop(columns="status").to_parquet(sweep.trials)
    else:
        sweep.space.unlink()
    md = write_report(sweep).md.read_text()
    note = next(ln for ln in md.splitlines() if ln.startswith("> **Note:**"))
    expected = {"garbage": "trials.parquet could not be read",
                "directory": "trials.parquet is a directory",
                "no_status": "trials.parquet has no trial\\_id/status column",
                "no_space": "space.yaml could not be loaded"}[damage]
    assert expected in note
    if damage == "no_space":  # the tables still speak: best trial, ledger
        assert "from trial" in md and "| total |" in md


def test_history_rows_between_evaluations_do_not_break_the_curves(sweep):
    history = pd.read_parquet(sweep.history)
    extra = history.copy()
    extra["epoch"] = extra["epoch"] - 0.5
    extra["val_loss"] = np.nan  # a logged training step: no evaluation
    sweep.remove(sweep.history)  # written back as one file: the layout before 3 reads too
    pd.concat([history, extra]).to_parquet(sweep.history)
    html = write_report(sweep).html.read_text()
    assert "could not be drawn" not in html
    assert "evaluations and logged steps alike" in html


def test_stale_figures_of_an_earlier_report_are_removed(written):
    sweep, paths = written
    before = {p.name: p.read_bytes() for p in sweep.report_images.glob("*.png")}
    (sweep.report_images / "old.png").write_bytes(b"x")
    write_report(sweep)
    assert not (sweep.report_images / "old.png").exists()
    assert {p.name for p in sweep.report_images.glob("*.png")} == set(before)


def test_compare_previous_picks_the_newest_earlier_sweep_of_the_same_space(storage):
    old = make_sweep(storage, "lm-1", start=T0 - timedelta(days=2), shift=0.3, seed=1)
    last = make_sweep(storage, "lm-2", start=T0 - timedelta(days=1), shift=0.2, seed=2)
    make_sweep(storage, "other", start=T0 - timedelta(hours=5), space_name="other", seed=3)
    make_sweep(storage, "lm-4", start=T0 + timedelta(days=1), seed=4)
    tonight = make_sweep(storage, "lm-3", start=T0, seed=5)
    assert find_previous(tonight) == last
    assert find_previous(last) == old
    assert find_previous(old) is None

    md = write_report(tonight, compare="previous").md.read_text()
    theirs = hpsearch.read_trials(last)
    mine = hpsearch.read_trials(tonight)
    headline = next(ln for ln in md.splitlines() if ln.startswith("| **Since previous**"))
    assert f"{mine.best_value.min():.4g} against {theirs.best_value.min():.4g} in lm-2" \
        in headline
    assert "## Compared with lm-2" in md
    best_then = theirs.loc[theirs.best_value.idxmin()]
    row = next(ln for ln in md.splitlines() if ln.startswith("| best lr |"))
    assert f"| {best_then.lr:.4g} |" in row

    other, note = _comparison(load_sweep(tonight), "lm-1")
    assert other.sweep == old and note is None
    with pytest.raises(SweepNotFoundError, match="no sweep named 'nope'"):
        write_report(tonight, compare="nope")
    other, note = _comparison(load_sweep(old), "previous")
    assert other is None and "no earlier sweep of the space 'nightly-lm'" in note


def test_cli_report_finds_the_sweep_through_hpsearch_storage(storage, monkeypatch):
    sweep = make_sweep(storage, "cli")
    runner = CliRunner()
    result = runner.invoke(main, ["report", "cli", "--storage", str(storage)])
    assert result.exit_code == 0, result.output
    assert str(sweep.report_html) in result.output and str(sweep.report_md) in result.output
    monkeypatch.setenv("HPSEARCH_STORAGE", str(storage))
    result = runner.invoke(main, ["report", "missing"])
    assert result.exit_code == 2 and f"no sweep at {storage.resolve() / 'missing'}" in result.output
    # Found through the environment: the error is about --compare, not the sweep.
    result = runner.invoke(main, ["report", "cli", "--compare", "nope"])
    assert result.exit_code == 2 and "no sweep named 'nope'" in result.output


def test_report_package_imports_neither_ray_nor_torch():
    code = ("import sys, hpsearch.report, hpsearch.report._build, hpsearch.cli.report\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_equal_budget_study_holds_one_trial_per_row_with_its_trial_id(sweep):
    from hpsearch.report import equal_budget_study, importances

    mark, frame = equal_budget(load_sweep(sweep))
    study = equal_budget_study(sweep)
    assert study.user_attrs["budget"] == f"epoch {mark}"
    assert sorted(t.user_attrs["trial_id"] for t in study.trials) == sorted(frame.trial_id)
    assert [t.value for t in sorted(study.trials, key=lambda t: t.user_attrs["trial_id"])] == \
        list(frame.sort_values("trial_id").value)
    found = importances(study)
    assert set(found) == {"lr", "warmup_steps", "precision"}  # the conditional one is left out
    assert sum(found.values()) == pytest.approx(1.0)
    assert json.loads(json.dumps(found)) == found


def test_sweep_facts_use_manifest_rungs_and_space_max_t(sweep):
    data = load_sweep(sweep)
    assert data.rungs == [1, 3] and data.max_t == 9 and data.status == "finished"
    assert STARTUP_S > 0


def test_load_study_opens_the_study_file_the_sweep_has_and_creates_none(written, tmp_path):
    import optuna

    from hpsearch.report import load_study
    from hpsearch.report._study import storage_at

    sweep = make_sweep(tmp_path / "runs", "with-study", n=3, specials=False)
    assert load_study(sweep) is None
    assert not any(p.name.startswith("optuna") for p in sweep.path.iterdir())
    study = optuna.create_study(study_name="with-study", storage=storage_at(sweep.optuna))
    study.add_trial(optuna.trial.create_trial(
        params={"lr": 0.01}, distributions={"lr": optuna.distributions.FloatDistribution(
            1e-4, 3e-2, log=True)}, value=0.5))
    loaded = load_study(sweep)
    assert loaded.study_name == "with-study" and [t.value for t in loaded.trials] == [0.5]


def test_reports_recovered_from_the_study_are_counted_where_the_plot_leaves_them_out(tmp_path,
                                                                                     written):
    """They have no time, so the best-over-time plot cannot place them: its text says how
    many it left out (a sweep without any says nothing of them)."""
    from hpsearch.space import load_space
    from hpsearch.store.records import TrialRecords
    from hpsearch.store.tables import write_tables

    sweep = make_sweep(tmp_path / "runs")
    records = TrialRecords(load_space(sweep.space))
    records.load(hpsearch.read_trials(sweep).to_dict("records"),
                 hpsearch.read_history(sweep).to_dict("records"))
    records.end_as_recorded("lost0001", params={"lr": 0.01}, status="completed",
                            optuna_trial=99, values={1: 2.0, 2: 1.9}, final_value=1.9)
    write_tables(records, sweep)
    assert "2 report(s) recovered from the study" in write_report(sweep).md.read_text()
    assert "recovered from the study" not in written[1].md.read_text()
