"""How busy a trial kept its GPUs: ``gpu_util_pct`` in each report.

Each rank of a GPU trial runs a :class:`UtilSampler`: a daemon thread that reads NVML's
utilisation of the rank's GPU once a second (``torch.cuda.utilization``: the percent of
the last sample period, 1/6 s to 1 s, in which a kernel was running). A report averages
the samples of its window (:func:`window_mean`: the training steps since the previous
report, like ``samples_per_s``), then the ranks' means (:func:`mean_over_ranks`, one
all-gather of a scalar).

``torch.cuda.utilization`` needs the ``pynvml`` module (the ``nvidia-ml-py`` package) on
CUDA, or ``amdsmi`` on ROCm; neither comes with torch. Without it, it raises
``ModuleNotFoundError`` ("nvidia-ml-py does not seem to be installed..."); on a GPU that
NVML cannot query (MIG slices) it raises NVML's error. Either way the sampler stops, the
process says so once (a ``RuntimeWarning``) and ``gpu_util_pct`` is ``None``: a trial
never fails for it. On the CPU there is no sampler and the figure is ``None``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import warnings
from typing import Callable, ContextManager, Sequence

import torch

__all__ = ["SAMPLE_EVERY_S", "UtilSampler", "gpu_util_pct", "mean_over_ranks", "nvml_reader",
           "util_over_ranks", "utilization_sampler", "window_mean"]

#: Seconds between two readings of a GPU's utilisation.
SAMPLE_EVERY_S = 1.0

#: A reading: (``time.perf_counter()`` when it was taken, percent busy).
Sample = tuple[float, float]

_said_unavailable = False


def window_mean(samples: Sequence[Sample], since: float) -> float | None:
    """The mean of the readings taken at or after ``since``.

    A window shorter than the sampling interval may hold none: then the newest reading
    before it (NVML's figure covers the moments before it was read). ``None`` without
    any reading.

    >>> window_mean([(1.0, 20.0), (2.0, 60.0), (3.0, 100.0)], since=1.5)
    80.0
    >>> window_mean([(1.0, 20.0), (2.0, 60.0)], since=2.5)
    60.0
    """
    inside = [v for t, v in samples if t >= since]
    if inside:
        return math.fsum(inside) / len(inside)
    before = [(t, v) for t, v in samples if t < since]
    return max(before)[1] if before else None


def mean_over_ranks(values: Sequence[float | None]) -> float | None:
    """The mean over the ranks that could read their GPU's utilisation; ``None`` when none
    could.

    >>> mean_over_ranks([90.0, None, 60.0])
    75.0
    """
    known = [v for v in values if v is not None and math.isfinite(v)]
    return math.fsum(known) / len(known) if known else None


def nvml_reader(device: torch.device) -> Callable[[], float | None]:
    """A function that reads ``device``'s utilisation in percent, or returns ``None`` (and
    says why, once per process) when NVML cannot be read."""

    def read() -> float | None:
        try:
            return float(torch.cuda.utilization(device))
        except Exception as exc:  # noqa: BLE001 - a figure missing never fails a trial
            _say_unavailable(exc)
            return None

    return read


def _say_unavailable(exc: BaseException) -> None:
    global _said_unavailable
    if _said_unavailable:
        return
    _said_unavailable = True
    why = (str(exc).strip().splitlines() or [""])[0][:200]
    warnings.warn(
        f"gpu_util_pct will be null: torch.cuda.utilization cannot read the GPU's "
        f"utilisation ({type(exc).__name__}: {why}); install nvidia-ml-py on every GPU node "
        "(amdsmi on ROCm)", RuntimeWarning, stacklevel=3)


class UtilSampler:
    """Reads ``read()`` every ``every_s`` seconds in a daemon thread, from :meth:`start`
    until :meth:`stop`; a reading of ``None`` (or one that raises) ends the sampling.

    Args:
        read: Returns the GPU's utilisation in percent, or ``None`` when unavailable.
        every_s: Seconds between readings.
        clock: Stamps each reading; :func:`time.perf_counter`, as the loop's windows.
    """

    def __init__(self, read: Callable[[], float | None], *, every_s: float = SAMPLE_EVERY_S,
                 clock: Callable[[], float] = time.perf_counter):
        self._read, self._every_s, self._clock = read, every_s, clock
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hpsearch-gpu-util", daemon=True)

    def start(self) -> UtilSampler:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the sampling to end (after :meth:`stop`, or
        once the reader gave ``None``); whether it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                value = self._read()
            except Exception:  # noqa: BLE001 - a reader that raises is an unavailable one
                value = None
            if value is None:
                return
            with self._lock:
                self._samples.append((self._clock(), float(value)))
            self._stopping.wait(self._every_s)

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def window(self, since: float, *, forget: bool = False) -> float | None:
        """:func:`window_mean` of the readings so far; ``forget`` drops those no later
        window needs (all before ``since`` but the newest of them)."""
        with self._lock:
            samples = list(self._samples)
            if forget:
                older = sum(1 for t, _ in samples if t < since)
                del self._samples[:max(older - 1, 0)]
        return window_mean(samples, since)

    def __enter__(self) -> UtilSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def utilization_sampler(device: torch.device) -> ContextManager[UtilSampler | None]:
    """A context manager that samples ``device``'s utilisation while it is open (and gives
    the :class:`UtilSampler`), or gives ``None`` on the CPU."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return UtilSampler(nvml_reader(device))


def gpu_util_pct(sampler: UtilSampler | None, since: float, device: torch.device,
                 world: int = 1, *, forget: bool = False) -> float | None:
    """The window's utilisation in percent: this rank's mean since ``since``, then the
    mean over the ``world`` ranks (a collective when ``world > 1``: every rank calls it).
    ``None`` on the CPU, and when no rank could read NVML."""
    if device.type != "cuda":
        return None
    mine = sampler.window(since, forget=forget) if sampler is not None else None
    return util_over_ranks(mine, device, world)


def util_over_ranks(value: float | None, device: torch.device, world: int) -> float | None:
    """:func:`mean_over_ranks` of every rank's ``value`` (a collective when ``world > 1``)."""
    if world <= 1:
        return mean_over_ranks([value])
    import torch.distributed as dist

    mine = torch.tensor([math.nan if value is None else value], dtype=torch.float64,
                        device=device)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    values = [float(t.item()) for t in every]
    return mean_over_ranks([None if math.isnan(v) else v for v in values])
