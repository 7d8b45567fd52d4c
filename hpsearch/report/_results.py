"""The report's sections on what the sweep found: the best objective over time, the best
trials, their learning curves, and the objective against the learning rate."""

from __future__ import annotations

from hpsearch.report import _facts as facts
from hpsearch.report import _figures as figures
from hpsearch.report._context import SectionContext
from hpsearch.report._document import C, Para, Section, Table
from hpsearch.report._format import _fmt, fmt_hours
from hpsearch.report._load import python_value
from hpsearch.store.summary import fmt_duration

__all__ = ["ResultSections", "TOP_CURVES", "TOP_TABLE"]

#: Trials in the best-trials table and in the learning curves.
TOP_TABLE = 10
TOP_CURVES = 8


class ResultSections(SectionContext):
    """Sections: progress, best trials, learning curves, lr."""

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
        recovered = facts.recovered_reports(self.data)
        if recovered:
            sec.blocks.append(Para(
                f"{recovered} report(s) recovered from the study after a driver was killed "
                "carry no time, so they are not plotted here; the tables below include "
                "them."))
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
            "shorter budget."
            + (" Trials that broke a constraint (feasible false) are left out."
               if "feasible" in self.data.trials else "")))
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
