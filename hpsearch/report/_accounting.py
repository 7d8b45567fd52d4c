"""The report's sections that account for the sweep: the compute ledger (and the GPUs
trials left idle), the failed trials, every trial, and what ran where."""

from __future__ import annotations

import math
from typing import Any

from hpsearch.report import _facts as facts
from hpsearch.report._context import SectionContext
from hpsearch.report._document import C, Code, Para, Section, Table
from hpsearch.report._format import _clip, _fmt, _when, config_text, fmt_hours
from hpsearch.report._load import SweepData

__all__ = ["AccountingSections", "BUSY_GPU_PCT", "gpu_use"]

#: A trial whose GPUs were busy less of the time than this, in percent, is named.
BUSY_GPU_PCT = 80.0


def gpu_use(data: SweepData, *, below: float = BUSY_GPU_PCT) -> dict[str, Any]:
    """How busy each trial kept its GPUs: the mean ``gpu_util_pct`` of its reports.

    Returns ``{"measured": n, "unmeasured": n, "idle": rows}``: the trials with a value,
    the trials that held GPU time (``gpu_s`` > 0) without one, and the rows of those
    under ``below`` percent, least busy first: ``trial_id``, ``status``, ``util_pct``,
    ``lowest_pct`` (its least busy report), ``gpu_s``.
    """
    import pandas as pd

    history = data.evals
    if "gpu_util_pct" in history.columns:
        util = pd.to_numeric(history["gpu_util_pct"], errors="coerce").astype("float64")
        by_trial = util.groupby(history["trial_id"].astype(str))
        mean, lowest = by_trial.mean().dropna(), by_trial.min().dropna()
    else:
        mean = lowest = pd.Series(dtype="float64")
    trials = data.trials
    gpu_s = dict(zip(trials["trial_id"].astype(str),
                     pd.to_numeric(trials["gpu_s"], errors="coerce").astype("float64")))
    status = dict(zip(trials["trial_id"].astype(str), trials["status"].astype(str)))
    idle = [{"trial_id": tid, "status": status.get(tid, "n/a"), "util_pct": float(pct),
             "lowest_pct": float(lowest[tid]), "gpu_s": gpu_s.get(tid, math.nan)}
            for tid, pct in mean.items() if pct < below]
    unmeasured = sum(1 for tid, s in gpu_s.items() if s > 0 and tid not in mean.index)
    return {"measured": len(mean), "unmeasured": unmeasured,
            "idle": sorted(idle, key=lambda r: (r["util_pct"], r["trial_id"]))}


class AccountingSections(SectionContext):
    """Sections: compute ledger, failed trials, all trials, about."""

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
        sec.blocks += self.idle_gpus()
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

    def idle_gpus(self) -> list:
        """Which trials kept their GPUs busy under :data:`BUSY_GPU_PCT` percent, and why
        that matters; nothing for a sweep without GPU time."""
        use = gpu_use(self.data)
        if not use["measured"]:
            return [Para(
                f"{use['unmeasured']} trial(s) held GPUs but reported no utilisation (",
                C("gpu_util_pct"), "): install nvidia-ml-py on the GPU nodes to measure it."
            )] if use["unmeasured"] else []
        idle = use["idle"]
        unmeasured = (f" {use['unmeasured']} other trial(s) held GPUs without measuring it."
                      if use["unmeasured"] else "")
        if not idle:
            return [Para(f"Every trial that measured its GPU utilisation ({use['measured']}) "
                         f"kept its GPUs busy at least {BUSY_GPU_PCT:.0f}% of the time while "
                         "training." + unmeasured)]
        held = math.fsum(r["gpu_s"] for r in idle if math.isfinite(r["gpu_s"]))
        out = [Para(
            f"{len(idle)} of {use['measured']} trial(s) kept their GPUs busy less than "
            f"{BUSY_GPU_PCT:.0f}% of the time while training (", C("gpu_util_pct"), ", the "
            "mean of their reports), holding "
            f"{fmt_hours(held)} GPU-hours. Below that, the GPUs wait on the input pipeline "
            "(data loading, host-to-device copies) or on the host (Python, small kernels, "
            "synchronisations), so part of the GPU-hours paid for them bought nothing; more "
            "data-loading workers or larger batches often help, and their samples/s shows "
            "whether it did." + unmeasured)]
        out.append(Table(["trial", "status", "GPUs busy % (mean)", "least busy report %",
                          "GPU-hours"],
                         [[r["trial_id"], r["status"], f"{r['util_pct']:.1f}",
                           f"{r['lowest_pct']:.1f}",
                           fmt_hours(r["gpu_s"] if math.isfinite(r["gpu_s"]) else None)]
                          for r in idle],
                         numeric={2, 3, 4}))
        return out

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
        logs = self.data.sweep.trial_dirs
        if logs.is_dir():  # a command trainable's trials keep their output there
            rows.append(["trial output", f"{logs}/<trial_id>/output.log"])
        sec.blocks.append(Table(["", ""], rows, wrap={1}))
        return sec
