"""gpu_util_pct: the window's mean and the ranks' mean as hand-worked tables, and the
sampler as a real thread driven by an injected reader (events, never durations). The
all-gather over ranks is in test_collectives.py; the CPU's null through a harness trial in
test_loop.py."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

from hpsearch.train import utilization
from hpsearch.train.utilization import (UtilSampler, gpu_util_pct, mean_over_ranks,
                                        nvml_reader, utilization_sampler, window_mean)

DEADLINE_S = 30  # only a hang reaches it

# Readings at t = 10..13 s: 40, 60, 100 and 0 percent.
SAMPLES = [(10.0, 40.0), (11.0, 60.0), (12.0, 100.0), (13.0, 0.0)]


@pytest.mark.parametrize("since, expected", [
    (9.0, 50.0),           # every reading: (40 + 60 + 100 + 0) / 4
    (10.0, 50.0),          # a reading at the window's start is in it
    (10.5, 160.0 / 3),     # (60 + 100 + 0) / 3
    (12.0, 50.0),          # (100 + 0) / 2
    (13.0, 0.0),           # the last one alone
    (13.5, 0.0),           # none in the window: the newest before it (t = 13), not 40
])
def test_window_mean_averages_the_readings_since_the_window_began(since, expected):
    assert window_mean(SAMPLES, since) == pytest.approx(expected)


def test_window_mean_of_no_reading_is_none():
    assert window_mean([], 0.0) is None


@pytest.mark.parametrize("values, expected", [
    ([90.0, 60.0], 75.0),
    ([90.0, None, 60.0], 75.0),        # a rank without NVML does not count as idle
    ([0.0, 100.0], 50.0),              # an idle rank does count
    ([float("nan"), 50.0], 50.0),
    ([80.0], 80.0),
    ([None, None], None),
    ([], None),
])
def test_mean_over_ranks_counts_the_ranks_that_could_read_their_gpu(values, expected):
    assert mean_over_ranks(values) == expected


def _clock(start: int = 1):
    """Stamps 1.0, 2.0, 3.0, ... one per reading."""
    ticks = iter(range(start, 10_000))
    return lambda: float(next(ticks))


def test_the_sampler_reads_in_its_own_thread_and_ends_when_the_reader_gives_none():
    values = [30.0, 50.0, 70.0]
    threads: list[str] = []
    dry, release = threading.Event(), threading.Event()

    def read():
        threads.append(threading.current_thread().name)
        if values:
            return values.pop(0)
        dry.set()
        release.wait(DEADLINE_S)
        return None

    sampler = UtilSampler(read, every_s=0.001, clock=_clock())
    with sampler:
        assert dry.wait(DEADLINE_S), "the sampler never read a fourth time"
        assert sampler.samples() == [(1.0, 30.0), (2.0, 50.0), (3.0, 70.0)]
        assert sampler.window(2.0) == 60.0
        release.set()
        assert sampler.wait(DEADLINE_S), "a reader that gave None did not end the sampling"
    assert threads == ["hpsearch-gpu-util"] * 4
    assert sampler.samples() == [(1.0, 30.0), (2.0, 50.0), (3.0, 70.0)]


def test_stop_ends_a_sampler_whose_reader_always_answers():
    answered = threading.Event()

    def read():
        answered.set()
        return 42.0

    sampler = UtilSampler(read, every_s=3600.0)  # waits an hour between readings
    sampler.start()
    assert answered.wait(DEADLINE_S)
    sampler.stop(timeout=DEADLINE_S)
    assert not sampler.running
    assert [v for _, v in sampler.samples()] == [42.0]


def test_a_reader_that_raises_ends_the_sampling_without_an_error():
    def read():
        raise RuntimeError("NVML: not supported on this MIG slice")

    with UtilSampler(read, every_s=0.001) as sampler:
        assert sampler.wait(DEADLINE_S)
    assert sampler.samples() == [] and sampler.window(0.0) is None


def test_a_report_forgets_the_readings_no_later_window_needs():
    values = iter([10.0, 20.0, 30.0, 40.0, 50.0])
    done = threading.Event()

    def read():
        value = next(values, None)
        if value is None:
            done.set()
        return value

    sampler = UtilSampler(read, every_s=0.001, clock=_clock())
    with sampler:
        assert done.wait(DEADLINE_S) and sampler.wait(DEADLINE_S)
    # On a GPU with one rank: the window's mean, then only the newest reading before it
    # (t = 3) and those in it stay.
    assert gpu_util_pct(sampler, 3.5, torch.device("cuda", 0), forget=True) == 45.0
    assert sampler.samples() == [(3.0, 30.0), (4.0, 40.0), (5.0, 50.0)]
    assert gpu_util_pct(sampler, 3.5, torch.device("cuda", 0)) == 45.0  # no forget: kept
    assert len(sampler.samples()) == 3


def test_the_cpu_has_no_sampler_and_no_figure():
    with utilization_sampler(torch.device("cpu")) as sampler:
        assert sampler is None
    assert gpu_util_pct(None, 0.0, torch.device("cpu"), world=2) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where NVML is unread")
def test_nvml_unavailable_reads_none_and_says_so_once(monkeypatch):
    # On this CPU build without nvidia-ml-py, torch.cuda.utilization raises
    # ModuleNotFoundError ("nvidia-ml-py does not seem to be installed ...").
    monkeypatch.setattr(utilization, "_said_unavailable", False)
    read = nvml_reader(torch.device("cuda", 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read() is None and read() is None
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1, said
    assert said[0].startswith("gpu_util_pct will be null: torch.cuda.utilization cannot read")
    assert "nvidia-ml-py" in said[0]
