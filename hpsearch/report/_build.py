"""Facts -> a :class:`Document`: the report's summary and sections, in reading order.

The sections are written in :mod:`._results`, :mod:`._analysis` and :mod:`._accounting`;
the summary and the comparison with another sweep, which read the others' facts, here.
"""

from __future__ import annotations

from datetime import datetime, timezone

from hpsearch.report import _facts as facts
from hpsearch.report._accounting import BUSY_GPU_PCT, AccountingSections, gpu_use
from hpsearch.report._analysis import AnalysisSections
from hpsearch.report._document import C, Document, Para, Section, Table
from hpsearch.report._front import FrontSections
from hpsearch.report._format import _fmt, _seconds_between, _when, config_text, fmt_hours
from hpsearch.report._load import SweepData
from hpsearch.report._results import ResultSections
from hpsearch.store import status as st
from hpsearch.store.summary import fmt_duration, rerun_command

__all__ = ["build_document", "config_text", "fmt_hours"]

_STATUS_MEANING = {
    st.SWEEP_FINISHED: "every planned trial ended",
    st.SWEEP_RUNNING: "still running, or its driver was killed: this report is a snapshot of "
                      "the tables as they were",
    st.SWEEP_INTERRUPTED: "interrupted (Ctrl-C) before every trial ended; "
                          "`hpsearch resume {name}` continues it",
    st.SWEEP_DISK_FULL: "its disk filled and it stopped, its trials paused at their last "
                        "checkpoints; free space, then `hpsearch resume {name}` continues it",
    st.SWEEP_NO_TRIAL_COMPLETED: "no trial produced a usable value",
    st.SWEEP_ALL_FAILED: "the first trials all failed, so the sweep stopped early: see "
                         "Failed trials",
    st.SWEEP_MISSING_METRIC: "a trial's first report lacked a metric the objectives or "
                             "constraints name, so the sweep stopped: report it from the "
                             "trainable",
    st.SWEEP_DEADLINE: "stopped at its deadline",
    "died (resume it)": "its driver died; `hpsearch resume {name}` continues it",
}


class _Builder(FrontSections, ResultSections, AnalysisSections, AccountingSections):
    """The whole report: the sections of its bases, the summary and the comparison."""

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
        if data.spec is not None and data.spec.several_objectives and "pareto" in data.trials:
            on = int(data.trials["pareto"].fillna(False).astype(bool).sum())
            rows.append(("Front", [f"{on} trial(s) on the Pareto front of "
                                   + " and ".join(o.metric for o in data.spec.objectives)
                                   + " (see Pareto front)"]))
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
        idle = gpu_use(self.data)["idle"]
        if idle:
            compute += (f"; {len(idle)} trial(s) kept their GPUs busy under "
                        f"{BUSY_GPU_PCT:.0f}% of the time (see Compute ledger)")
        rows.append(("Compute", [compute]))
        if self.compare is not None:
            rows.append(("Since previous", [self.compare_headline()]))
        elif self.compare_note:
            rows.append(("Since previous", [self.compare_note]))
        return rows

    # --- comparison --------------------------------------------------------------------

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

    # --- the whole document ------------------------------------------------------------

    def document(self) -> Document:
        sections = [s for s in (self.front(), self.progress(), self.best_trials()) if s]
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


def build_document(data: SweepData, *, compare: SweepData | None = None,
                   compare_note: str | None = None) -> Document:
    """The report of ``data`` as a :class:`Document` (optionally against ``compare``)."""
    return _Builder(data, compare, compare_note).document()
