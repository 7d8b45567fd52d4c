"""Reports from files a script writes (``metrics_from``) and from ``hpsearch.report``: each
read as it grows, rows already there at the start skipped, half-written lines left for
the next read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpsearch.command.sources import MetricsFile, TrialMetrics, newest_match


def collector(tmp_path, *files, objective="val_loss", time_key="step", push=None):
    got: list[dict] = []
    metrics = TrialMetrics(patterns=(), objective=objective, time_key=time_key,
                           trial_dir=str(tmp_path), files=files, push_file=push,
                           report=got.append, poll_s=0.0)
    return metrics, got


def test_a_lightning_csv_is_read_as_it_grows_and_through_its_rewrites(tmp_path):
    folder = tmp_path / "logs" / "version_0"
    folder.mkdir(parents=True)
    csv = folder / "metrics.csv"
    metrics, got = collector(tmp_path, MetricsFile("logs/version_*/metrics.csv", "lightning"))
    csv.write_text("epoch,step,val_acc,val_loss\n0,22,0.73,1.95\n1,45,0.84,0.8")  # half a row
    metrics.poll()  # Lightning's 0-based epoch and step: 1 epoch, 23 steps done
    assert got == [{"epoch": 1, "step": 23, "val_acc": 0.73, "val_loss": 1.95}]
    # Lightning rewrites the file with a wider header when a new metric appears
    csv.write_text("epoch,step,train_loss,val_acc,val_loss\n0,22,,0.73,1.95\n"
                   "1,45,,0.84,0.83\n2,49,0.59,,\n2,68,,0.87,0.51\n")
    metrics.poll()
    assert [(r["step"], r["val_loss"]) for r in got] == [(23, 1.95), (46, 0.83), (69, 0.51)]
    assert got[-1]["train_loss"] == 0.59  # rode along from its own row


def test_rows_of_an_earlier_attempt_are_not_reported_again(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"step": 1, "val_loss": 3}\n')
    metrics, got = collector(tmp_path, MetricsFile("m.jsonl", "jsonl"))
    with open(tmp_path / "m.jsonl", "a") as f:
        f.write('{"step": 2, "val_loss": 2, "note": "x"}\n{"step": 3, "val_')
    metrics.poll()
    assert got == [{"step": 2, "val_loss": 2}]
    with open(tmp_path / "m.jsonl", "a") as f:
        f.write('loss": 1.5}\n')
    metrics.finish()
    assert got[-1] == {"step": 3, "val_loss": 1.5}


def test_the_newest_trainer_state_is_read(tmp_path):
    def checkpoint(step: int, evals: list[tuple[int, float]]) -> None:
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        history = []
        for s, loss in evals:
            history += [{"loss": loss + 0.1, "step": s, "epoch": s / 10},
                        {"eval_loss": loss, "step": s, "epoch": s / 10}]
        (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))

    metrics, got = collector(tmp_path, MetricsFile("checkpoint-*/trainer_state.json",
                                                   "trainer_state"), objective="eval_loss")
    checkpoint(20, [(10, 2.0), (20, 1.5)])
    metrics.poll()
    checkpoint(100, [(10, 2.0), (20, 1.5), (30, 1.2)])  # 100 sorts after 20 by its number
    metrics.poll()
    assert [(r["step"], r["eval_loss"], r["loss"]) for r in got] == [
        (10, 2.0, 2.1), (20, 1.5, 1.6), (30, 1.2, pytest.approx(1.3))]


def test_tensorboard_scalars_are_one_row_per_step(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "runs"))
    metrics, got = collector(tmp_path, MetricsFile("runs", "tensorboard"),
                             objective="eval/loss")
    for step, loss in ((10, 2.0), (20, 1.5)):
        writer.add_scalar("train/loss", loss + 0.1, step)
        writer.add_scalar("eval/loss", loss, step)
    writer.flush()
    metrics.poll()
    writer.add_scalar("eval/loss", 1.25, 30)
    writer.close()
    metrics.finish()
    assert [(r["step"], r["eval/loss"]) for r in got] == [(10, 2.0), (20, 1.5), (30, 1.25)]
    assert got[0]["train/loss"] == pytest.approx(2.1)


def test_newest_match_orders_by_the_number_in_the_name_then_time(tmp_path):
    for name in ("checkpoint-9", "checkpoint-120", "checkpoint-40"):
        (tmp_path / name).mkdir()
    assert newest_match(str(tmp_path), "checkpoint-*").endswith("checkpoint-120")
    (tmp_path / "a.pt").write_text("")
    (tmp_path / "b.pt").write_text("")
    os.utime(tmp_path / "a.pt", (2e9, 2e9))
    assert newest_match(str(tmp_path), "*.pt").endswith("a.pt")
    assert newest_match(str(tmp_path), "none-*") is None


PUSHER = """
import hpsearch, sys
hpsearch.report(step=1, val_loss=2.5)
hpsearch.report(step=2, val_loss=float("nan"), acc=1)
print("train_loss=9 val_loss=9")  # output is not read once the script pushes
hpsearch.report(step=3, val_loss=1.0)
print("loaded:", sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "torch")))
"""


def test_hpsearch_report_reaches_the_trial_and_is_a_no_op_outside(tmp_path):
    push = str(tmp_path / ".hpsearch" / "reports.jsonl")
    os.makedirs(os.path.dirname(push))
    metrics, got = collector(tmp_path, push=push)
    env = {**os.environ, "HPSEARCH_REPORT_FILE": push, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", PUSHER], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for line in out.stdout.splitlines(keepends=True):
        metrics.on_line(line)
    metrics.finish()
    assert [r["step"] for r in got] == [1, 2, 3] and got[2]["val_loss"] == 1.0
    assert "loaded: []" in out.stdout  # import hpsearch stays light
    del env["HPSEARCH_REPORT_FILE"]
    out = subprocess.run([sys.executable, "-c", PUSHER], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stderr.count("not running under hpsearch") == 1
