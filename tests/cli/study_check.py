"""The check that a sweep's Optuna study and its trial tables tell the same story.

Used by the tests that run real sweeps. The study is opened the way docs/trial-tables.md
tells users to, with plain Optuna, and what it must hold is computed here from the rule
that document states, written out again rather than taken from the code under test.
"""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

import hpsearch
from hpsearch.space import load_space
from hpsearch.store.layout import SweepDir


State = optuna.trial.TrialState
#: docs/trial-tables.md: the study state of each status (a ``stopped`` trial that never
#: reported is FAIL: Optuna cannot prune a trial without intermediate values).
STATE_OF = {"completed": State.COMPLETE, "stopped_by_asha": State.PRUNED,
            "stopped": State.PRUNED, "diverged": State.FAIL,
            "unsupported_precision": State.FAIL, "failed": State.FAIL}


def expected_intermediate(reports, milestones) -> dict[int, float]:
    """docs/trial-tables.md: each finite report at ``floor(t)``, except that the first
    report at or past a milestone (ASHA rung or max_t) goes at the milestone; a report
    whose step is not past the last one stored is not stored again."""
    out: dict[int, float] = {}
    for t, value in reports:
        if value is None or not math.isfinite(value):
            continue
        passed = [m for m in milestones if m <= t + 1e-9]
        key = math.floor(t + 1e-9)
        if passed and all(k < max(passed) for k in out):
            key = max(passed)
        if not out or key > max(out):
            out[int(key)] = value
    return out


def open_study(sweep_dir: Path, name: str) -> optuna.Study:
    path = SweepDir.of(sweep_dir).optuna
    assert path.is_file(), f"no study journal at {path}"
    return optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(str(path))))


def assert_study_matches_tables(sweep_dir: Path, name: str, *,
                                history_may_lag: bool = False) -> optuna.Study:
    """Row for row: one Optuna trial per trials.parquet row and no other, linked both ways
    (``trial_id`` attribute, ``optuna_trial`` column), the state the row's status maps to,
    the value of a completed trial, its parameters, and one intermediate value per history
    row at the row's study step (docs/trial-tables.md).

    ``history_may_lag``: the driver was killed at a moment the test did not choose; the
    reports of the last seconds before it (written to the study, not yet to the tables)
    may be in the study only. Every history row must still be in the study, at its own
    step or at a milestone it reached (with a report missing before it, the first report
    the history has past a rung is not the one the study stored there), and every trial's
    last report in the study is in the history.
    """
    trials = hpsearch.read_trials(sweep_dir)
    history = hpsearch.read_history(sweep_dir)
    spec = load_space(SweepDir.of(sweep_dir).space)
    study = open_study(sweep_dir, name)
    s = spec.scheduler
    milestones = (*s.rungs(), s.max_t) if s.type == "asha" else (s.max_t,)
    metric = spec.objective.metric

    # A driver killed between a trial's `ask` and its id's `set_user_attr` (two journal
    # appends, the trial's parameters sampled between them) leaves a trial that never ran
    # and has no id: the sweep's end tells it FAIL, and the samplers ignore it. Any other
    # trial of the study has its row.
    unlinked = [t for t in study.trials if "trial_id" not in t.user_attrs]
    assert all(t.state == optuna.trial.TrialState.FAIL for t in unlinked), unlinked
    linked = [t for t in study.trials if "trial_id" in t.user_attrs]
    by_id = {t.user_attrs["trial_id"]: t for t in linked}
    assert len(linked) == len(by_id) == len(trials), "a phantom or unlinked trial"
    assert set(by_id) == set(trials.trial_id)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    for row in trials.itertuples(index=False):
        trial = by_id[row.trial_id]
        assert trial.number == row.optuna_trial, row.trial_id
        assert trial.user_attrs["status"] == row.status, row.trial_id
        mine = history[history.trial_id == row.trial_id].sort_values("step")
        if "evaluated" in mine:
            mine = mine[mine.evaluated.fillna(True).astype(bool)]
        reports = list(zip(mine[s.result_key], mine[metric]))
        got = trial.intermediate_values
        if history_may_lag:
            for t, value in reports:
                if value is None or not math.isfinite(value):
                    continue
                steps = {math.floor(t + 1e-9)} | {m for m in milestones if m <= t + 1e-9}
                assert any(got.get(k) == pytest.approx(value) for k in steps), (
                    row.trial_id, t, value, got)
            # ... but an ended trial's last report is in the history: one the tables
            # never saw before the kill was recovered from the study on resume.
            if got and reports:  # (recovered rows have no step: compare the latest time)
                last = max(t for t, _ in reports)
                assert math.floor(last + 1e-9) == max(got), (row.trial_id, row.status, last, got)
        else:
            expected = expected_intermediate(reports, milestones)
            assert got == pytest.approx(expected), (row.trial_id, row.status, got, expected)
        state = STATE_OF[row.status]
        if row.status == "stopped" and not trial.intermediate_values:
            state = State.FAIL
        assert trial.state == state, (row.trial_id, row.status, trial.state)
        if state == State.COMPLETE:
            assert trial.value == pytest.approx(row.final_value)
        # Every parameter the row has (a conditional one is null where not sampled), and
        # no other, with its value.
        in_row = {p.name: getattr(row, p.name, None) for p in spec.params}
        in_row = {k: v for k, v in in_row.items() if v is not None and not pd.isna(v)}
        assert set(trial.params) == set(in_row), (row.trial_id, trial.params, in_row)
        for name, value in in_row.items():
            assert trial.params[name] == pytest.approx(value), (row.trial_id, name)
    return study
