"""What watches a running sweep at every step of Tune's loop costs what changed, not the
size of the sweep (no Ray started: Tune's trials are stand-ins)."""

import io
from types import SimpleNamespace

from hpsearch.driver.monitor.housekeeping import OTHERS_REAP_S, Housekeeping
from hpsearch.driver.monitor.progress import ProgressCallback
from hpsearch.driver.search.ids import TRIAL_ID_KEY
from hpsearch.space.spec import FloatParam, Objective, Scheduler, Spec
from hpsearch.store.records import TrialRecords

SPEC = Spec(name="t", trainable="digits", objective=Objective("val_loss", "min"),
            params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
            scheduler=Scheduler(type="asha", max_t=4, grace_period=1, reduction_factor=2))


def test_the_live_status_line_reads_the_rows_at_its_refresh_rate_not_every_step():
    records = TrialRecords(SPEC)
    for i in range(20):
        records.start(f"{i:08x}", {"lr": 0.01})
        records.result(f"{i:08x}", {"epoch": 1, "val_loss": 0.5, "time_total_s": 1.0})
        records.end(f"{i:08x}")
    progress = ProgressCallback(records, SPEC, stream=io.StringIO(), live=True)
    progress.setup()
    renders = []
    real = progress._render
    progress._render = lambda: renders.append(1) or real()
    try:
        for step in range(2000):  # Tune's loop steps many times a second
            progress.on_step_end(step, [])
    finally:
        progress.close()
    assert len(renders) <= 2 + 1  # a step or two per half second, and the last one at close


def test_a_continued_trial_is_logged_under_its_own_id_without_the_id_key():
    records = TrialRecords(SPEC)
    records.start("b", {"lr": 0.01})
    records.result("b", {"epoch": 1, "step": 10, "val_loss": 0.5, "time_total_s": 1.0})
    out = io.StringIO()
    progress = ProgressCallback(records, SPEC, stream=out, live=False)
    tune_trial = SimpleNamespace(trial_id="9a8b7c6d", config={"lr": 0.01, TRIAL_ID_KEY: "b"})
    progress.on_trial_start(0, [], tune_trial)
    line = out.getvalue()
    assert "trial b started (continued): lr=0.01" in line and "hpsearch_trial_id" not in line


class Runner:
    def __init__(self, uses_worker_groups):
        self.uses_worker_groups = uses_worker_groups
        self.slots, self.ended = [], []

    def set_slots(self, slots):
        self.slots.append(slots)

    def trial_ended(self, trial_id):
        self.ended.append(trial_id)


class Admission:
    def __init__(self):
        self.share_now = 2

    def share(self):
        return self.share_now


def test_housekeeping_scans_every_second_only_for_runners_with_worker_groups():
    """One-worker trials train in their Tune actor and leave no Ray Train group to reap, so
    the scan of the cluster's placement-group table (which grows with the sweep) is made
    for them at the first step (an ended sweep's orphan may hold the CPUs they wait for)
    and then every OTHERS_REAP_S, not at every step; it still is when a trial fails and at
    the end."""
    scans = []

    class Counting(Housekeeping):
        def reap(self):  # counted, not made: no Ray here
            scans.append(self.runner.uses_worker_groups)

    grouped = Counting(Runner(True), Admission(), every_s=0.0)
    single = Counting(Runner(False), Admission(), every_s=0.0)
    for _ in range(3):
        grouped.on_step_end(0, [])
        single.on_step_end(0, [])
    assert scans == [True, False, True, True]
    single.last_reap -= OTHERS_REAP_S  # as if that long had passed
    single.on_step_end(0, [])
    assert scans[4:] == [False]
    del scans[3:]
    failed = SimpleNamespace(trial_id="x", config={TRIAL_ID_KEY: "b"})
    single.on_trial_error(0, [], failed)
    single.on_experiment_end([])
    assert scans[3:] == [False, False]
    assert single.runner.ended == ["b"]  # its warm group (if any) is freed at once


