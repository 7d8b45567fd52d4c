"""The driver's checks at every step of Tune's loop follow Tune's trials incrementally and
agree with a full recount (no Ray started: Tune's trials are stand-ins)."""

import io
import random
from dataclasses import dataclass

from hpsearch.driver.callbacks import _TuneTrials


@dataclass
class FakeTrial:
    trial_id: str
    status: str = "PENDING"


def test_tune_trials_followed_step_by_step_match_a_full_recount():
    rng = random.Random(0)
    trials: list[FakeTrial] = []
    rows: dict[str, dict] = {}
    tracked = _TuneTrials()
    for step in range(400):
        if rng.random() < 0.5:  # Tune adds a trial (its row comes when it starts)
            trials.append(FakeTrial(f"{step:08x}"))
        for t in trials:
            if t.status == "PENDING" and rng.random() < 0.3:
                t.status = "RUNNING"
                rows[t.trial_id] = {}
            elif t.status == "RUNNING" and rng.random() < 0.2:
                t.status = rng.choice(["TERMINATED", "ERROR"])
        if rng.random() < 0.05 and trials:  # Tune retries a trial: moved to the end
            t = trials.pop(rng.randrange(len(trials)))
            t.status = "PENDING"
            trials.append(t)
            tracked.rescan = True
        tracked.update(trials, rows)
        assert tracked.ids == {t.trial_id for t in trials}
        assert tracked.active == sum(t.status not in _TuneTrials.ENDED for t in trials)
        assert tracked.outside == {t.trial_id for t in trials} - set(rows)


def test_the_live_status_line_reads_the_rows_at_its_refresh_rate_not_every_step():
    import io

    from hpsearch.driver.callbacks import ProgressCallback
    from hpsearch.space.spec import FloatParam, Objective, Scheduler, Spec
    from hpsearch.store.records import TrialRecords

    records = TrialRecords(Spec(
        name="t", trainable="digits", objective=Objective("val_loss", "min"),
        params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
        scheduler=Scheduler(type="asha", max_t=4, grace_period=1, reduction_factor=2)))
    for i in range(20):
        records.start(f"{i:08x}", {"lr": 0.01})
        records.result(f"{i:08x}", {"epoch": 1, "val_loss": 0.5, "time_total_s": 1.0})
        records.end(f"{i:08x}")
    progress = ProgressCallback(records, records.spec, stream=io.StringIO(), live=True)
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


def test_the_janitor_scans_every_second_only_for_sweeps_with_worker_groups(tmp_path):
    """One-worker trials train in their Tune actor and leave no Ray Train group to reap, so
    the scan of the cluster's placement-group table (which grows with the sweep) is not
    made at every step for them; it still is when a trial fails and at the end."""
    from hpsearch.driver.callbacks import Janitor
    from hpsearch.driver.fit import SweepRun
    from hpsearch.driver.runners import InProcessRunner, TrainRunner
    from hpsearch.space.spec import FloatParam, Objective, Scheduler, Spec
    from hpsearch.store.layout import SweepDir

    scans = []

    class Counting(Janitor):
        def reap(self):  # counted, not made: no Ray here
            scans.append(self.worker_groups)

    grouped, single = Counting(every_s=0.0), Counting(every_s=0.0, worker_groups=False)
    for _ in range(3):
        grouped.on_step_begin(0, [])
        single.on_step_begin(0, [])
    assert scans == [True, True, True]
    single.on_trial_error(0, [], None)
    single.on_experiment_end([])
    assert scans[3:] == [False, False]

    spec = Spec(name="t", trainable="digits", objective=Objective("val_loss", "min"),
                params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
                scheduler=Scheduler(type="asha", max_t=4, grace_period=1, reduction_factor=2))
    for runner, groups in ((InProcessRunner(spec), False),
                           (TrainRunner(spec, harness=True, workers=2), True)):
        run = SweepRun(spec, SweepDir.of(tmp_path / runner.kind), runner, verbose=False,
                       stream=io.StringIO(), share=False)
        assert run.janitor.worker_groups is groups
