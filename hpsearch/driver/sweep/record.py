"""A sweep's record across runs: the study journal and the trial tables, made to agree.

The study is where a trial begins (asked, or continued) and where its end becomes
durable; the tables are the view written from the records every few seconds. Two moments
bring them together:

* :func:`reconcile`, when a sweep resumes: a trial the study has ended but the tables do
  not (the driver was killed between the two) is ended as the study says; a trial the
  study still runs is *unfinished* (its reports the tables missed are recovered from the
  study), and this run continues it under its own id from its newest checkpoint; a row the study does not know (written by an older hpsearch, or
  after a lost journal append) that never ended is ended as ``stopped``.
* :func:`settle`, when a sweep has ended for good (finished, time budget, deadline,
  all-failed stop, stall) rather than been interrupted: every trial the study still runs
  is ended as ``stopped`` in both, and every trial the study holds has a row.
"""

from __future__ import annotations

from typing import Any, Iterable

from hpsearch.driver.search.study import RecordedTrial, recorded_trials, study_outcome
from hpsearch.store import status as st
from hpsearch.store.records import TrialRecords

__all__ = ["reconcile", "settle"]


def _status_of(trial: RecordedTrial) -> str:
    """The table status of an ended trial of the study (its ``status`` attribute; sweeps
    of older hpsearch versions may lack it)."""
    if trial.status in st.ENDED:
        return trial.status
    return {"COMPLETE": st.COMPLETED, "PRUNED": st.STOPPED}.get(trial.state.name, st.FAILED)


def reconcile(records: TrialRecords, recorded: Iterable[RecordedTrial]) -> list[RecordedTrial]:
    """Make ``records`` (loaded from the tables) agree with the study's ``recorded``
    trials; returns the unfinished ones, to continue, in the study's order."""
    unfinished = []
    for trial in recorded:
        row = records.trials.get(trial.trial_id)
        if not trial.ended:
            unfinished.append(trial)
            if trial.intermediate:  # reports the tables missed stay in the history
                records.recover_reports(trial.trial_id, params=trial.params,
                                        values=trial.intermediate)
            records.link_optuna(trial.trial_id, trial.number)
        elif row is None or row.get("status") not in st.ENDED:
            records.end_as_recorded(trial.trial_id, params=trial.params,
                                    status=_status_of(trial), optuna_trial=trial.number,
                                    values=trial.intermediate, final_value=trial.value)
    return unfinished


def settle(study: Any, records: TrialRecords, *, journal: Any = None) -> dict[int, str]:
    """End, in the study and the records, every trial the study still runs; returns what
    was told (Optuna number -> state name). A trial that was asked but never started gets
    a ``stopped`` row, so the trial table lists every trial the study holds."""
    import optuna

    from hpsearch.driver.internals import reopen_trial

    told: dict[int, str] = {}
    for trial in recorded_trials(study):
        if trial.ended:
            continue
        if trial.trial_id not in records.trials:
            records.add_without_reports(trial.trial_id, trial.params, optuna_trial=trial.number)
        status = records.end(trial.trial_id, budget_expired=True)
        row = records.trials[trial.trial_id]
        state, value = study_outcome(status, value=row.get("final_value"),
                                     has_reports=bool(trial.intermediate))
        handle = reopen_trial(study, trial.number)
        handle.set_user_attr("status", status)
        study.tell(handle, value, state=state, skip_if_finished=True)
        told[trial.number] = state.name
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if "trial_id" not in trial.user_attrs:  # an older hpsearch's, never linked
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            told[trial.number] = "FAIL"
    if told and journal is not None:
        journal.sync()
    return told