def test_housekeeping_gives_the_runner_its_share_when_it_changes():
    admission = Admission()
    keeper = Housekeeping(Runner(True), admission, every_s=0.0)
    keeper.reap = lambda: None
    for share in (2, 2, 1, 1, 2):
        admission.share_now = share
        keeper.on_step_end(0, [])
    assert keeper.runner.slots == [2, 1, 2]


def test_the_heartbeat_goes_on_while_tunes_loop_is_still():
    """Tune's loop waiting on a trial's process that never ends stops calling on_step_end;
    the heartbeat's own thread still says so, at its own pace."""
    import threading
    import time

    records = TrialRecords(SPEC)
    records.start("a", {"lr": 0.01})
    said = threading.Event()
    lines: list[str] = []
    progress = ProgressCallback(records, SPEC, stream=io.StringIO(), live=False,
                                heartbeat_s=0.2)
    progress.log = lambda line: (lines.append(line), said.set())
    progress.setup()
    try:
        progress.on_step_end(0, [])  # one step, then the loop is still
        assert said.wait(timeout=30), "no heartbeat while the loop was still"
    finally:
        progress.close()
    assert "1 running" in lines[0] and "no sweep event for" in lines[0]
    now = time.monotonic()
    progress.last_step = now
    assert progress.still_line(now + 0.1) is None  # the loop stepped 0.1 s ago
    assert "no sweep event for 1 s" in progress.still_line(now + 1.0)


def _command_spec(max_t: int = 200) -> Spec:
    from hpsearch.space.spec import Command

    return Spec(name="t", trainable=Command(argv=("python", "train.py")),
                objective=Objective("eval_loss", "min"),
                params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
                scheduler=Scheduler(type="asha", time_attr="step", max_t=max_t,
                                    grace_period=20, reduction_factor=2))


def test_a_command_that_ends_short_of_max_t_is_named_once_with_what_it_reported():
    spec = _command_spec()
    records = TrialRecords(spec)
    out = io.StringIO()
    progress = ProgressCallback(records, spec, stream=out, live=False)
    for trial_id in ("a", "b"):  # a script that prints no step: one report, counted as 1
        records.start(trial_id, {"lr": 0.01})
        records.result(trial_id, {"step": 1, "eval_loss": 5.6, "epoch": 0.11,
                                  "time_total_s": 1.0})
        records.end(trial_id, returned=True)  # the command exited 0
        assert records.trials[trial_id]["status"] == "completed"
        tune_trial = SimpleNamespace(trial_id="x", config={"lr": 0.01, TRIAL_ID_KEY: trial_id},
                                     last_result={"step": 1, "eval_loss": 5.6, "epoch": 0.11,
                                                  "time_total_s": 1.0, "pid": 7})
        progress.on_trial_complete(0, [], tune_trial)
    notes = [ln for ln in out.getvalue().splitlines() if "note:" in ln]
    assert len(notes) == 1
    assert ("note: trial a's command exited 0 at step 1 of max_t 200. Its last report carried "
            "epoch, eval_loss, step; a report without `step` counts as the next one") in notes[0]


def test_a_failure_every_trial_meets_is_read_in_full_once():
    spec = _command_spec()
    records = TrialRecords(spec)
    out = io.StringIO()
    progress = ProgressCallback(records, spec, stream=out, live=False)
    for trial_id in ("a", "b"):
        records.start(trial_id, {"lr": 0.01})
        records.end(trial_id, errored=True, error="`python` never reported eval_loss: read 0 "
                    "reports from its output.log (metrics it printed: none); its last lines: "
                    f"{trial_id}")
        progress.on_trial_complete(0, [], SimpleNamespace(
            trial_id="x", config={TRIAL_ID_KEY: trial_id}, last_result={}))
    lines = [ln.split(" ", 2)[2] for ln in out.getvalue().splitlines()]
    assert lines == [
        "trial a failed: `python` never reported eval_loss: read 0 reports from its output.log "
        "(metrics it printed: none); its last lines: a",
        "trial b failed: `python` never reported eval_loss: read 0 reports from its output.log "
        "(metrics it printed: none) (as trial a)"]
