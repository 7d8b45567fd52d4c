"""The end of every run: the report and the notification, whatever the outcome.

``hpsearch run --report --notify CMD`` calls :func:`finish_run` once, after a sweep that
finished, met its deadline, failed, completed no trial, was interrupted, or crashed while
it was being set up. Neither can change the sweep's tables or its exit code: a failing
report is one line on stderr, and the notify command runs with a time limit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any, TextIO

from hpsearch.store.layout import SweepDir

__all__ = ["NOTIFY_TIMEOUT_S", "finish_run", "notify_env", "run_notify"]

#: How long a notify command may run before it is killed (its process group with it).
NOTIFY_TIMEOUT_S = float(os.environ.get("HPSEARCH_NOTIFY_TIMEOUT_S", "60"))


def notify_env(sweep: SweepDir, *, status: str, report: str | None) -> dict[str, str]:
    """The variables a notify command gets: ``HPSEARCH_SWEEP``, ``HPSEARCH_SWEEP_DIR``,
    ``HPSEARCH_STATUS``, ``HPSEARCH_BEST`` (the best objective value, empty if none),
    ``HPSEARCH_BEST_CONFIG`` and ``HPSEARCH_REPORT`` (the HTML report, empty if none)."""
    best, config = "", ""
    try:
        from hpsearch.space import load_space
        from hpsearch.store.summary import best_config_text
        from hpsearch.store.tables import read_trials

        if sweep.trials.exists():
            spec = load_space(sweep.space, resolve_trainable=False)
            trials = read_trials(sweep)
            rows = trials.to_dict("records")
            scored = [r for r in rows if spec.objective.score(r.get("best_value")) < float("inf")]
            if scored:
                top = min(scored, key=lambda r: spec.objective.score(r["best_value"]))
                best = repr(float(top["best_value"]))
                config = best_config_text(top, spec)
    except Exception:  # noqa: BLE001 - a notification goes out even for a damaged sweep
        pass
    return {
        "HPSEARCH_SWEEP": sweep.name,
        "HPSEARCH_SWEEP_DIR": str(sweep),
        "HPSEARCH_STATUS": status,
        "HPSEARCH_BEST": best,
        "HPSEARCH_BEST_CONFIG": config,
        "HPSEARCH_REPORT": report or "",
    }


def run_notify(command: str, env: dict[str, str], *, timeout_s: float = NOTIFY_TIMEOUT_S,
               stream: TextIO | None = None) -> int | None:
    """Run ``command`` in a shell with ``env`` added; kill it (and what it started) after
    ``timeout_s``. Returns its exit code, or ``None`` if it timed out or could not start."""
    stream = stream or sys.stderr
    try:
        proc = subprocess.Popen(command, shell=True, env={**os.environ, **env},
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        print(f"notify: could not run {command!r}: {exc.strerror or exc}", file=stream)
        return None
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        print(f"notify: {command!r} ran past {timeout_s:g} s and was stopped", file=stream)
        return None
    if code != 0:
        print(f"notify: {command!r} exited with {code}", file=stream)
    return code


def finish_run(sweep: SweepDir | None, *, status: str, report: bool = False,
               notify: str | None = None, stream: TextIO | None = None) -> dict[str, Any]:
    """Write the report (``report``) and run the notify command, never raising.

    ``sweep`` is ``None`` when the run failed before it had a sweep directory; the notify
    command then gets the status and empty paths."""
    stream = stream or sys.stderr
    report_path = None
    if report and sweep is not None and sweep.exists():
        try:
            from hpsearch.report import write_report

            html, _ = write_report(sweep, compare="previous")  # what changed since last time
            report_path = str(html)
            print(f"report:    {html}", file=sys.stdout, flush=True)
        except Exception as exc:  # noqa: BLE001 - the sweep's outcome stands regardless
            from hpsearch.store.summary import printable

            print(f"report: could not be written: {type(exc).__name__}: {printable(exc)}",
                  file=stream)
    if notify:
        env = (notify_env(sweep, status=status, report=report_path) if sweep is not None else
               {"HPSEARCH_SWEEP": "", "HPSEARCH_SWEEP_DIR": "", "HPSEARCH_STATUS": status,
                "HPSEARCH_BEST": "", "HPSEARCH_BEST_CONFIG": "", "HPSEARCH_REPORT": ""})
        run_notify(notify, env, stream=stream)
    return {"report": report_path}
