"""The report's section on a sweep of several objectives: its Pareto front, drawn and
listed with a rerun line for each of its trials."""

from __future__ import annotations

import math

from hpsearch.report._context import SectionContext
from hpsearch.report import _figures as figures
from hpsearch.report._document import Code, Para, Section, Table
from hpsearch.report._format import _fmt
from hpsearch.report._load import python_value
from hpsearch.store import status as st
from hpsearch.store.summary import rerun_command

__all__ = ["FrontSections"]


class FrontSections(SectionContext):
    """Section: the front (sweeps of several objectives only)."""

    def front(self) -> Section | None:
        spec = self.data.spec
        if spec is None or not spec.several_objectives:
            return None
        objectives = spec.objectives
        names = [o.metric for o in objectives]
        sec = Section("front", "Pareto front")
        trials = self.data.trials
        if trials.empty or not set(names) <= set(trials.columns):
            sec.blocks.append(Para("No trial has reported every objective yet."))
            return sec
        rows = trials.to_dict("records")
        points = [p for p in map(lambda r: _point(r, names), rows) if p is not None]
        on = [r for r in rows if python_value(r.get("pareto")) is True]
        goals = " and ".join(f"{o.metric} ({o.mode})" for o in objectives)
        sec.blocks.append(Para(
            f"The trade-off between {goals}: {len(on)} trial(s) on the front, the trials "
            "that reached max_t"
            + (", kept every constraint" if spec.constraints else "")
            + " and are dominated by no other such trial (the pareto column of "
            "trials.parquet). A trial ASHA stopped is drawn at its last values, reached on "
            "a shorter budget."))
        if points:
            sec.blocks += self.figure("front", f"the front of {goals}", lambda: figures.front(
                points, objectives=[(o.metric, o.mode) for o in objectives]))
        if not on:
            return sec
        on.sort(key=lambda r: objectives[0].score(r.get(names[0])))
        columns = ["trial", *names, *self.params]
        table = [[str(r["trial_id"]), *(_fmt(python_value(r.get(n))) for n in names),
                  *(_fmt(python_value(r.get(p)), "–") for p in self.params)] for r in on]
        sec.blocks.append(Table(columns, table,
                                numeric=set(range(1, 1 + len(names)))))
        sec.blocks.append(Para("Rerun a trial of the front, in the order of the table:"))
        sec.blocks += [Code(rerun_command(str(self.data.sweep.space), r, spec)) for r in on]
        return sec


def _point(row: dict, names: list[str]) -> dict | None:
    values = [python_value(row.get(n)) for n in names]
    if any(v is None or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
        return None
    status = row.get("status")
    if python_value(row.get("feasible")) is False:
        kind = "infeasible"
    elif python_value(row.get("pareto")) is True:
        kind = "front"
    elif status == st.COMPLETED:
        kind = "dominated"
    elif status == st.STOPPED_BY_ASHA:
        kind = "stopped"
    else:
        return None
    return {"values": values, "kind": kind, "trial_id": row.get("trial_id")}
