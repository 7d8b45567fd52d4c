"""Output lines -> reports: named groups, key=value pairs, JSON, and what rides along."""

from __future__ import annotations

import math
import io
import re
from pathlib import Path

from hpsearch.command.metrics import OutputReader, parse_line

NANO = re.compile(r"step (?P<step>\d+): train loss (?P<train_loss>[0-9.]+), "
                  r"val loss (?P<val_loss>[0-9.]+)")


def test_parse_line():
    assert parse_line("step 250: train loss 1.8, val loss 1.95", [NANO]) == \
        {"step": 250, "train_loss": 1.8, "val_loss": 1.95}
    assert parse_line("iter 10: loss 2.3", [NANO]) == {}
    found = parse_line("epoch=3 val_loss=4.1e-01 lr=0.001, acc=nan path=/a=b name=x")
    assert math.isnan(found.pop("acc"))
    assert found == {"epoch": 3, "val_loss": 0.41, "lr": 0.001}
    assert parse_line('{"epoch": 2, "val_loss": 0.5, "tag": "x", "ok": true}') == \
        {"epoch": 2, "val_loss": 0.5}
    assert parse_line("10%|###  | loss=3\r50%|#####| loss=2.5 val_loss=2") == \
        {"loss": 2.5, "val_loss": 2}
    assert parse_line("a=1.2.3 b==2 c=4x") == {}


def test_reports_carry_what_came_before_and_a_time():
    train = re.compile(r"iter (?P<step>\d+): loss (?P<train_loss>[0-9.]+)")
    reader = OutputReader([NANO.pattern, train.pattern], objective="val_loss", time_key="step")
    assert reader.feed("iter 10: loss 2.5") == []
    assert reader.feed("step 20: train loss 2.1, val loss 2.2") == \
        [{"step": 20, "train_loss": 2.1, "val_loss": 2.2}]
    assert reader.feed("iter 30: loss 1.9") == []
    assert reader.feed("nothing here") == []
    reader2 = OutputReader([], objective="val_loss", time_key="epoch")
    assert reader2.feed("val_loss=3") == [{"val_loss": 3, "epoch": 1}]  # counted
    assert reader2.feed("epoch=5 train_loss=1") == []
    assert reader2.feed("val_loss=2") == [{"val_loss": 2, "epoch": 5, "train_loss": 1}]
    assert reader2.reports == 2 and reader2.seen == {"val_loss", "epoch", "train_loss"}


CAPTURED = Path(__file__).with_name("captured")


def lines_as_read(name: str) -> list[str]:
    """A captured output, split into lines as ``run_command``'s pipe reads them (text
    mode: a progress bar's ``\\r`` ends a line too)."""
    data = (CAPTURED / name).read_bytes()
    return list(io.TextIOWrapper(io.BytesIO(data), errors="replace"))


def read_all(lines, **kw) -> tuple[list[dict], OutputReader]:
    reader = OutputReader([], **kw)
    out = []
    for line in lines:
        out += reader.feed(line)
    return out + reader.finish(), reader


def test_python_dicts_of_both_hf_trainer_formats_parse():
    five = "\r   \r\x1b[A{'eval_loss': '1.072', 'eval_runtime': '0.3684', 'epoch': '3.333'}"
    assert parse_line(five) == {"eval_loss": 1.072, "eval_runtime": 0.3684, "epoch": 3.333}
    four = "{'eval_loss': 1.072, 'eval_accuracy': 0.5, 'epoch': 3.33, 'name': 'x', 'ok': True}"
    assert parse_line(four) == {"eval_loss": 1.072, "eval_accuracy": 0.5, "epoch": 3.33}
    assert parse_line("{'a': __import__('os').getpid()}") == {}  # data only, never run


def test_hf_trainer_evaluations_land_at_the_trainers_steps():
    """Real output of examples/hf_trainer/train.py (transformers 5.24, 30 steps, an
    evaluation every 10 with a 7-batch evaluation bar)."""
    lines = lines_as_read("hf_trainer_5.24.log")
    reports, reader = read_all(lines, objective="eval_loss", time_key="step")
    assert [(r["step"], r["eval_loss"], r["epoch"]) for r in reports] == [
        (10, 2.241, 0.6667), (20, 1.775, 1.333), (30, 1.64, 2)]
    assert reports[0]["loss"] == 2.496 and reports[0]["learning_rate"] == 0.00252
    assert reader.time_from == {"the training progress bar"}
    # The loss at step 30 is printed after a stale bar (21/30); its redraw says 30.
    losses, _ = read_all(lines, objective="loss", time_key="step")
    assert [r["step"] for r in losses] == [10, 20, 30]


def test_a_report_waits_for_its_bar_no_longer_than_the_bar_wait():
    now = [0.0]
    reader = OutputReader([], objective="eval_loss", time_key="step", clock=lambda: now[0])
    assert reader.feed("\r 40%|####  | 40/100 [00:04<00:06]\n") == []
    assert reader.feed("{'eval_loss': '2.5', 'epoch': '0.4'}\n") == []
    assert reader.tick() == []
    now[0] = 10.0
    assert reader.tick() == [{"eval_loss": 2.5, "epoch": 0.4, "step": 40}]


def test_the_evaluation_bar_is_never_taken_for_the_step():
    """The issue's case: a nested evaluation bar (``44/49``, drawn with a cursor-up) shown
    after the training bar's ``20/200``, before and after the evaluation's dict."""
    now = [0.0]
    reader = OutputReader([], objective="eval_loss", time_key="step", clock=lambda: now[0])
    reader.feed("\r 10%|#         | 20/200 [00:10<01:30]\n")
    reader.feed("\r 90%|######### | 44/49 [00:01<00:00]\x1b[A\n")
    assert reader.feed("\r   \r\x1b[A{'eval_loss': '5.654', 'epoch': '0.1149'}\n") == []
    assert reader.feed("\r100%|##########| 49/49 [00:01<00:00]\x1b[A\n") == [
        {"eval_loss": 5.654, "epoch": 0.1149, "step": 20}]
    reader.feed("\r 91%|######### | 45/49 [00:01<00:00]\x1b[A\n")
    reader.feed("{'eval_loss': '5.1', 'epoch': '0.2'}\n")
    now[0] = 10.0
    assert reader.tick() == [{"eval_loss": 5.1, "epoch": 0.2, "step": 20}]


def test_lightning_progress_bar_postfix_reports_once_per_validation():
    """Real output of examples/lightning/train.py with Lightning's tqdm bar (3 epochs)."""
    reports, reader = read_all(lines_as_read("lightning_2.6_tqdm.log"), objective="val_loss",
                               time_key="epoch")
    assert [(r["epoch"], r["val_loss"], r["val_acc"]) for r in reports] == [
        (1, 1.96, 0.731), (2, 0.833, 0.842), (3, 0.516, 0.872)]
    assert reader.time_from == {"a count of the reports"}
