"""Output lines -> reports: named groups, key=value pairs, JSON, and what rides along."""

from __future__ import annotations

import math
import re

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
    assert reader.feed("iter 10: loss 2.5") is None
    assert reader.feed("step 20: train loss 2.1, val loss 2.2") == \
        {"step": 20, "train_loss": 2.1, "val_loss": 2.2}
    assert reader.feed("iter 30: loss 1.9") is None
    assert reader.feed("nothing here") is None
    reader2 = OutputReader([], objective="val_loss", time_key="epoch")
    assert reader2.feed("val_loss=3") == {"val_loss": 3, "epoch": 1}  # counted
    assert reader2.feed("epoch=5 train_loss=1") is None
    assert reader2.feed("val_loss=2") == {"val_loss": 2, "epoch": 5, "train_loss": 1}
    assert reader2.reports == 2 and reader2.seen == {"val_loss", "epoch", "train_loss"}
