"""One worker is `python train.py`: a one-worker command trial gets none of torchrun's
variables (nor inherits them), unless `trainable.launcher: torchrun` asks for them.

The script decides "am I a DDP run?" the way well-known single-file training scripts do,
from `RANK` being set at all, and then asks torch for the NCCL backend: on a CPU build of
torch that raises, so a trial that wrongly gets torchrun's variables fails for real."""

from __future__ import annotations

import textwrap

import pytest

from hpsearch.driver.trials.resolve import resolve_runner
from hpsearch.errors import SpaceError, TrialFailedError
from hpsearch.space import load_space

SCRIPT = """\
    import os
    import torch.distributed as dist
    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        dist.init_process_group(backend="nccl")
    seen = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR") if k in os.environ]
    print(f"step=1 val_loss=0.5 torchrun_vars={len(seen)}")
"""


def _space(tmp_path, extra: str = "", workers: int = 1) -> str:
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "space.yaml").write_text(textwrap.dedent(f"""\
        trainable:
          command: python train.py --lr={{lr}}
          {extra}
        objective: {{metric: val_loss, mode: min}}
        params: {{lr: {{type: float, low: 0.1, high: 0.3}}}}
        scheduler: {{type: fifo, time_attr: step, max_t: 1}}
        resources: {{workers: {workers}}}
    """))
    return str(tmp_path / "space.yaml")


def test_one_worker_runs_like_python_train_py(tmp_path, monkeypatch):
    # Even a driver started under torchrun passes none of its variables on.
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    spec = load_space(_space(tmp_path))
    reports = resolve_runner(spec).run_alone(spec.trial_config({"lr": 0.2}),
                                             storage=str(tmp_path / "out"))
    assert reports == [{"step": 1, "val_loss": 0.5, "torchrun_vars": 0}]


def test_launcher_torchrun_gives_one_worker_torchruns_variables(tmp_path):
    spec = load_space(_space(tmp_path, "launcher: torchrun"))
    with pytest.raises(TrialFailedError, match="NCCL"):
        resolve_runner(spec).run_alone(spec.trial_config({"lr": 0.2}),
                                       storage=str(tmp_path / "out"))


def test_launcher_plain_with_several_workers_is_refused(tmp_path):
    with pytest.raises(SpaceError, match=r"trainable\.launcher: .*workers is 2"):
        load_space(_space(tmp_path, "launcher: plain", workers=2))


def test_launcher_names_its_choices(tmp_path):
    with pytest.raises(SpaceError, match=r"trainable\.launcher: must be one of plain, torchrun"):
        load_space(_space(tmp_path, "launcher: torchrn"))


@pytest.mark.timeout(120)  # without the limit, the trial waits for the script's 600 s
def test_a_command_silent_past_hung_after_fails_as_hung_and_leaves_nothing(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import os, time
        print("step=1 val_loss=0.5", flush=True)
        print("pid", os.getpid(), flush=True)
        time.sleep(600)  # waits on something that never comes
    """))
    (tmp_path / "space.yaml").write_text(textwrap.dedent("""\
        trainable: {command: "python train.py --lr={lr}", stop_grace: 1s}
        objective: {metric: val_loss, mode: min}
        params: {lr: {type: float, low: 0.1, high: 0.3}}
        scheduler: {type: fifo, time_attr: step, max_t: 5}
        trials: {hung_after: 2s}
    """))
    spec = load_space(str(tmp_path / "space.yaml"))
    assert spec.trials.hung_after_s == 2
    with pytest.raises(TrialFailedError, match=r"hung: reported nothing for 2 s "
                                               r"\(trials\.hung_after\)") as failed:
        resolve_runner(spec).run_alone(spec.trial_config({"lr": 0.2}),
                                       storage=str(tmp_path / "out"))
    assert "step=1 val_loss=0.5" in str(failed.value)
    log = (tmp_path / "out" / "trial" / "output.log").read_text()
    pid = int(next(ln for ln in log.splitlines() if ln.startswith("pid ")).split()[1])
    assert _gone(pid, timeout=10)


def _gone(pid: int, *, timeout: float) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_hung_after_must_be_a_duration(tmp_path):
    space = _space(tmp_path)
    with open(space, "a") as f:
        f.write("trials: {hung_after: soon}\n")
    with pytest.raises(SpaceError, match=r"trials\.hung_after: "):
        load_space(space)
