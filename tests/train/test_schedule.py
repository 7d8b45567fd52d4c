import math
import subprocess
import sys

import pytest

from hpsearch.train.schedule import lr_at

# lr=1.0, min_lr=0.1, warmup 4, total 12: warmup ramps 0.25 .. 1.0, cosine over steps 4..12.
TABLE = [
    (0, 0.25),  # first step: lr / warmup_steps
    (1, 0.5),
    (3, 1.0),  # last warmup step reaches the peak
    (4, 1.0),  # cosine starts at the peak
    (8, 0.55),  # midway through the decay: (lr + min_lr) / 2
    (12, 0.1),  # end of the budget
    (13, 0.1),  # beyond: floor
    (1000, 0.1),
]


@pytest.mark.parametrize(("step", "expected"), TABLE)
def test_lr_follows_warmup_then_cosine_then_floor(step, expected):
    assert lr_at(step, lr=1.0, warmup_steps=4, total_steps=12, min_lr=0.1) == pytest.approx(expected)


def test_lr_without_warmup_starts_at_peak_and_decays_by_cosine():
    kwargs = dict(lr=2.0, warmup_steps=0, total_steps=10, min_lr=0.0)
    assert lr_at(0, **kwargs) == 2.0
    assert lr_at(5, **kwargs) == pytest.approx(1.0)
    assert lr_at(10, **kwargs) == 0.0
    expected = 0.5 * (1 + math.cos(math.pi * 0.3)) * 2.0
    assert lr_at(3, **kwargs) == pytest.approx(expected)


def test_lr_decays_monotonically_after_warmup():
    values = [lr_at(s, lr=1.0, warmup_steps=5, total_steps=50, min_lr=0.01) for s in range(5, 60)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_lr_only_ramps_up_when_warmup_covers_the_budget():
    kwargs = dict(lr=1.0, warmup_steps=10, total_steps=6, min_lr=0.1)
    assert [lr_at(s, **kwargs) for s in range(6)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert lr_at(10, **kwargs) == 0.1  # past both warmup and budget: floor


def test_lr_equal_to_min_lr_is_constant_after_warmup():
    assert {lr_at(s, lr=0.5, warmup_steps=0, total_steps=9, min_lr=0.5) for s in range(12)} == {0.5}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(step=-1), "step: must be >= 0"),
        (dict(lr=0.0), "lr: must be > 0"),
        (dict(warmup_steps=-1), "warmup_steps: must be >= 0"),
        (dict(total_steps=-5), "total_steps: must be >= 0"),
        (dict(min_lr=2.0), "min_lr: must satisfy 0 <= min_lr <= lr"),
        (dict(min_lr=-0.1), "min_lr: must satisfy"),
    ],
)
def test_lr_rejects_arguments_out_of_range_naming_them(kwargs, message):
    args = dict(step=0, lr=1.0, warmup_steps=2, total_steps=10, min_lr=0.1) | kwargs
    step = args.pop("step")
    with pytest.raises(ValueError, match=message):
        lr_at(step, **args)


def test_schedule_and_package_import_without_torch():
    code = "import sys, hpsearch.train.schedule, hpsearch.train; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
