"""TensorBoard's event files read back with TensorBoard's own reader."""

from __future__ import annotations

from pathlib import Path


def scalar_steps(folder: Path, tag: str) -> list[int]:
    """The steps of every ``tag`` scalar in ``folder``'s event files, sorted (a step
    written twice shows twice)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # purge_orphaned_data off: a step written again must show, not replace what follows
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0},
                              purge_orphaned_data=False)
    events.Reload()
    tags = events.Tags()
    if tag in tags.get("scalars", []):
        return sorted(e.step for e in events.Scalars(tag))
    if tag in tags.get("tensors", []):
        return sorted(e.step for e in events.Tensors(tag))
    return []
