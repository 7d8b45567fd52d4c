"""MLflow: one run per trial, nested under one run per sweep (``docs/tracking.md``).

Runs are found again by their tags, never by anything kept beside the sweep: the sweep's
run has ``hpsearch.sweep`` (its name), ``hpsearch.sweep_id`` (its name and when it was
made: a sweep made again under the same name gets runs of its own) and ``hpsearch.kind:
sweep``; a trial's run has both, ``hpsearch.trial_id``, ``hpsearch.optuna_trial`` and
``mlflow.parentRunId``, and ``hpsearch.last_step`` (``hpsearch.last_log_step``) is the
last step of its reports (``log_every`` rows) it holds, updated in the same request as the
metrics (:class:`~hpsearch.track.base.Steps`). So a resume continues each trial's run where
it stopped, with no gap and no repeat, a run the killed driver made before its parameters
went out gets them, and an export into an experiment that already has the sweep adds
nothing.

Metrics are logged at the history row's ``step``; every number of a report is a metric
(the objective, ``epoch``, ``time_total_s``, the ``log_every`` training rows...). A trial's
end sets its run's state: ``completed`` FINISHED; ``stopped_by_asha``, ``stopped`` and
``diverged`` KILLED; ``failed`` and ``unsupported_precision`` FAILED with the error as the
``hpsearch.error`` tag; ``hpsearch.status`` holds the status itself.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Mapping, Sequence

from hpsearch.store import status as st
from hpsearch.store.reports import epoch_seconds
from hpsearch.track.base import (FAILED, FINISHED, KILLED, SweepFacts, Tracker, TrackError,
                                 end_state, numeric_metrics, Steps)

__all__ = ["MlflowTracker", "resolve_tracking_uri"]

SWEEP, TRIAL_ID, KIND = "hpsearch.sweep", "hpsearch.trial_id", "hpsearch.kind"
SWEEP_ID = "hpsearch.sweep_id"
STATUS, ERROR, OPTUNA = "hpsearch.status", "hpsearch.error", "hpsearch.optuna_trial"
PARENT = "mlflow.parentRunId"
#: What runs made before ``hpsearch.last_step`` kept: how many history rows they held.
_COUNTED = "hpsearch.rows_sent"
#: MLflow's limits on one ``log_batch`` (metrics, and all entries together).
_BATCH_METRICS, _BATCH_OTHERS = 1000, 90
#: How a sweep status ends the sweep's run.
_SWEEP_END = {st.SWEEP_FINISHED: FINISHED, st.SWEEP_DEADLINE: FINISHED,
              st.SWEEP_NO_TRIAL_COMPLETED: FINISHED, st.SWEEP_ALL_FAILED: FAILED,
              st.SWEEP_MISSING_METRIC: FAILED}
# The client's own retries would hold a call for minutes against a server that is down;
# the pump retries instead, and says so once.
_FAST = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
         "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


def resolve_tracking_uri(uri: str | None) -> str:
    """``uri``, else ``$MLFLOW_TRACKING_URI``.

    Raises:
        TrackError: Neither is set.
    """
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise TrackError("track.mlflow has no tracking_uri and $MLFLOW_TRACKING_URI is not "
                         "set: add `tracking_uri: http://HOST:5000` to track.mlflow")
    return uri


class MlflowTracker(Tracker):
    """A sweep's runs in one MLflow experiment.

    Args:
        tracking_uri: The tracking server (``http://host:5000``), or any URI MLflow takes.
        experiment: The experiment's name (created if missing).
    """

    def __init__(self, tracking_uri: str, experiment: str):
        self.uri = tracking_uri
        self.experiment = experiment
        self.where = f"MLflow at {tracking_uri}"
        self._client: Any = None
        self._experiment_id: str | None = None
        self._sweep_run: str | None = None
        self._runs: dict[str, str] = {}  # trial id -> run id
        self._params_held: dict[str, set[str]] = {}  # trial id -> parameters its run has
        self._counted: dict[str, Any] = {}  # trial id -> its run's rows_sent, if any
        self._state: dict[str, str] = {}  # trial id -> the run's status
        self._started_at: dict[str, float] = {}
        self._facts: SweepFacts | None = None
        self._steps = Steps("training_iteration")
        # due at the next flush, trial by trial in the order they were noted:
        self._work: dict[str, list[Mapping[str, Any]]] = {}  # trial id -> rows to send
        self._rows: dict[str, Mapping[str, Any]] = {}  # trial id -> its latest row
        self._ending: dict[str, Mapping[str, Any]] = {}  # trial id -> its row at its end
        self._params_due: dict[str, dict[str, str]] = {}  # a new run's parameters
        self._revive: set[str] = set()  # runs to set RUNNING again

    # --- the tracker's side of the record ------------------------------------------------

    def check(self) -> None:
        try:
            self._connect(experiment=False).search_experiments(max_results=1)
        except Exception as exc:  # noqa: BLE001 - any failure is the one line
            raise TrackError(f"cannot reach MLflow at {self.uri}: {_first_line(exc)}") from None

    def sync(self, facts: SweepFacts, trials: Sequence[Mapping[str, Any]],
             history: Sequence[Mapping[str, Any]]) -> None:
        self._facts = facts
        if self._steps.time_attr != facts.time_attr:
            self._steps = Steps(facts.time_attr)
        client = self._connect()
        self._find_runs(facts)
        if self._sweep_run is None:
            self._sweep_run = client.create_run(
                self._experiment_id, run_name=facts.name,
                tags={SWEEP: facts.name, SWEEP_ID: facts.identity, KIND: "sweep",
                      "hpsearch.path": facts.path, **_source()}).info.run_id
            if facts.fixed:  # what every trial gets; each trial's run has its searched ones
                _log(client, self._sweep_run,
                     params={k: _param(v) for k, v in facts.fixed.items()})
        else:
            client.update_run(self._sweep_run, status="RUNNING")
        by_trial: dict[str, list[Mapping[str, Any]]] = {}
        for row in history:
            by_trial.setdefault(str(row.get("trial_id")), []).append(row)
        for row in trials:
            trial_id = str(row["trial_id"])
            self._rows[trial_id] = row
            rows = by_trial.get(trial_id, [])
            self._steps.learn(trial_id, rows)
            self._steps.restore_count(trial_id, self._counted.pop(trial_id, 0), rows)
            self._work.setdefault(trial_id, []).extend(rows)  # flush sends what runs lack
            if trial_id in self._runs:  # a run made by a driver killed before it logged
                held = self._params_held.get(trial_id, set())  # the parameters
                missing = {k: _param(row[k]) for k in facts.params
                           if k not in held and row.get(k) is not None}
                if missing:
                    self._params_due[trial_id] = missing
            if end_state(row.get("status")) is not None:
                self._ending[trial_id] = row
        self.flush()

    # Events only note what is due (they never fail); :meth:`flush`, which the pump calls
    # once it has taken every queued event, sends it: one run's new rows, parameters and
    # end in one request however many reports queued up while the server was slow.

    def started(self, trial_id: str, row: Mapping[str, Any]) -> None:
        self._rows[trial_id] = row
        self._work.setdefault(trial_id, [])
        if self._state.get(trial_id, "RUNNING") != "RUNNING":
            self._revive.add(trial_id)  # continued after a resume: RUNNING again

    def reported(self, trial_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self._work.setdefault(trial_id, []).extend(rows)

    def ended(self, trial_id: str, row: Mapping[str, Any]) -> None:
        self._rows[trial_id] = row
        self._ending[trial_id] = row
        self._work.setdefault(trial_id, [])

    def flush(self) -> None:
        """Send what the events noted, trial by trial. Each step is kept once it passed,
        so a flush that failed part-way is made again from where it stopped."""
        refused = None
        for trial_id in list(self._work):
            try:
                self._flush_trial(trial_id)
            except Exception as exc:
                if self.transient(exc):
                    raise  # the pump makes the flush again, from this trial on
                refused = refused or exc  # what MLflow refuses for good is let go, so the
                self._steps.sent(trial_id, self._steps.due(  # rest goes on
                    trial_id, self._work[trial_id]))
                for due in (self._ending, self._params_due):
                    due.pop(trial_id, None)
            del self._work[trial_id]
        if refused is not None:
            raise refused

    def closed(self, status: str, facts: SweepFacts, best: Mapping[str, Any] | None,
               front: Sequence[Mapping[str, Any]]) -> None:
        self.flush()
        client = self._connect()
        if self._sweep_run is None:
            return
        run = self._sweep_run
        tags = {STATUS: status}
        metrics: dict[str, float] = {}
        if best is not None:  # the objective's column of the runs table shows the best
            tags["hpsearch.best_trial"] = str(best.get("trial_id"))
            if isinstance(best.get("best_value"), (int, float)):
                metrics[_key(facts.metric)] = float(best["best_value"])
        if front:
            tags["hpsearch.front"] = ",".join(str(r.get("trial_id")) for r in front)[:5000]
        _log(client, run, metrics=[(k, v, 0) for k, v in metrics.items()], tags=tags)
        for name, text in facts.files.items():
            client.log_text(run, text, name)
        for trial_id, state in self._state.items():  # paused: resume sets them RUNNING
            if state == "RUNNING":
                _log(client, self._runs[trial_id], tags={STATUS: status})
                client.set_terminated(self._runs[trial_id], status=KILLED)
                self._state[trial_id] = KILLED
        client.set_terminated(run, status=_SWEEP_END.get(status, KILLED))

    def transient(self, error: BaseException) -> bool:
        from mlflow.exceptions import MlflowException

        if isinstance(error, MlflowException):
            code = getattr(error, "error_code", "")
            text = str(error)
            return (code in ("TEMPORARILY_UNAVAILABLE", "INTERNAL_ERROR", "ENDPOINT_NOT_FOUND")
                    or "API request to" in text or "Max retries" in text)
        return super().transient(error) or type(error).__module__.startswith(
            ("requests", "urllib3"))

    # --- inside ----------------------------------------------------------------------------

    def _connect(self, *, experiment: bool = True) -> Any:
        """The client; with ``experiment``, the experiment found or created too."""
        if self._client is None:
            os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
            from mlflow.tracking import MlflowClient

            for key, value in _FAST.items():
                os.environ.setdefault(key, value)
            self._client = MlflowClient(tracking_uri=self.uri)
        if experiment and self._experiment_id is None:
            found = self._client.get_experiment_by_name(self.experiment)
            self._experiment_id = (found.experiment_id if found is not None
                                   else self._client.create_experiment(self.experiment))
        return self._client

    def _find_runs(self, facts: SweepFacts) -> None:
        """The sweep's runs already in the experiment, by their tags."""
        token = None
        while True:
            page = self._client.search_runs(
                [self._experiment_id],
                filter_string=f"tags.`{SWEEP_ID}` = '{_quoted(facts.identity)}'",
                max_results=1000, page_token=token)
            for run in page:
                tags = run.data.tags
                if tags.get(KIND) == "sweep":
                    self._sweep_run = run.info.run_id
                elif TRIAL_ID in tags:
                    trial_id = tags[TRIAL_ID]
                    self._runs[trial_id] = run.info.run_id
                    self._steps.restore(trial_id, {k: tags.get(f"hpsearch.{k}")
                                                   for k in (Steps.REPORTS, Steps.LOGS)})
                    self._params_held[trial_id] = set(run.data.params)
                    self._counted[trial_id] = tags.get(_COUNTED)  # an earlier hpsearch's
                    self._state[trial_id] = run.info.status
            token = page.token
            if not token:
                return

    def _run_of(self, trial_id: str, row: Mapping[str, Any] | None) -> str:
        """The trial's run, created (with its parameters and tags) if it has none."""
        if trial_id in self._runs:
            return self._runs[trial_id]
        facts = self._facts
        client = self._connect()
        tags = {TRIAL_ID: trial_id, SWEEP: facts.name if facts else "",
                SWEEP_ID: facts.identity if facts else "", PARENT: self._sweep_run or "",
                **_source()}
        if row is not None and row.get("optuna_trial") is not None:
            tags[OPTUNA] = str(int(row["optuna_trial"]))
        started = epoch_seconds((row or {}).get("started_at"))
        run = client.create_run(self._experiment_id, run_name=trial_id, tags=tags,
                                start_time=int(started * 1000) if started else None)
        run_id = run.info.run_id
        names = facts.params if facts else ()
        self._params_due[trial_id] = {k: _param(row[k]) for k in names
                                      if row and row.get(k) is not None}
        self._runs[trial_id] = run_id
        self._state[trial_id] = "RUNNING"
        if started:
            self._started_at[trial_id] = started
        return run_id

    def _flush_trial(self, trial_id: str) -> None:
        """The trial's run (created if new), revived if it continues; its new rows, its
        parameters if new, and its end's tags in one request; then its end state."""
        client = self._connect()
        run = self._run_of(trial_id, self._rows.get(trial_id))
        if trial_id in self._revive:
            client.update_run(run, status="RUNNING")
            self._state[trial_id] = "RUNNING"
            self._revive.discard(trial_id)
        placed = self._steps.due(trial_id, self._work.get(trial_id, []))
        ending = self._ending.get(trial_id)
        params = self._params_due.get(trial_id, {})
        tags = ({f"hpsearch.{k}": str(v) for k, v in self._steps.marks(trial_id, placed).items()}
                if placed else {})
        if ending is not None:
            tags[STATUS] = str(ending.get("status"))
            if ending.get("error"):
                tags[ERROR] = str(ending["error"])[:5000]
            if ending.get("optuna_trial") is not None:  # linked after the run was made
                tags[OPTUNA] = str(int(ending["optuna_trial"]))
        if placed or params or tags:
            _log(client, run, metrics=self._metrics(trial_id, placed), params=params, tags=tags)
            self._steps.sent(trial_id, placed)
            self.rows_sent += len(placed)
            self._params_held.setdefault(trial_id, set()).update(params)
            self._params_due.pop(trial_id, None)
        self._work[trial_id] = []
        state = end_state((ending or {}).get("status"))
        if state is not None and self._state.get(trial_id) != state:
            ended = epoch_seconds(ending.get("ended_at"))
            client.set_terminated(run, status=state,
                                  end_time=int(ended * 1000) if ended else None)
            self._state[trial_id] = state
        self._ending.pop(trial_id, None)

    def _metrics(self, trial_id: str, placed: Sequence[tuple[int, Mapping[str, Any]]]
                 ) -> list[tuple]:
        now = time.time()
        start = self._started_at.get(trial_id)
        metrics = []
        for step, row in placed:
            total = row.get("time_total_s")
            at = (start + total if start and isinstance(total, (int, float)) else now)
            metrics += [(_key(k), v, step, int(at * 1000))
                        for k, v in numeric_metrics(row).items()]
        return metrics


def _log(client: Any, run_id: str, *, metrics: Sequence[tuple] = (),
         params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None) -> None:
    """One ``log_batch``, or several within MLflow's limits (1,000 metrics, 100 parameters
    and tags, per request); the tags go last, so ``hpsearch.last_step`` is never ahead."""
    from mlflow.entities import Metric, Param, RunTag

    now = int(time.time() * 1000)
    metrics = [Metric(m[0], m[1], m[3] if len(m) > 3 else now, m[2]) for m in metrics]
    params = [Param(k, v) for k, v in (params or {}).items()]
    tags = [RunTag(k, v) for k, v in (tags or {}).items()]
    while len(metrics) > _BATCH_METRICS or (params and len(params) + len(tags) > _BATCH_OTHERS):
        head, metrics = metrics[:_BATCH_METRICS], metrics[_BATCH_METRICS:]
        some, params = params[:_BATCH_OTHERS], params[_BATCH_OTHERS:]
        client.log_batch(run_id, metrics=head, params=some, tags=[])
    client.log_batch(run_id, metrics=metrics, params=params, tags=tags)


def _source() -> dict[str, str]:
    """The runs table's "Created by" and "Source": who ran the sweep, and hpsearch."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return {"mlflow.user": user, "mlflow.source.name": "hpsearch", "mlflow.source.type": "JOB"}


def _key(name: str) -> str:
    """A metric name MLflow takes: letters, digits and ``_-. :/`` (others become ``_``);
    a name it refuses would make it refuse the whole report."""
    return re.sub(r"[^\w\-. :/]", "_", name)[:250] or "_"


def _param(value: Any) -> str:
    text = repr(value) if isinstance(value, float) else str(value)
    return text[:6000]


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _first_line(error: BaseException) -> str:
    """What went wrong, short: the client's messages nest the cause in a long URL line."""
    text = str(error)
    for sign, says in (("Connection refused", "connection refused"),
                       ("NewConnectionError", "connection refused"),
                       ("Name or service not known", "unknown host"),
                       ("nodename nor servname", "unknown host"),
                       ("Read timed out", "timed out"), ("ConnectTimeout", "timed out")):
        if sign in text:
            return says
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else type(error).__name__)[:300]
