"""Facts -> a :class:`Document`: the report's summary and sections, in reading order."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Callable

from hpsearch.report import _facts as facts
from hpsearch.report import _figures as figures
from hpsearch.report._document import C, Code, Document, Figure, Para, Section, Table
from hpsearch.report._load import SweepData, python_value
from hpsearch.store import status as st
from hpsearch.store.summary import fmt_duration, fmt_value, rerun_command

__all__ = ["build_document", "config_text", "fmt_hours"]

#: Trials in the best-trials table and in the learning curves.
TOP_TABLE = 10
TOP_CURVES = 8

_STATUS_MEANING = {
    "finished": "every planned trial ended",
    "running": "still running, or its driver was killed: this report is a snapshot of the "
               "tables as they were",
    "interrupted": "interrupted (Ctrl-C) before every trial ended; `hpsearch resume {name}` "
                   "continues it",
    "no_trial_completed": "no trial produced a usable value",
    "all_failed": "the first trials all failed, so the sweep stopped early: see Failed trials",
    "deadline": "stopped at its deadline",
    "died (resume it)": "its driver died; `hpsearch resume {name}` continues it",
}


def fmt_hours(seconds: float | None) -> str:
    """Hours with enough digits for a small sweep: ``0.0123``, ``1.25``, ``312.4``."""
    if seconds is None:
        return "n/a"
    hours = seconds / 3600
    if hours == 0:
        return "0"
    if hours < 1:  # four significant digits, never in scientific notation: 0.00004444
        import numpy as np

        return np.format_float_positional(hours, precision=4, unique=False, fractional=False,
                                          trim="-")
    return f"{hours:.2f}" if hours < 100 else f"{hours:.1f}"


def config_text(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in config.items()) or "(no searched parameters)"


def _fmt(value: Any, missing: str = "n/a") -> str:
    """A cell: four significant digits, but large numbers in full (``29560``, not
    ``2.956e+04``)."""
    value = python_value(value)
    if value is None:
        return missing
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, float) and 1e4 <= abs(value) < 1e12:
        return f"{value:.0f}"
    return fmt_value(value)


def _when(value: Any, *, short: bool = False) -> str:
    """A manifest or table time as ``YYYY-MM-DD HH:MM:SS UTC`` (``short``: ``MM-DD
    HH:MM:SS``, for a table whose header names the zone)."""
    value = python_value(value)
    if value is None:
        return "n/a"
    try:
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if getattr(value, "tzinfo", None) is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).strftime(
            "%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, AttributeError):
        return str(value)


def _seconds_between(start: Any, end: Any) -> float | None:
    try:
        a = datetime.fromisoformat(str(start))
        b = datetime.fromisoformat(str(end))
        return (b - a).total_seconds()
    except (TypeError, ValueError):
        return None


class _Builder:
    def __init__(self, data: SweepData, compare: SweepData | None, compare_note: str | None):
        self.data = data
        self.compare = compare
        self.compare_note = compare_note
        self.notes = list(data.notes)
        self.objective = data.objective
        self.metric = self.objective.metric
        self.unit = facts.unit_name(data)
        self.params = data.params
        self.best = facts.best_row(data)
        self.ranked = facts.ranked(data)
        self.reached = facts.reached(data)
        self.ledger = facts.ledger(data)
        self.budget = facts.equal_budget(data)

    # --- helpers -----------------------------------------------------------------------

    def figure(self, name: str, alt: str, draw: Callable[[], bytes]) -> list:
        """A figure block, or a note in its place when drawing it fails: the report of a
        broken sweep must still be written."""
        try:
            return [Figure(name, draw(), alt)]
        except Exception as exc:  # noqa: BLE001
            text = f"figure '{alt}' could not be drawn: {type(exc).__name__}: {exc}"
            self.notes.append(text)
            return [Para(text)]

    def reached_text(self, trial_id: str) -> str:
        value = python_value(self.reached.get(str(trial_id)))
        return "n/a" if value is None else f"{value:g}"

    # --- summary -----------------------------------------------------------------------

    def summary(self) -> list[tuple[str, list]]:
        data, name = self.data, self.data.sweep.name
        status = data.status
        meaning = _STATUS_MEANING.get(status, "")
        parts = meaning.split("`") if meaning else []
        runs: list = [status]
        if parts:
            runs.append(": ")
            for i, part in enumerate(parts):
                if part:
                    runs.append(C(part.format(name=name)) if i % 2 else part)
        counts = facts.status_counts(data.trials)
        ended = sum(n for s, n in counts.items() if s in st.ENDED)
        planned = data.planned if data.planned is not None else "?"
        count_text = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no trial started"
        rows: list[tuple[str, list]] = [
            ("Sweep", [name, " (", C(str(data.sweep.path)), ")"]),
            ("Status", runs),
            ("Trials", [f"{ended} ended of {planned} planned ({count_text})"]),
        ]
        if self.best is not None:
            best = self.best
            rows.append(("Best", [
                f"{self.metric} {_fmt(best['best_value'])} ({self.objective.mode}) from trial "
                f"{best['trial_id']}, {best.get('status')} at {self.unit[:-1]} "
                f"{self.reached_text(best['trial_id'])}"]))
            rows.append(("Configuration", [config_text(facts.config_of(best, self.params))]))
            if data.spec is not None:
                rows.append(("Rerun it", [C(rerun_command(str(data.sweep.space), best,
                                                          data.spec))]))
        else:
            rows.append(("Best", ["no trial reported a finite objective value"]))
        started, ended_at = data.manifest.get("started_at"), data.manifest.get("ended_at")
        took = _seconds_between(started, ended_at)
        rows.append(("Time", [f"started {_when(started)}, ended {_when(ended_at)}"
                              + (f" ({fmt_duration(took)})" if took is not None else "")]))
        ledger = self.ledger
        compute = (f"{fmt_hours(ledger.worker_s)} worker-hours, {fmt_hours(ledger.gpu_s)} "
                   f"GPU-hours; {fmt_hours(ledger.asha_worker_s)} worker-hours on trials "
                   "ASHA stopped")
        if ledger.saved_worker_s is not None:
            compute += (f"; about {fmt_hours(ledger.saved_worker_s)} worker-hours saved by "
                        "stopping them (estimate: see Compute ledger)")
        rows.append(("Compute", [compute]))
        if self.compare is not None:
            rows.append(("Since previous", [self.compare_headline()]))
        elif self.compare_note:
            rows.append(("Since previous", [self.compare_note]))
        return rows

    # --- sections ----------------------------------------------------------------------

    def progress(self) -> Section:
        sec = Section("progress", "Best objective over time")
        frame = facts.progress(self.data)
        if frame.empty:
            sec.blocks.append(Para("No finite objective value has been reported yet."))
            return sec
        sec.blocks.append(Para(
            f"The best {self.metric} reported so far, against the sweep's wall time (left) "
            "and against the worker time its trials had held by then (right: each trial's "
            "workers × the seconds it had run). Grey dots are single reports; a trial ASHA "
            "stopped reported on a shorter budget than one that trained to the end."))
        sec.blocks += self.figure("progress", f"best {self.metric} against wall time and "
                                  "worker time", lambda: figures.progress(
                                      frame, metric=self.metric, mode=self.objective.mode))
        last = frame.iloc[-1]
        sec.blocks.append(Para(
            f"{len(frame)} reports over {fmt_duration(last['wall_h'] * 3600)} of wall time "
            f"and {fmt_hours(last['worker_h'] * 3600)} worker-hours; best {self.metric} "
            f"{_fmt(last['best'])}."))
        return sec

    def best_trials(self) -> Section:
        sec = Section("best", "Best trials")
        top = self.ranked.head(TOP_TABLE)
        if top.empty:
            sec.blocks.append(Para("No trial has a finite objective value yet."))
            return sec
        sec.blocks.append(Para(
            f"Ranked by best_value, the best {self.metric} a trial reached at any report. "
            f"Compare the {self.unit} column: a trial ASHA stopped reached its value on a "
            "shorter budget."))
        columns = ["#", "trial", "status", *self.params, f"best {self.metric}",
                   f"at {self.unit[:-1]}", f"{self.unit} reached", "worker-hours"]
        rows = []
        for i, row in enumerate(top.to_dict("records"), start=1):
            rows.append([str(i), str(row["trial_id"]), str(row["status"]),
                         *(_fmt(row.get(p), "–") for p in self.params), _fmt(row["best_value"]),
                         _fmt(row.get(f"best_{self.data.time_attr}")),
                         self.reached_text(row["trial_id"]),
                         fmt_hours(python_value(row.get("worker_s")))])
        n = len(self.params)
        sec.blocks.append(Table(columns, rows, numeric={0, 3 + n, 4 + n, 5 + n, 6 + n}))
        return sec

    def curves(self) -> Section:
        import numpy as np
        import pandas as pd

        data = self.data
        sec = Section("curves", "Learning curves of the top trials")
        history = data.history
        top = [str(t) for t in self.ranked["trial_id"].head(TOP_CURVES)]
        if not top or self.metric not in history.columns:
            sec.blocks.append(Para("No learning curve to show yet."))
            return sec
        x = data.time_key if data.time_key in history.columns and \
            history[data.time_key].notna().any() else "step"
        train = "train_loss" in history.columns
        series = []
        status = dict(zip(data.trials["trial_id"].astype(str), data.trials["status"]))
        evals = data.evals
        for tid in top:
            rows = evals[evals["trial_id"].astype(str) == tid]
            xs = pd.to_numeric(rows[x], errors="coerce").astype("float64")
            ys = pd.to_numeric(rows[self.metric], errors="coerce").astype("float64")
            ok = np.isfinite(xs) & np.isfinite(ys)
            s = {"label": f"{tid} ({status.get(tid)})", "x": xs[ok].tolist(),
                 "y": ys[ok].tolist(), "tx": [], "ty": []}
            if train:  # every row: the evaluations and the log_every rows between them
                rows = history[history["trial_id"].astype(str) == tid]
                txs = pd.to_numeric(rows[x], errors="coerce").astype("float64")
                ts = pd.to_numeric(rows["train_loss"], errors="coerce").astype("float64")
                tok = np.isfinite(txs) & np.isfinite(ts)
                order = np.argsort(txs[tok].to_numpy(), kind="stable")  # rows of both kinds
                s["tx"] = txs[tok].to_numpy()[order].tolist()
                s["ty"] = ts[tok].to_numpy()[order].tolist()
            series.append(s)
        sec.blocks.append(Para(
            f"The {len(top)} best trials. Left: {self.metric} at each evaluation. "
            + ("Right: the training loss at every row of the history, evaluations and "
               "logged steps alike. " if train else "")
            + ("Dotted lines: ASHA's rungs." if data.rungs and x == data.time_key else "")))
        sec.blocks += self.figure("curves", f"learning curves of the {len(top)} best trials",
                                  lambda: figures.curves(series, metric=self.metric,
                                                         x_label=x,
                                                         rungs=data.rungs if x == data.time_key
                                                         else [], train=train))
        return sec

    def lr(self) -> Section:
        sec = Section("lr", "Objective against lr")
        if "lr" not in self.params:
            sec.blocks.append(Para(C("lr"), " is not a searched parameter of this sweep."))
            return sec
        points = [{"trial_id": str(r["trial_id"]), "lr": python_value(r["lr"]),
                   "value": float(r["best_value"]), "status": str(r["status"])}
                  for r in self.ranked.to_dict("records") if python_value(r.get("lr"))]
        if not points:
            sec.blocks.append(Para("No trial with a finite value yet."))
            return sec
        log_x = True
        if self.data.spec is not None:
            log_x = bool(getattr(self.data.spec.param("lr"), "log", True))
        sec.blocks.append(Para(
            f"Each trial's best {self.metric} against its learning rate, coloured by how "
            "it ended; the circled one is the best."))
        best_id = str(self.best["trial_id"]) if self.best else None
        sec.blocks += self.figure("lr", f"best {self.metric} against lr",
                                  lambda: figures.lr_effect(points, metric=self.metric,
                                                            log_x=log_x, best_id=best_id))
        return sec

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

    def ledger_section(self) -> Section:
        sec = Section("ledger", "Compute ledger")
        ledger = self.ledger
        table = [[s, str(v["trials"]), fmt_hours(v["worker_s"]), fmt_hours(v["gpu_s"]),
                  f"{v['worker_s']:.1f}", f"{v['gpu_s']:.1f}"]
                 for s, v in ledger.by_status.items()]
        table.append(["total", str(len(self.data.trials)), fmt_hours(ledger.worker_s),
                      fmt_hours(ledger.gpu_s), f"{ledger.worker_s:.1f}", f"{ledger.gpu_s:.1f}"])
        sec.blocks.append(Para(
            "What the trials held, per status, from the trial table's worker_s and gpu_s "
            "columns (their sums are the totals; GPU time is reserved time, not measured "
            "utilisation)."
            + (f" {ledger.unreported} trial(s) never reported and count 0."
               if ledger.unreported else "")))
        sec.blocks.append(Table(["status", "trials", "worker-hours", "GPU-hours",
                                 "worker-seconds", "GPU-seconds"], table,
                                numeric={1, 2, 3, 4, 5}))
        share = (f" ({100 * ledger.asha_worker_s / ledger.worker_s:.0f}% of all)"
                 if ledger.worker_s else "")
        sec.blocks.append(Para(
            f"Spent on trials ASHA stopped: {fmt_hours(ledger.asha_worker_s)} worker-hours"
            f"{share} and {fmt_hours(ledger.asha_gpu_s)} GPU-hours."))
        if ledger.saved_worker_s is None:
            sec.blocks.append(Para("No saving to estimate: this sweep has no ASHA (or its "
                                   "space could not be read)."))
            return sec
        total = ledger.worker_s + ledger.saved_worker_s
        sec.blocks.append(Para(
            f"Estimated saved against running every trial to max_t: "
            f"{fmt_hours(ledger.saved_worker_s)} worker-hours and "
            f"{fmt_hours(ledger.saved_gpu_s)} GPU-hours"
            + (f", so without ASHA the sweep would have needed about {fmt_hours(total)} "
               f"worker-hours ({100 * ledger.saved_worker_s / total:.0f}% saved)."
               if total else ".")))
        hows: dict[str, int] = {}
        for d in ledger.saved_detail:
            hows[d["how"]] = hows.get(d["how"], 0) + 1
        sec.blocks.append(Para(
            "How: " + ledger.method
            + (" Rates used: " + ", ".join(f"{n} from {h}" for h, n in hows.items()) + "."
               if hows else "")))
        return sec

    def failed(self) -> Section:
        sec = Section("failed", "Failed trials")
        rows = facts.failures(self.data)
        if not rows:
            sec.blocks.append(Para("No trial failed, diverged or hit an unsupported "
                                   "precision."))
            return sec
        sec.blocks.append(Para(
            f"{len(rows)} trial(s) produced no usable model or raised. The error is the "
            "exception's last line from the trial table (the harness's reason for diverged "
            "and unsupported-precision trials); control characters are shown escaped."))
        table = [[r["trial_id"], r["status"],
                  "n/a" if r["reached"] is None else f"{r['reached']:g}",
                  config_text(r["config"]), _clip(r["error"] or "(no error line)")]
                 for r in rows]
        sec.blocks.append(Table(["trial", "status", f"{self.unit} reached", "configuration",
                                 "error"], table, numeric={2}, wrap={3, 4}))
        return sec

    def compare_headline(self) -> str:
        other = self.compare
        assert other is not None
        theirs = facts.best_row(other)
        if theirs is None or self.best is None:
            return (f"{other.sweep.name}: "
                    + ("no finite best value in one of the two sweeps"))
        a, b = float(theirs["best_value"]), float(self.best["best_value"])
        better = self.objective.better(b, a)
        word = "better" if better else "no better" if a == b else "worse"
        return (f"best {self.metric} {_fmt(b)} against {_fmt(a)} in {other.sweep.name} "
                f"({word}, {b - a:+.4g})")

    def comparison(self) -> Section | None:
        other = self.compare
        if other is None:
            return None
        sec = Section("compare", f"Compared with {other.sweep.name}")
        if other.objective != self.objective:
            sec.blocks.append(Para(
                f"The objectives differ ({self.metric} {self.objective.mode} here, "
                f"{other.objective.metric} {other.objective.mode} there): the values are "
                "not comparable."))
        theirs = facts.best_row(other)
        params = list(dict.fromkeys([*self.params, *other.params]))

        def column(d: SweepData, best: dict | None) -> list[str]:
            counts = facts.status_counts(d.trials)
            ended = sum(n for s, n in counts.items() if s in st.ENDED)
            out = [d.sweep.name, d.status, f"{ended} ended",
                   _fmt(best["best_value"]) if best else "n/a",
                   str(best["trial_id"]) if best else "n/a"]
            out += [_fmt(best.get(p)) if best else "n/a" for p in params]
            out.append(fmt_hours(facts.ledger(d).worker_s))
            out.append(_when(d.manifest.get("started_at")))
            return out

        mine, prev = column(self.data, self.best), column(other, theirs)
        labels = ["sweep", "status", "trials", f"best {self.metric}", "best trial",
                  *(f"best {p}" for p in params), "worker-hours", "started"]
        changed = ["" if a == b else "changed" for a, b in zip(mine, prev)]
        changed[0] = changed[1] = changed[2] = changed[4] = changed[-1] = ""
        table = [[label, m, p, c] for label, m, p, c in zip(labels, mine, prev, changed)]
        sec.blocks.append(Para(self.compare_headline() + "."))
        sec.blocks.append(Table(["", "this sweep", "previous", ""], table, wrap={1, 2}))
        return sec

    def all_trials(self) -> Section:
        sec = Section("trials", "All trials")
        trials = self.data.trials
        if trials.empty:
            sec.blocks.append(Para("No trial has started."))
            return sec
        sec.blocks.append(Para(
            f"In the order they started; {self.unit} reached is where each one stopped."))
        columns = ["trial", "status", *self.params, f"best {self.metric}",
                   f"{self.unit} reached", "worker-s", "start-up s", "started (UTC)"]
        rows = [[str(r["trial_id"]), str(r["status"]), *(_fmt(r.get(p), "–") for p in self.params),
                 _fmt(r.get("best_value")), self.reached_text(r["trial_id"]),
                 _fmt(r.get("worker_s")), _fmt(r.get("startup_s"), "–"),
                 _when(r.get("started_at"), short=True)]
                for r in trials.to_dict("records")]
        n = len(self.params)
        sec.blocks.append(Table(columns, rows, numeric={2 + n, 3 + n, 4 + n, 5 + n}))
        return sec

    def about(self) -> Section:
        m = self.data.manifest
        sec = Section("about", "About this sweep")
        command = m.get("command")
        if isinstance(command, list):
            import shlex

            sec.blocks.append(Para("Started with:"))
            sec.blocks.append(Code(shlex.join(str(c) for c in command)))
        versions = m.get("versions") if isinstance(m.get("versions"), dict) else {}
        git = m.get("git") if isinstance(m.get("git"), dict) else {}
        host = m.get("host") if isinstance(m.get("host"), dict) else {}
        rows = [["versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)],
                ["git", (f"{git.get('commit', '')[:12]}" + (" (dirty)" if git.get("dirty")
                                                             else "")) if git else "n/a"],
                ["host", ", ".join(f"{k} {v}" for k, v in host.items()) or "n/a"],
                ["seed", str(m.get("seed"))],
                ["tables", f"{self.data.sweep.trials}, {self.data.sweep.history.name}"]]
        sec.blocks.append(Table(["", ""], rows, wrap={1}))
        return sec

    def document(self) -> Document:
        sections = [self.progress(), self.best_trials()]
        compare = self.comparison()
        if compare is not None:
            sections.insert(0, compare)
        sections += [self.curves(), self.lr(), self.precision(), self.importance(),
                     self.funnel(), self.ledger_section(), self.failed(), self.all_trials(),
                     self.about()]
        summary = self.summary()
        now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return Document(
            title=f"Sweep {self.data.sweep.name}", summary=summary, sections=sections,
            notes=self.notes,
            footer=f"Written by hpsearch report at {now} from {self.data.sweep.trials.name} "
                   f"and {self.data.sweep.history.name}.",
        )


def _clip(text: str, limit: int = 300) -> str:
    """One line of at most ``limit`` characters, control characters shown escaped (a
    carriage return in an error must not hide what came before it)."""
    from hpsearch.store.summary import printable

    text = " ".join(printable(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_document(data: SweepData, *, compare: SweepData | None = None,
                   compare_note: str | None = None) -> Document:
    """The report of ``data`` as a :class:`Document` (optionally against ``compare``)."""
    return _Builder(data, compare, compare_note).document()
