"""Warm start: a new sweep learns from earlier sweeps of the same space.

Before the first suggestion, the trials of the named earlier sweeps (``--warm-start NAME``,
or ``latest``: the newest earlier sweep in the same storage whose space has the same
``name:``) are added to the new study, so TPE models them from trial 1:

* a trial that completed goes in ``COMPLETE`` with its value; one ASHA (or a deadline)
  stopped goes in ``PRUNED`` with its intermediate values, as the study of its own sweep
  has it (:func:`hpsearch.driver.record.study.study_step`); failed and diverged trials stay out;
* a trial fits the current space when every parameter the current space searches has a
  value inside its current range or choices (conditional ones only where their condition
  holds) and every value the current space fixes is the one it ran with; trials that do
  not fit are counted and skipped;
* the best ``search.warm_start_best`` configurations among the completed trials that
  fit (by their best value) run first (Optuna's
  ``enqueue_trial``), so last night's winners are measured again under tonight's code;
* with several objectives, a completed trial goes in with each objective's value (the
  trial table's columns), its reports as the sweep's own study keeps them
  (``report:<step>`` attributes), and its constraint violations at its last report; the
  winners run first are the sources' front (``pareto``), in the first objective's order.

The sweep's sampler seed is mixed with the sweep's name, so two warm-started nights with
``seed: 0`` do not draw the same random proposals. The manifest records what was imported.
:func:`warm_start` is the whole operation, as a new sweep begins: it hands the sweep's
record the spec with that seed and what was imported
(:meth:`~hpsearch.driver.record.sweep_record.SweepRecord.learnt_from`), whose manifest is
written as the run begins.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import replace
from typing import Any, Mapping

from hpsearch.errors import InvalidArgumentError
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.space import distributions, inside
from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir
from hpsearch.store.tables import python_value

__all__ = ["import_trials", "resolve_sources", "warm_seed", "warm_start"]

#: Statuses whose trials teach the sampler something.
_IMPORTED = (st.COMPLETED, st.STOPPED_BY_ASHA, st.STOPPED)


def warm_start(record: SweepRecord, stream: Any) -> None:
    """Seed a new sweep's study with earlier sweeps' trials; its ``record`` takes the spec
    with the sweep's own sampler seed and what was imported. The study is the record's,
    opened with one direction per objective, as the run opens it again with its sampler."""
    spec, sweep = record.spec, record.sweep
    spec = replace(spec, search=replace(spec.search,
                                        seed=warm_seed(spec.search.seed, sweep.name)))
    sources = resolve_sources(sweep, spec, spec.search.warm_start)
    if not sources:
        summary: dict[str, Any] = {"from": [], "imported": 0, "note": "no earlier sweep"}
        print("warm start: no earlier sweep of this space yet; starting fresh", file=stream)
    else:
        study = record.open_study()
        summary = import_trials(spec, study, sources)
        if record.journal is not None:
            record.journal.sync()
        print(f"warm start: {summary['imported']} trials from {', '.join(summary['from'])}"
              f" ({summary['not_fitting']} outside this space, {summary['skipped']} failed "
              f"or unfinished); {len(summary['enqueued'])} best configurations run first",
              file=stream)
    record.learnt_from(spec, summary)


def resolve_sources(sweep: SweepDir, spec: Spec, names: tuple[str, ...]) -> list[SweepDir]:
    """The earlier sweeps ``names`` refer to (``latest`` included), without repeats. Call
    it once ``sweep``'s space and manifest are written (``latest`` is the newest sweep
    that started before it with the same space ``name:``).

    Raises:
        InvalidArgumentError: A named sweep does not exist, or names this sweep itself.
    """
    from hpsearch.store.listing import find_previous

    out: list[SweepDir] = []
    for name in names:
        if name == "latest":
            found = find_previous(sweep)
            if found is None:
                continue  # the first night: nothing to learn from yet
        else:
            found = SweepDir.at(sweep.storage, name)
            if found.path == sweep.path or not found.exists():
                raise InvalidArgumentError(
                    f"--warm-start {name!r}: no earlier sweep of that name in {sweep.storage}"
                    " (hpsearch ls lists them)")
        if found.path not in [s.path for s in out]:
            out.append(found)
    return out


def warm_seed(seed: int | None, sweep_name: str) -> int | None:
    """The seed a warm-started sweep samples with: ``seed`` mixed with the sweep's name."""
    if seed is None:
        return None
    return (seed * 1_000_003 + zlib.crc32(sweep_name.encode())) % 2**32


