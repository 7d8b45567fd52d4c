"""One configuration, no search: the library side of ``hpsearch trial``.

One harness worker trains in this process without Ray; several workers, or a raw Ray
Train loop, run as one Ray Train run (:func:`~hpsearch.driver.trials.resolve.resolve_runner`
decides).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from hpsearch.space.spec import Spec

__all__ = ["format_report", "run_single", "single_config"]


def single_config(spec: Spec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config ``hpsearch trial`` trains, and the searched values it chose for it.

    Searched parameters take their midpoint (geometric for log scales) or first choice;
    ``--set`` overrides have already made the ones the user chose fixed.
    """
    defaults = spec.default_config()
    chosen = {p.name: defaults[p.name] for p in spec.params if p.name in defaults}
    config = spec.trial_config(chosen)
    config.setdefault("use_gpu", spec.resources.use_gpu)
    return config, chosen


def run_single(
    spec: Spec,
    config: Mapping[str, Any],
    *,
    workers: int = 1,
    checkpoint_root: str | None = None,
    on_report: Callable[[dict[str, Any]], None] | None = None,
    address: str | None = None,
) -> list[dict[str, Any]]:
    """Train one full config (already through :meth:`Spec.trial_config`); return its reports.

    Raises:
        TrainableError: The trainable cannot be imported, or ``use_gpu`` is set where torch
            sees no CUDA device.
        TrialFailedError: The training code raised (its traceback is saved to a file).
    """
    from hpsearch.driver.trials.resolve import resolve_runner
    from hpsearch.errors import HpsearchError

    runner = resolve_runner(spec, workers=workers)
    try:
        return runner.run_alone(config, storage=checkpoint_root, address=address,
                                on_report=on_report)
    except HpsearchError:
        raise
    except Exception as exc:  # noqa: BLE001 - the trial's own code raised: one line, saved trace
        raise _trial_failed(exc) from None


def _trial_failed(exc: BaseException):
    """One line for a training failure; the full traceback goes to a file."""
    import tempfile
    import traceback

    from hpsearch.errors import TrialFailedError
    from hpsearch.store.summary import printable

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    with tempfile.NamedTemporaryFile("w", prefix="hpsearch-trial-", suffix=".txt",
                                     delete=False) as f:
        f.write(text)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    last = next((ln for ln in reversed(lines) if "Error" in ln or "Exception" in ln), lines[-1])
    return TrialFailedError(f"failed: {printable(last)[:400]} (traceback: {f.name})")


def format_report(metrics: Mapping[str, Any]) -> str:
    """One line per report, for ``hpsearch trial``."""
    keys = ("epoch", "step", "lr", "train_loss", "val_loss", "grad_norm", "samples_per_s")
    parts = []
    for key in (*keys, *sorted(k for k in metrics if k.startswith("val_") and k not in keys)):
        value = metrics.get(key)
        if value is None:
            continue
        parts.append(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
    status = metrics.get("status")
    if status not in (None, "running"):
        parts.append(f"[{status}{': ' + str(metrics['reason']) if metrics.get('reason') else ''}]")
    return "  ".join(parts)
