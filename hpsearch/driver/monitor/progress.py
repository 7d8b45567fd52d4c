"""Progress for people while a sweep runs.

On a terminal: one live line (rich) with counts, the best value and config, elapsed and
estimated remaining time. Otherwise (logs of overnight runs): plain timestamped lines, one
per trial event and a heartbeat every ``heartbeat_s``.

The sweep never goes quiet: when Tune's loop itself stops stepping (it waits on a trial's
process that will not stop, say), a thread of its own keeps printing the last status every
``heartbeat_s``, with how long the loop has been still.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import datetime
from typing import Any, Callable, TextIO

from ray.tune import Callback

from hpsearch.driver.monitor.tables import last_error_line
from hpsearch.driver.search.ids import TRIAL_ID_KEY, hpsearch_id
from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store.records import TrialRecords
from hpsearch.store.reports import TUNE_KEYS
from hpsearch.store.summary import fmt_value, printable, status_line

__all__ = ["ProgressCallback"]


class ProgressCallback(Callback):
    """Progress for people (see the module docstring)."""

    render_every_s = 0.5  # the live line's refresh (rich refreshes twice a second)

    def __init__(self, records: TrialRecords, spec: Spec, *, stream: TextIO | None = None,
                 heartbeat_s: float = 30.0, live: bool | None = None,
                 paused: Callable[[str], bool] = lambda trial_id: False):
        self.records = records
        self.spec = spec
        self.paused = paused
        self.stream = stream or sys.stdout
        self.heartbeat_s = heartbeat_s
        self.t0 = self.last_beat = time.monotonic()
        self.started_at = time.time()
        self._want_live = self.stream.isatty() if live is None else live
        self._live = None
        self.last_render = 0.0
        self.last_step = time.monotonic()
        self._status_text = ""
        self._quit = threading.Event()
        self._beat: threading.Thread | None = None
        self._errors: dict[str, str] = {}  # an error's first line -> the first trial it hit
        self._told_short = False

    def setup(self, **info):
        # Started here, not in __init__: if building the Tuner fails, no live display is
        # left running with the cursor hidden.
        self.t0 = self.last_beat = time.monotonic()
        self.started_at = time.time()
        if self._want_live and self.stream is not None:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render(), console=Console(file=self.stream),
                              refresh_per_second=2)
            self._live.start()
        self.last_step = time.monotonic()
        self._quit.clear()
        self._beat = threading.Thread(target=self._beat_while_still, daemon=True,
                                      name="hpsearch-heartbeat")
        self._beat.start()

    def _beat_while_still(self) -> None:
        """Prints the last status while Tune's loop does not step (module docstring). It
        reads nothing the loop writes but two plain attributes."""
        while not self._quit.wait(self.heartbeat_s):
            line = self.still_line(time.monotonic())
            if line is not None:
                self.log(line)

    def still_line(self, now: float) -> str | None:
        """The heartbeat's line when Tune's loop has not stepped for ``heartbeat_s``."""
        still = now - self.last_step
        if still < self.heartbeat_s:
            return None
        return (f"{self._status_text} (no sweep event for {still:.0f} s: a trial's process "
                "may not be ending; Ctrl-C stops the sweep, `hpsearch resume` continues it)")

    def __getstate__(self):
        # Tune pickles the Tuner's config once into tuner.pkl, which hpsearch never reads.
        return {}

    def _render(self):
        from rich.text import Text

        return Text(self._status())

    def _status(self) -> str:
        self._status_text = status_line(self.records, self.spec,
                                        elapsed=time.monotonic() - self.t0,
                                        started_at=self.started_at)
        return self._status_text

    def log(self, message: str) -> None:
        stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        if self._live is not None:
            from rich.markup import escape  # a "[...]" in a value is text, not markup

            self._live.console.print(f"[dim]{stamp}[/dim] {escape(message)}", highlight=False,
                                     markup=True)
            self._live.update(self._render())
        elif self.stream is not None:
            print(f"{stamp} {message}", file=self.stream, flush=True)

    def on_trial_start(self, iteration, trials, trial, **info):
        cfg = ", ".join(f"{k}={fmt_value(v)}" for k, v in trial.config.items()
                        if k != TRIAL_ID_KEY)
        trial_id = hpsearch_id(trial)
        row = self.records.trials.get(trial_id, {})
        again = " (continued)" if row.get("steps") or row.get("epochs") else ""
        self.log(f"trial {trial_id} started{again}: {cfg}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        trial_id = hpsearch_id(trial)
        row = self.records.trials.get(trial_id, {})
        if row.get("status") == st.FAILED:  # ran, but never reported its objective
            self.log(f"trial {trial_id} failed: {self._error(trial_id, row.get('error'))}")
            return
        unit = self.spec.scheduler.time_attr
        where = (f"after {fmt_value(row.get('wall_s'))} s" if unit == "time"
                 else f"at {unit} {fmt_value(row.get(unit + 's'))}")
        self.log(
            f"trial {trial_id} {row.get('status', 'ended')} {where}: "
            f"{printable(self.spec.objective.metric)} "
            f"{fmt_value(row.get('final_value'))} (best {fmt_value(row.get('best_value'))})"
        )
        short = self._short_of_budget(row, getattr(trial, "last_result", None) or {})
        if short is not None:
            self.log(short)

    def _error(self, trial_id: str, error: Any) -> str:
        """A failure's line: in full the first time, then short, naming the first trial
        (an error every trial meets, such as a metric never printed, is read once)."""
        text = printable(error or "unknown error")
        first = text.split("; ", 1)[0]
        if first in self._errors:
            return f"{first} (as trial {self._errors[first]})"
        self._errors[first] = trial_id
        return text

    def _short_of_budget(self, row: dict, last: dict) -> str | None:
        """Once a sweep: a command that exited 0 before its reports reached ``max_t``, and
        what its reports carried (a script whose time attribute hpsearch never reads
        looks like a trial that ended at step 1 of 200)."""
        time_attr, max_t = self.spec.scheduler.time_attr, self.spec.scheduler.max_t
        reached = row.get(time_attr + "s")
        if (self._told_short or self.spec.command is None or row.get("status") != st.COMPLETED
                or time_attr == "time" or reached is None or reached >= max_t):
            return None
        self._told_short = True
        carried = sorted(k for k in last if k not in TUNE_KEYS and k != "training_iteration"
                         and not k.startswith(("time_", "gpu")))
        return (f"note: trial {row.get('trial_id', '?')}'s command exited 0 at {time_attr} "
                f"{fmt_value(reached)} of max_t {max_t}. Its last report carried "
                f"{', '.join(carried) or 'nothing'}; a report without `{time_attr}` counts "
                f"as the next one (1, 2, 3...). If the script prints its {time_attr} another "
                f"way, give trainable.metrics a `(?P<{time_attr}>...)` group, or read it from "
                "a file (trainable.metrics_from)")

    def on_trial_recover(self, iteration, trials, trial, **info):
        """A failed attempt Tune runs again (``trials.max_failures``): its line too, so
        that a retry is not silent. A trial ``paused`` (a full disk's, said once by its
        watch) is not one."""
        if self.paused(hpsearch_id(trial)):
            return
        error = last_error_line(trial) or "unknown error"
        self.log(f"trial {hpsearch_id(trial)} failed, trying again: "
                 f"{self._error(hpsearch_id(trial), error)}")

    def on_trial_error(self, iteration, trials, trial, **info):
        trial_id = hpsearch_id(trial)
        row = self.records.trials.get(trial_id, {})
        if row.get("status") not in st.ENDED:  # paused by a full disk (DiskWatch)
            self.log(f"trial {trial_id} paused: the disk is full; it continues from its last "
                     "checkpoint on resume")
            return
        where = os.path.join(trial.path, "error.txt") if trial.path else "its error.txt"
        self.log(f"trial {trial_id} failed: {self._error(trial_id, row.get('error'))} "
                 f"(traceback: {where})")

    def on_step_end(self, iteration, trials, **info):
        now = self.last_step = time.monotonic()
        if not self._status_text:
            self._status()
        if self._live is not None:
            # The status line reads every row (best value, throughput): at the display's
            # own refresh rate, not at every step of Tune's loop (many a second).
            if now - self.last_render >= self.render_every_s:
                self.last_render = now
                self._live.update(self._render())
        elif now - self.last_beat >= self.heartbeat_s:
            self.last_beat = now
            self.log(self._status())

    def on_experiment_end(self, trials, **info):
        # The heartbeat goes on until close(): what follows (Tune stopping its trials'
        # processes, warm groups going) can wait too.
        self._close_live()

    def close(self) -> None:
        self._quit.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
            self._beat = None
        self._close_live()

    def _close_live(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None


