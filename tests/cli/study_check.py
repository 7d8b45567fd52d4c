"""The check that a sweep's Optuna study and its trial tables tell the same story.

Used by the tests that run real sweeps. The study is opened the way docs/trial-tables.md
tells users to, with plain Optuna.
"""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

import hpsearch
from hpsearch.driver.searcher import study_outcome, study_step
from hpsearch.space import load_space
from hpsearch.store.layout import SweepDir


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
    may be in the study only. Every history row must still be in the study.
    """
    trials = hpsearch.read_trials(sweep_dir)
    history = hpsearch.read_history(sweep_dir)
    spec = load_space(SweepDir.of(sweep_dir).space)
    study = open_study(sweep_dir, name)
    s = spec.scheduler
    milestones = (*s.rungs(), s.max_t) if s.type == "asha" else (s.max_t,)
    metric = spec.objective.metric

    by_id = {t.user_attrs.get("trial_id"): t for t in study.trials}
    assert len(study.trials) == len(by_id) == len(trials), "a phantom or unlinked trial"
    assert set(by_id) == set(trials.trial_id)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    for row in trials.itertuples(index=False):
        trial = by_id[row.trial_id]
        assert trial.number == row.optuna_trial, row.trial_id
        assert trial.user_attrs["status"] == row.status, row.trial_id
        mine = history[history.trial_id == row.trial_id].sort_values("step")
        expected: dict[int, float] = {}
        for report in mine.itertuples(index=False):
            value = getattr(report, metric)
            if value is None or not math.isfinite(value):
                continue
            key = study_step(getattr(report, s.result_key), milestones, expected)
            if expected and key <= max(expected):
                continue
            expected[key] = value
        got = trial.intermediate_values
        if history_may_lag:
            got = {k: v for k, v in got.items() if k in expected}
        assert got == pytest.approx(expected), (row.trial_id, row.status,
                                                trial.intermediate_values, expected)
        state, value = study_outcome(row.status, value=row.final_value,
                                     has_reports=bool(trial.intermediate_values))
        assert trial.state == state, (row.trial_id, row.status, trial.state)
        if state == optuna.trial.TrialState.COMPLETE:
            assert trial.value == pytest.approx(row.final_value)
        for p in spec.params:
            if p.name in trial.params:
                assert trial.params[p.name] == pytest.approx(getattr(row, p.name)), p.name
    return study