def _fits(spec: Spec, row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The row's parameters as the current space would have sampled them, or ``None``."""
    params: dict[str, Any] = {}
    seen = dict(spec.fixed)
    for p in spec.params:
        if p.when is not None and not p.when.holds(seen):
            continue
        value = python_value(row.get(p.name))
        if value is None or not inside(p, value):
            return None
        params[p.name] = value
        seen[p.name] = value
    for key, fixed in spec.fixed.items():
        ran = python_value(row.get(key)) if key in row else None
        if ran is not None and ran != fixed:
            return None
    return params


def _reported(spec: Spec, rows: Any) -> dict[int, Any]:
    """``{study step: value}`` of a source trial's history rows, as its own study has them
    (one value, or a tuple of every objective's with several)."""
    from hpsearch.driver.record.study import study_step

    s = spec.scheduler
    milestones = (*s.rungs(), s.max_t) if s.type == "asha" else (s.max_t,)
    metrics = [o.metric for o in spec.objectives]
    out: dict[int, Any] = {}
    if rows is None or s.result_key not in rows or not all(m in rows for m in metrics):
        return out
    for t, *values in zip(rows[s.result_key], *(rows[m] for m in metrics)):
        t, values = python_value(t), [python_value(v) for v in values]
        if t is None or any(v is None or not math.isfinite(float(v)) for v in values):
            continue
        step = study_step(float(t), milestones, out)
        if not out or step > max(out):
            out[step] = float(values[0]) if len(values) == 1 else tuple(map(float, values))
    return out


def _violations(spec: Spec, row: Mapping[str, Any], rows: Any) -> list[float]:
    """A source trial's constraint violations at its last evaluated report (its
    ``feasible`` cell when it has no history)."""
    from hpsearch.driver.record.objectives import violations

    if rows is not None and len(rows):
        if "evaluated" in rows:
            rows = rows[rows["evaluated"].fillna(True).astype(bool)]
        if len(rows):
            last = {k: python_value(v) for k, v in rows.iloc[-1].items()}
            return [min(v, 1e300) for v in violations(spec.constraints, last)]
    return [0.0 if python_value(row.get("feasible")) is True else 1.0] * len(spec.constraints)


def _frozen(spec: Spec, row: Mapping[str, Any], params: dict[str, Any], dists: Mapping,
            rows: Any, origin: str) -> Any:
    """The Optuna trial a source row (and its history ``rows``) becomes, or ``None`` when
    it teaches nothing."""
    import optuna

    from hpsearch.driver.record.objectives import REPORT_ATTR
    from hpsearch.driver.record.study import study_outcome

    reported = _reported(spec, rows)
    status = row.get("status")
    several = spec.several_objectives
    value = [python_value(row.get(o.metric)) for o in spec.objectives] if several \
        else python_value(row.get("final_value"))
    state, told = study_outcome(status, value=value, has_reports=bool(reported))
    if state == optuna.trial.TrialState.FAIL:
        return None
    user_attrs = {"warm_start": origin, "status": status}
    if several:
        user_attrs.update({f"{REPORT_ATTR}{k}": list(v) for k, v in reported.items()})
    system_attrs = {}
    if spec.constraints:  # the list form both Optuna 4's and 5's samplers read
        system_attrs["constraints"] = _violations(spec, row, rows)
    return optuna.trial.create_trial(
        state=state, **({"values": told} if several else {"value": told}), params=params,
        distributions={k: dists[k] for k in params},
        intermediate_values=None if several else (reported or None),
        user_attrs=user_attrs, system_attrs=system_attrs)


def import_trials(spec: Spec, study: Any, sources: list[SweepDir]) -> dict[str, Any]:
    """Add ``sources``' trials that fit ``spec`` to ``study`` and enqueue the best (with
    several objectives, the trials of the sources' fronts).

    Returns what the manifest records: the sources, trials imported / skipped, and the
    enqueued configurations.
    """
    import optuna

    from hpsearch.store.tables import read_history, read_trials

    dists = distributions(spec)
    objective = spec.objective
    summary: dict[str, Any] = {"from": [src.name for src in sources], "imported": 0,
                               "skipped": 0, "not_fitting": 0, "enqueued": []}
    candidates: list[tuple[float, dict[str, Any]]] = []
    for src in sources:
        trials = read_trials(src)
        try:
            history = read_history(src)
        except Exception:  # noqa: BLE001 - no history: import values only
            history = None
        by_trial = {} if history is None else {
            tid: rows for tid, rows in history.groupby("trial_id", sort=False)}
        for row in trials.to_dict("records"):
            if row.get("status") not in _IMPORTED:
                summary["skipped"] += 1
                continue
            params = _fits(spec, row)
            if params is None:
                summary["not_fitting"] += 1
                continue
            trial = _frozen(spec, row, params, dists, by_trial.get(row["trial_id"]),
                            f"{src.name}/{row['trial_id']}")
            if trial is None:
                summary["skipped"] += 1
                continue
            study.add_trial(trial)
            summary["imported"] += 1
            score = objective.score(python_value(row.get("best_value")))
            if spec.several_objectives:  # the front's trials, in the first objective's order
                score = score if python_value(row.get("pareto")) is True else math.inf
            if trial.state == optuna.trial.TrialState.COMPLETE and math.isfinite(score):
                candidates.append((score, params))
    seen: list[dict[str, Any]] = []
    for _, params in sorted(candidates, key=lambda c: c[0]):
        if len(seen) >= spec.search.warm_start_best:
            break
        if params in seen:
            continue
        study.enqueue_trial(params, user_attrs={"warm_start_rerun": True})
        seen.append(params)
    summary["enqueued"] = seen
    return summary
