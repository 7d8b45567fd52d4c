"""Command trainables swept for real: a team's unmodified script under ASHA at one and two
workers, a script that fails, and a sweep whose driver is killed mid-trial and resumed.
Each checks that no process of a command outlives its trial."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import hpsearch
from hpsearch.store.layout import SweepDir

pytestmark = [pytest.mark.ray, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "command_mode" / "train.py"

#: A training script without torch: a loss curve, a checkpoint it resumes from, a pause
#: per epoch, key=value lines. Stands in for a long run on 2 cores.
CURVE = textwrap.dedent(
    """\
    import argparse, json, os, time
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float); p.add_argument("--epochs", type=int)
    p.add_argument("--out_dir"); p.add_argument("--resume", action="store_true")
    p.add_argument("--pause", type=float, default=0.5)
    a = p.parse_args()
    ckpt = os.path.join(a.out_dir, "state.json")
    start = json.load(open(ckpt))["epoch"] if a.resume and os.path.exists(ckpt) else 0
    print(f"starting at epoch {start}")
    for epoch in range(start + 1, a.epochs + 1):
        time.sleep(a.pause)
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"epoch": epoch}, f)
        os.replace(ckpt + ".tmp", ckpt)
        print(f"epoch={epoch} val_loss={abs(a.lr - 0.01) + 1 / epoch:.5f}")
    """
)


def hpsearch_cmd(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def commands_alive(script: Path) -> list[str]:
    """Processes still running ``script`` (its supervisors included)."""
    out = subprocess.run(["pgrep", "-af", str(script)], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln]


def wait_until(predicate, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


def write_space(folder: Path, text: str) -> Path:
    space = folder / "space.yaml"
    space.write_text(textwrap.dedent(text))
    return space


def test_an_unmodified_script_swept_with_asha_at_one_and_two_workers(tmp_path, session_ray):
    shutil.copy(EXAMPLE, tmp_path / "train.py")
    space = write_space(tmp_path, """\
        name: cmd
        trainable:
          command: python train.py --lr={lr} --epochs={max_t} --seed={seed} --out_dir={trial_dir}
          resume: {if_exists: ckpt.pt, args: --init_from=resume}
        objective: {metric: val_loss, mode: min}
        params:
          lr: {type: float, low: 1.0e-3, high: 3.0e-1, log: true}
        search: {seed: 3, n_startup_trials: 3}
        scheduler: {type: asha, time_attr: epoch, max_t: 9, grace_period: 1, reduction_factor: 3,
                    brackets: 1}  # every trial judged at epoch 1: one is stopped there
        trials: {num: 5, max_concurrent: 2}
    """)
    result = hpsearch_cmd("run", str(space), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    trials = hpsearch.read_trials(tmp_path / "runs" / "cmd")
    assert len(trials) == 5 and set(trials.status) == {"completed", "stopped_by_asha"}, trials
    history = hpsearch.read_history(tmp_path / "runs" / "cmd")
    assert {"val_accuracy", "train_loss", "world_size"} <= set(history.columns)
    for row in trials.itertuples():
        log = (tmp_path / "runs" / "cmd" / "trials" / row.trial_id / "output.log").read_text()
        printed = [ln for ln in log.splitlines() if ln.startswith("epoch=")]
        if row.status == "stopped_by_asha":  # stopped while it ran, long before epoch 9
            assert len(printed) < 9
        else:
            assert len(printed) == 9
    assert commands_alive(tmp_path / "train.py") == []

    # The same script as DDP over two gloo ranks: it finds its process group in the
    # environment torchrun would give it.
    result = hpsearch_cmd("run", str(space), "--name", "ddp", "--set", "resources.workers=2",
                          "--set", "trials.num=1", "--set", "trials.max_concurrent=1",
                          "--set", "scheduler.type=fifo",
                          "--set", "scheduler.max_t=2", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    history = hpsearch.read_history(tmp_path / "runs" / "ddp")
    assert set(history.world_size) == {2} and len(history) == 2
    folders = list((tmp_path / "runs" / "ddp" / "trials").iterdir())
    assert [f.name for f in folders] == list(hpsearch.read_trials(tmp_path / "runs" / "ddp")
                                             .trial_id)  # the one trial's, and no other
    for folder in folders:
        assert {"output.log", "output-rank1.log", "ckpt.pt"} <= {p.name for p in folder.iterdir()}
    assert commands_alive(tmp_path / "train.py") == []


#: Where a counting script's ``{COUNTER}`` line stands: ``n`` is how many trials ran
#: before this one (the file in ``sys.argv[1]`` counts them), so each is worse than the last.
COUNTER = """\
counter = sys.argv[1]  # each trial is worse than the one before it
try:
    n = int(open(counter).read())
