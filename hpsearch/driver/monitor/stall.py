"""Never a silent hang: what a sweep waits for when nothing happens.

:class:`StallWatch` notices trials that neither start, report nor end while resource
requests (placement groups) are pending; it says what the sweep waits for and what holds
the resources, and after ``fail_s`` it asks the sweep's stopper to end the run.
"""

from __future__ import annotations

import os
import time

from ray.tune import Callback

from hpsearch.store.records import TrialRecords

__all__ = ["STALL_FAIL_S", "STALL_WARN_S", "StallWatch", "describe_waiting"]


#: Seconds without a trial starting, reporting or ending, with resource requests pending,
#: before the sweep says what it waits for, and before it gives up (docs/cluster.md).
STALL_WARN_S, STALL_FAIL_S = 120.0, 900.0


class StallWatch(Callback):
    """Never a silent hang. When trials are running but none has started, reported or
    ended for ``warn_s`` seconds while resource requests (placement groups) are pending,
    it prints what the sweep waits for and what holds it; after ``fail_s`` seconds it
    stops the sweep, and :attr:`diagnosis` says why."""

    def __init__(self, records: TrialRecords, log, *, warn_s: float | None = None,
                 fail_s: float | None = None, check_every_s: float = 5.0):
        self.records = records
        self.log = log
        self.warn_s = warn_s if warn_s is not None else float(
            os.environ.get("HPSEARCH_STALL_WARN_S", STALL_WARN_S))
        self.fail_s = fail_s if fail_s is not None else float(
            os.environ.get("HPSEARCH_STALL_FAIL_S", STALL_FAIL_S))
        check_every_s = min(check_every_s, self.warn_s / 2)
        self.check_every_s = check_every_s
        self.last_activity = self.last_check = time.monotonic()
        self.warned = False
        self.diagnosis: str | None = None

    def __getstate__(self):
        # Tune pickles the Tuner's config once into tuner.pkl, which hpsearch never reads.
        return {}

    def _active(self, *args, **kwargs):
        self.last_activity = time.monotonic()
        self.warned = False

    on_trial_start = on_trial_result = on_trial_complete = on_trial_error = _active

    def setup(self, **info):
        self.last_activity = time.monotonic()

    def should_stop(self) -> bool:
        return self.diagnosis is not None

    def on_step_end(self, iteration, trials, **info):
        now = time.monotonic()
        if now - self.last_check < self.check_every_s or self.diagnosis is not None:
            return
        self.last_check = now
        idle = now - self.last_activity
        waiting_trials = any(t.status in ("PENDING", "RUNNING") for t in trials)
        if idle < self.warn_s or not (waiting_trials or self.records.unfinished()):
            return
        waiting = describe_waiting()
        if waiting is None:  # nothing is pending: trials are simply slow to report
            return
        if idle >= self.fail_s:
            self.diagnosis = (f"no trial started, reported or ended for {idle:.0f} s while "
                              f"{waiting}")
        elif not self.warned and self.log is not None:
            self.warned = True
            self.log(f"waiting {idle:.0f} s: {waiting}. The sweep gives up after "
                     f"{self.fail_s:.0f} s (HPSEARCH_STALL_FAIL_S).")


def describe_waiting() -> str | None:
    """What the cluster's pending resource requests wait for and what holds the resources,
    in one line; ``None`` when nothing is pending."""
    import ray
    from ray.util import placement_group_table

    groups = list(placement_group_table().values())
    pending = [g for g in groups if g.get("state") == "PENDING"]
    if not pending:
        return None
    want = _sum_bundles(pending)
    held = [g for g in groups if g.get("state") == "CREATED"]
    holders = []
    for g in held:
        name = g.get("name") or g.get("placement_group_id", "")[:8]
        holders.append(f"{name} ({_fmt_resources(_sum_bundles([g]))})")
    total = ray.cluster_resources()
    free = ray.available_resources()
    return (f"{len(pending)} resource request(s) wait for {_fmt_resources(want)}; the cluster "
            f"has {_fmt_resources(free, only=want)} free of {_fmt_resources(total, only=want)}"
            + (f", held by placement group(s) {', '.join(holders[:6])}" if holders else "")
            + ". A failed or leaked trial may hold them: see `ray status` and "
            "`ray list placement-groups`")


def _sum_bundles(groups) -> dict[str, float]:
    out: dict[str, float] = {}
    for g in groups:
        for bundle in (g.get("bundles") or {}).values():
            for key, value in bundle.items():
                if key in ("CPU", "GPU") or not key.startswith(("node:", "bundle_group", "memory")):
                    out[key] = out.get(key, 0.0) + float(value)
    return out


def _fmt_resources(resources, only=None) -> str:
    keys = list(only) if only else [k for k in resources if k in ("CPU", "GPU")]
    return ", ".join(f"{resources.get(k, 0):g} {k}" for k in keys) or "nothing"


