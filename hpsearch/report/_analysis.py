"""The report's sections that explain the results: precision, parameter importance with
parallel coordinates, and ASHA's rung funnel."""

from __future__ import annotations

import math

from hpsearch.report import _facts as facts
from hpsearch.report import _figures as figures
from hpsearch.report._context import SectionContext
from hpsearch.report._document import C, Para, Section, Table
from hpsearch.report._format import _fmt
from hpsearch.report._load import python_value

__all__ = ["AnalysisSections"]


class AnalysisSections(SectionContext):
    """Sections: precision, importance (and parallel coordinates), rung funnel."""

    def precision(self) -> Section:
        sec = Section("precision", "Precision")
        mark, _ = self.budget
        rows = facts.precision_table(self.data, self.budget)
        column = facts.precision_column(self.data)
        if not rows:
            sec.blocks.append(Para("No precision information in this sweep (neither a ",
                                   C("precision"), " parameter nor reported ",
                                   C("precision_used"), ")."))
            return sec
        at = f"median at {self.data.time_attr} {mark}" if mark not in (None, "max_t") else None
        columns = ["precision", "trials", "with a value", f"best {self.metric}",
                   f"median {self.metric}", *([at] if at else []), "samples/s (median)",
                   "peak memory MB", f"worker-s per {self.unit[:-1]}"]
        table = []
        for r in rows:
            table.append([r["precision"], str(r["trials"]), str(r["with_value"]),
                          _fmt(r["best"]), _fmt(r["median"]),
                          *([_fmt(r.get("median_at_budget"))] if at else []),
                          _fmt(r["samples_per_s"]), _fmt(r["peak_mem_mb"]),
                          _fmt(r["worker_s_per_unit"])])
        source = ("the searched `precision` parameter" if column == "precision"
                  else "the precision trials reported (`precision_used`)")
        sec.blocks.append(Para(
            f"Per precision ({source.replace('`', '')}): the objective, the training "
            "throughput measured at the reports, the peak accelerator memory (n/a where "
            "not measured, as on CPUs) and the cost of one "
            f"{self.unit[:-1]}." + (f" The median at {self.data.time_attr} {mark} compares "
                                    "every trial at the same budget." if at else "")))
        sec.blocks.append(Table(columns, table, numeric=set(range(1, len(columns)))))
        points = [{"precision": str(r[column]), "value": float(r["best_value"]),
                   "status": str(r["status"])} for r in self.ranked.to_dict("records")
                  if python_value(r.get(column)) is not None]
        if points:
            sec.blocks += self.figure("precision", "best value and throughput per precision",
                                      lambda: figures.precision(points, rows,
                                                                metric=self.metric))
        return sec

    def importance(self) -> Section:
        from hpsearch.report._study import equal_budget_study, importances

        sec = Section("importance", "Parameter importance and parallel coordinates")
        mark, frame = self.budget
        if frame is None:
            sec.blocks.append(Para(
                f"Not enough trials to compare: importance needs at least "
                f"{facts.MIN_IMPORTANCE_TRIALS} trials with a finite {self.metric} at a "
                "common budget."))
            return sec
        if not self.params:
            sec.blocks.append(Para("This sweep searched no parameter."))
            return sec
        where = (f"{self.data.time_attr} {mark:g}" if mark != "max_t"
                 else "the end of training (completed trials)")
        sec.blocks.append(Para(
            f"Computed on equal-budget rows: the {len(frame)} trials that reached {where}, "
            f"each with the {self.metric} it reported there, so that a trial ASHA stopped "
            "early is not compared with one that trained longer. This is the highest rung (or "
            f"max_t) that at least {facts.MIN_IMPORTANCE_TRIALS} trials reached. Importance "
            "is Optuna's fANOVA evaluator (seed 0) on an in-memory study of those rows; "
            "with few trials it is a rough guide."))
        try:
            study = equal_budget_study(self.data, frame, milestone=mark)
            values = importances(study) if study is not None else {}
        except Exception as exc:  # noqa: BLE001 - e.g. a single distinct value everywhere
            values = {}
            sec.blocks.append(Para(f"Importance could not be computed: {type(exc).__name__}: "
                                   f"{exc}"))
        if values:
            sec.blocks.append(Table(["parameter", "importance"],
                                    [[k, f"{v:.3f}"] for k, v in values.items()], numeric={1}))
            sec.blocks += self.figure("importance", "parameter importance",
                                      lambda: figures.importance(values))
        axes, lines = self.parallel_axes(frame)
        if axes:
            sec.blocks.append(Para(
                f"Parallel coordinates of the same rows: one line per trial, one axis per "
                f"parameter and the {self.metric} at {where} last; "
                + ("darker is better (lower)." if self.objective.mode == "min"
                   else "darker is better (higher).")))
            values_at = frame["value"].astype(float).tolist()
            sec.blocks += self.figure(
                "parallel", "parallel coordinates",
                lambda: figures.parallel_coordinates(axes, lines, values_at,
                                                     metric=self.metric,
                                                     mode=self.objective.mode))
        return sec

    def parallel_axes(self, frame) -> tuple[list[dict], list[list[float]]]:
        """Each parameter and the objective mapped to [0, 1], with tick labels."""
        spec = self.data.spec
        columns: list[list[float]] = []
        axes: list[dict] = []
        for name in self.params:
            raw = [python_value(v) for v in frame[name]]
            param = spec.param(name) if spec is not None else None
            if param is not None and param.type == "categorical":
                choices = [str(c) for c in param.choices]
            elif param is None and any(isinstance(v, str) for v in raw if v is not None):
                choices = sorted({str(v) for v in raw if v is not None})
            else:
                choices = None
            if choices is not None:
                n = max(len(choices) - 1, 1)
                pos = {c: (i / n if len(choices) > 1 else 0.5) for i, c in enumerate(choices)}
                columns.append([pos.get(str(v), math.nan) if v is not None else math.nan
                                for v in raw])
                axes.append({"name": name, "ticks": [(p, c) for c, p in pos.items()]})
                continue
            nums = [float(v) for v in raw if v is not None]
            if not nums:
                continue
            lo = float(param.low) if param is not None else min(nums)
            hi = float(param.high) if param is not None else max(nums)
            log = bool(param.log) if param is not None else False
            f = (lambda v: math.log10(v)) if log and lo > 0 else (lambda v: v)
            span = (f(hi) - f(lo)) or 1.0
            columns.append([(f(float(v)) - f(lo)) / span if v is not None else math.nan
                            for v in raw])
            axes.append({"name": name, "ticks": [(0.0, _fmt(lo)), (1.0, _fmt(hi))]})
        if not axes:
            return [], []
        vals = frame["value"].astype(float).tolist()
        lo, hi = min(vals), max(vals)
        span = (hi - lo) or 1.0
        columns.append([(v - lo) / span for v in vals])
        axes.append({"name": self.metric, "ticks": [(0.0, _fmt(lo)), (1.0, _fmt(hi))]})
        lines = [list(row) for row in zip(*columns)]
        return axes, lines

    def funnel(self) -> Section:
        data = self.data
        sec = Section("funnel", "ASHA rung funnel")
        rows = facts.funnel(data)
        if not rows:
            sec.blocks.append(Para("The space as run could not be read, so the rungs are "
                                   "unknown."))
            return sec
        if not data.rungs:
            sec.blocks.append(Para(f"No ASHA in this sweep (scheduler {data.scheduler}): every "
                                   f"trial runs to max_t = {data.max_t} {self.unit}."))
        else:
            rungs = ", ".join(f"{r:g}" for r in data.rungs)
            sec.blocks.append(Para(
                f"ASHA compared trials at {self.unit} {rungs} (from the manifest's plan) and "
                f"trains the survivors to max_t = {data.max_t}. Per milestone: how many trials "
                "reached it, how many ASHA stopped there, how many ended there otherwise, and "
                "how many went on. The All trials table says where each one stopped."))
        table = []
        for r in rows:
            if r["milestone"] == "before" and not r["reached"]:
                continue
            label = ("before the first milestone" if r["milestone"] == "before"
                     else f"{self.unit[:-1]} {r['milestone']:g}"
                     + (" (max_t)" if r["milestone"] == data.max_t else ""))
            other = ", ".join(f"{n} {s}" for s, n in r["ended_otherwise"].items()) or "0"
            table.append([label, str(r["reached"]), str(r["stopped_by_asha"]), other,
                          str(r["running"]), str(r["went_on"])])
        sec.blocks.append(Table(["milestone", "trials there", "stopped by ASHA here",
                                 "ended here otherwise", "running here", "went on"],
                                table, numeric={1, 2, 4, 5}))
        if data.rungs and len(data.trials):
            sec.blocks += self.figure("funnel", "trials per rung",
                                      lambda: figures.funnel(rows, unit=self.unit[:-1]))
        return sec