except FileNotFoundError:
    n = 0
open(counter, "w").write(str(n + 1))"""


def write_counting_script(tmp_path, text):
    """``train.py`` from ``text`` (indented; its ``{COUNTER}`` line becomes
    :data:`COUNTER`)."""
    (tmp_path / "train.py").write_text(textwrap.dedent(text).replace("{COUNTER}", COUNTER))


def three_worse_trials(tmp_path, name):
    """A space of three one-at-a-time trials of ``train.py`` with its counter file, ASHA
    at epoch 1 of 3: the first runs to the end, the two worse ones are stopped at 1."""
    return write_space(tmp_path, f"""\
        name: {name}
        trainable: {{command: 'python train.py {tmp_path / "count.txt"} --lr={{lr}}'}}
        objective: {{metric: val_loss, mode: min}}
        params: {{lr: {{type: float, low: 1.0e-3, high: 1.0e-2}}}}
        scheduler: {{type: asha, time_attr: epoch, max_t: 3, grace_period: 1,
                    reduction_factor: 3}}
        trials: {{num: 3, max_concurrent: 1}}
    """)


def test_a_script_slow_to_exit_when_stopped_does_not_hold_up_the_next_trial(
        tmp_path, session_ray):
    """ASHA stops a trial whose script takes seconds to exit on SIGTERM (it saves a
    checkpoint first, as Lightning does). The next trial still starts: with Tune's actor
    reuse, Tune waited 2 s for the stopped trial's thread, failed the next trial and
    never started another, and the sweep hung with its CPUs free (CI, the Lightning
    recipe)."""
    write_counting_script(tmp_path, """\
        import signal, sys, time
        def save_and_exit(*_):
            time.sleep(4)  # a checkpoint written on SIGTERM
            sys.exit(0)
        signal.signal(signal.SIGTERM, save_and_exit)
        {COUNTER}
        for epoch in (1, 2, 3):
            print(f"epoch={epoch} val_loss={n + 1 / epoch}", flush=True)
            time.sleep(1)
    """)
    space = three_worse_trials(tmp_path, "gaps")
    started = time.monotonic()
    result = hpsearch_cmd("run", str(space), cwd=tmp_path, timeout=240)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    trials = hpsearch.read_trials(tmp_path / "runs" / "gaps")
    assert list(trials.status) == ["completed", "stopped_by_asha", "stopped_by_asha"], trials
    for row in trials.itertuples():
        log = (tmp_path / "runs" / "gaps" / "trials" / row.trial_id / "output.log").read_text()
        printed = [ln for ln in log.splitlines() if ln.startswith("epoch=")]
        assert len(printed) == (3 if row.status == "completed" else 1), log
    wait_until(lambda: commands_alive(tmp_path / "train.py") == [], timeout=30)
    print(f"3 trials in {took:.1f} s")


def test_one_actor_runs_trial_after_trial_and_a_stopped_script_is_ended_at_once(
        tmp_path, session_ray):
    """One-worker command trials reuse Tune's actor (a new one costs seconds a trial),
    and a trial ASHA stops has its command ended at once: here its next report would
    come two minutes later, and Tune reuses the actor only once the stopped trial's
    thread has ended, else it fails the next trial and the sweep hangs."""
    write_counting_script(tmp_path, """\
        import os, sys, time
        {COUNTER}
        def parent(pid):
            return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        # the supervisor's guard, then its front; the front's parent is the trial's actor
        print("actor", parent(parent(os.getppid())), flush=True)
        print(f"epoch=1 val_loss={n + 1}", flush=True)
        if n:
            time.sleep(120)  # a worse trial's next report would come much later
        for epoch in (2, 3):
            print(f"epoch={epoch} val_loss={n + 1 / epoch}", flush=True)
    """)
    space = three_worse_trials(tmp_path, "reuse")
    result = hpsearch_cmd("run", str(space), cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    root = tmp_path / "runs" / "reuse"
    trials = hpsearch.read_trials(root)
    assert list(trials.status) == ["completed", "stopped_by_asha", "stopped_by_asha"], trials
    actors = {(root / "trials" / t / "output.log").read_text().split("actor ")[1].split()[0]
              for t in trials.trial_id}
    assert len(actors) == 1, actors  # one actor for the three trials
    wait_until(lambda: commands_alive(tmp_path / "train.py") == [], timeout=30)


def test_a_failing_script_fails_its_trials_with_its_last_lines(tmp_path, session_ray):
    (tmp_path / "train.py").write_text(
        "import sys\nprint('loading data')\nprint('no data at /data', file=sys.stderr)\n"
        "sys.exit(1)\n")
    space = write_space(tmp_path, """\
        trainable: {command: 'python train.py --lr={lr}'}
        objective: {metric: val_loss, mode: min}
        params: {lr: {type: float, low: 1.0e-3, high: 1.0e-2}}
        scheduler: {type: fifo, max_t: 2}
        trials: {num: 4, max_concurrent: 1, max_failures: 0}
    """)
    result = hpsearch_cmd("run", str(space), cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Traceback" not in result.stdout
    trials = hpsearch.read_trials(tmp_path / "runs" / "space")
    assert (trials.status == "failed").all()
    assert trials.error.str.contains(
        "exited with code 1; its last lines: loading data | no data at /data").all()


def test_a_trial_killed_with_its_driver_continues_from_its_checkpoint(tmp_path, session_ray):
    (tmp_path / "curve.py").write_text(CURVE)
    space = write_space(tmp_path, """\
        name: killed
        trainable:
          command: python curve.py --lr={lr} --epochs={max_t} --out_dir={trial_dir}
          resume: {if_exists: state.json, args: --resume}
        objective: {metric: val_loss, mode: min}
        params: {lr: {type: float, low: 1.0e-3, high: 1.0e-1, log: true}}
        scheduler: {type: fifo, max_t: 12}
        trials: {num: 2, max_concurrent: 2}
    """)
    sweep = tmp_path / "runs" / "killed"
    driver = subprocess.Popen([sys.executable, "-m", "hpsearch", "run", str(space)],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    logs = lambda: list((sweep / "trials").glob("*/output.log"))  # noqa: E731

    def mid_way() -> bool:
        return len(logs()) == 2 and all(log.read_text().count("epoch=") >= 3 for log in logs())

    wait_until(mid_way)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    wait_until(lambda: commands_alive(tmp_path / "curve.py") == [], timeout=30)
    at_kill = {log.parent.name: log.read_text().count("epoch=") for log in logs()}

    result = hpsearch_cmd("resume", "killed", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    trials = hpsearch.read_trials(sweep)
    assert list(trials.status) == ["completed", "completed"] and set(trials.epochs) == {12}
    for trial_id, epochs in at_kill.items():
        text = (sweep / "trials" / trial_id / "output.log").read_text()
        starts = [int(ln.split()[-1]) for ln in text.splitlines() if ln.startswith("starting")]
        assert starts[0] == 0 and starts[-1] >= epochs - 1  # continued, not from scratch
        assert text.count("epoch=") <= 12 + 1  # at most the epoch the kill interrupted, again
    assert SweepDir(sweep).trial_dir(trials.trial_id[0]).is_dir()
    assert commands_alive(tmp_path / "curve.py") == []
