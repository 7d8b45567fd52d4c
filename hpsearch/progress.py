"""Live progress of a sweep, drawn from the trial records (not from Ray's tables).

On a terminal: one live panel (rich) with counts, the best value and config, elapsed and
estimated remaining time. Otherwise (logs of overnight runs): plain timestamped lines, one
per trial event and a heartbeat every ``heartbeat_s``.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from typing import Any, TextIO

from hpsearch.space.spec import Spec
from hpsearch.tables import TrialRecords


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def summarize(records: TrialRecords, spec: Spec, *, elapsed: float) -> dict[str, Any]:
    """Counts, best trial and ETA; pure over the records."""
    counts: dict[str, int] = {}
    for row in records.trials.values():
        counts[row.get("status", "running")] = counts.get(row.get("status", "running"), 0) + 1
    ended = sum(v for k, v in counts.items() if k not in ("running", "pending"))
    best = best_trial(records, spec)
    eta = None
    if ended:
        eta = elapsed / ended * max(spec.trials.num - ended, 0)
    if spec.budget.time_s:
        eta = min(eta if eta is not None else spec.budget.time_s, spec.budget.time_s - elapsed)
    return {"counts": counts, "ended": ended, "best": best, "eta": eta}


def best_trial(records: TrialRecords, spec: Spec) -> dict[str, Any] | None:
    sign = 1 if spec.objective.mode == "min" else -1
    scored = [r for r in records.trials.values() if r.get("best_value") is not None]
    if not scored:
        return None
    return min(scored, key=lambda r: sign * r["best_value"])


def best_config_text(row: dict[str, Any], spec: Spec) -> str:
    return ", ".join(
        f"{p.name}={fmt_value(row[p.name])}" for p in spec.params if row.get(p.name) is not None
    )


def status_line(records: TrialRecords, spec: Spec, *, elapsed: float) -> str:
    s = summarize(records, spec, elapsed=elapsed)
    c = s["counts"]
    parts = [
        f"{c.get('running', 0)} running",
        f"{s['ended']}/{spec.trials.num} ended",
    ]
    stopped = c.get("stopped_by_asha", 0)
    if stopped:
        parts.append(f"{stopped} stopped by ASHA")
    failed = sum(c.get(k, 0) for k in ("failed", "diverged", "unsupported_precision"))
    if failed:
        parts.append(f"{failed} failed/diverged")
    line = ", ".join(parts)
    if s["best"]:
        line += (
            f" | best {spec.objective.metric} {fmt_value(s['best']['best_value'])}"
            f" ({best_config_text(s['best'], spec)})"
        )
    line += f" | {fmt_duration(elapsed)} elapsed"
    if s["eta"] is not None:
        line += f", ~{fmt_duration(s['eta'])} left"
    return line


def make_progress_callback(
    records: TrialRecords, spec: Spec, *, stream: TextIO | None = None,
    heartbeat_s: float = 30.0, live: bool | None = None,
):
    """A Tune callback that prints progress; ``live`` defaults to ``stream.isatty()``."""
    from ray.tune import Callback

    stream = stream or sys.stdout
    live = stream.isatty() if live is None else live

    class Progress(Callback):
        def __init__(self) -> None:
            self.t0 = time.monotonic()
            self.last_beat = self.t0
            self._live = None
            if live:
                from rich.console import Console
                from rich.live import Live

                self._live = Live(
                    self._render(), console=Console(file=stream), refresh_per_second=2,
                    transient=False,
                )
                self._live.start()

        def _render(self):
            from rich.text import Text

            return Text(status_line(records, spec, elapsed=time.monotonic() - self.t0))

        def _log(self, message: str) -> None:
            stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            if self._live is not None:
                self._live.console.print(f"[dim]{stamp}[/dim] {message}", highlight=False)
                self._live.update(self._render())
            else:
                print(f"{stamp} {message}", file=stream, flush=True)

        def on_trial_start(self, iteration, trials, trial, **info):
            cfg = ", ".join(f"{k}={fmt_value(v)}" for k, v in trial.config.items())
            self._log(f"trial {trial.trial_id} started: {cfg}")

        def on_trial_complete(self, iteration, trials, trial, **info):
            row = records.trials.get(trial.trial_id, {})
            unit = spec.scheduler.time_attr
            self._log(
                f"trial {trial.trial_id} {row.get('status', 'ended')} at {unit} "
                f"{fmt_value(row.get(unit + 's'))}: {spec.objective.metric} "
                f"{fmt_value(row.get('final_value'))} (best {fmt_value(row.get('best_value'))})"
            )

        def on_trial_error(self, iteration, trials, trial, **info):
            row = records.trials.get(trial.trial_id, {})
            self._log(f"trial {trial.trial_id} failed: {row.get('error') or 'see its error.txt'}")

        def on_step_end(self, iteration, trials, **info):
            now = time.monotonic()
            if self._live is not None:
                self._live.update(self._render())
            elif now - self.last_beat >= heartbeat_s:
                self.last_beat = now
                self._log(status_line(records, spec, elapsed=now - self.t0))

        def on_experiment_end(self, trials, **info):
            self.close()

        def close(self) -> None:
            if self._live is not None:
                self._live.update(self._render())
                self._live.stop()
                self._live = None

    return Progress()
