"""What a sweep's MLflow experiment holds, read with MLflow's own client, against the
sweep's tables: the checks the tracked-sweep tests share."""

from __future__ import annotations

from pathlib import Path

import hpsearch

#: Trial statuses and the run states they end in (docs/tracking.md).
RUN_STATE = {"completed": "FINISHED", "stopped_by_asha": "KILLED", "stopped": "KILLED",
             "diverged": "KILLED", "failed": "FAILED", "unsupported_precision": "FAILED"}


def curve_steps(rows) -> list[int | None]:
    """Each history row's place on its curve: its step; a report recovered from the study
    (no step, docs/trial-tables.md) at its epoch times the trial's steps per epoch, or
    ``None`` where no row of the trial has a step (the killed driver sent it at its real
    step, which the tables never held)."""
    import pandas as pd

    known = rows[rows.step.notna() & (rows.epoch > 0)]
    per_epoch = float((known.step / known.epoch).iloc[-1]) if len(known) else None
    return [int(s) if not pd.isna(s) else
            (int(round(e * per_epoch)) if per_epoch is not None else None)
            for s, e in zip(rows.step, rows.epoch)]


def runs_of(uri: str, experiment: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return client.search_runs([found.experiment_id], max_results=1000)


def trial_runs(uri: str, experiment: str) -> dict[str, list]:
    """Trial id -> its runs (a list, so that a second run of one trial shows)."""
    out: dict[str, list] = {}
    for run in runs_of(uri, experiment):
        if "hpsearch.trial_id" in run.data.tags:
            out.setdefault(run.data.tags["hpsearch.trial_id"], []).append(run)
    return out


def assert_mlflow_matches_tables(uri: str, experiment: str, sweep: Path, metric: str) -> None:
    """One run per trial under the sweep's one run; each trial's curve of ``metric`` is
    its history's, step for step (no gap, no repeat); its state is its status's; its
    parameters are its row's."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    trials = hpsearch.read_trials(sweep).set_index("trial_id")
    history = hpsearch.read_history(sweep)
    runs = runs_of(uri, experiment)
    sweeps = [r for r in runs if r.data.tags.get("hpsearch.kind") == "sweep"]
    assert len(sweeps) == 1, [r.info.run_name for r in sweeps]
    parent = sweeps[0].info.run_id
    by_trial = trial_runs(uri, experiment)
    assert sorted(by_trial) == sorted(trials.index), (sorted(by_trial), list(trials.index))
    for trial_id, row in trials.iterrows():
        (run,) = by_trial[trial_id]  # exactly one run per trial
        assert run.data.tags["mlflow.parentRunId"] == parent
        assert run.info.status == RUN_STATE[row.status], (trial_id, row.status, run.info.status)
        assert run.data.tags["hpsearch.status"] == row.status
        assert run.data.tags["hpsearch.optuna_trial"] == str(int(row.optuna_trial))
        assert float(run.data.params["lr"]) == row.lr
        logged = sorted((m.step, m.value)
                        for m in client.get_metric_history(run.info.run_id, metric))
        ours = history[(history.trial_id == trial_id) & history[metric].notna()]
        ours = ours.sort_values("epoch", kind="stable")
        expected = list(zip(curve_steps(ours), ours[metric].astype(float)))
        # each report once, in order (no gap, no repeat), each at its step where known
        assert [v for _, v in logged] == [v for _, v in expected], (trial_id, logged, expected)
        assert all(step is None or step == at for (at, _), (step, _) in zip(logged, expected)), (
            trial_id, logged, expected)
