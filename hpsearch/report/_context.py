"""What every section of the report reads: the sweep's facts, computed once, and the
helpers that draw a figure or a trial's reach."""

from __future__ import annotations

from typing import Callable

from hpsearch.report import _facts as facts
from hpsearch.report._document import Figure, Para
from hpsearch.report._load import SweepData, python_value

__all__ = ["SectionContext"]


class SectionContext:
    """The facts of one sweep (and the one it is compared with) that the sections share;
    the sections are methods of its subclasses, joined in :mod:`._build`."""

    def __init__(self, data: SweepData, compare: SweepData | None, compare_note: str | None):
        self.data = data
        self.compare = compare
        self.compare_note = compare_note
        self.notes = list(data.notes)
        self.objective = data.objective
        self.metric = self.objective.metric
        self.unit = facts.unit_name(data)
        self.params = data.params
        self.best = facts.best_row(data)
        self.ranked = facts.ranked(data)
        self.reached = facts.reached(data)
        self.ledger = facts.ledger(data)
        self.budget = facts.equal_budget(data)

    # --- helpers -----------------------------------------------------------------------

    def figure(self, name: str, alt: str, draw: Callable[[], bytes]) -> list:
        """A figure block, or a note in its place when drawing it fails: the report of a
        broken sweep must still be written."""
        try:
            return [Figure(name, draw(), alt)]
        except Exception as exc:  # noqa: BLE001
            text = f"figure '{alt}' could not be drawn: {type(exc).__name__}: {exc}"
            self.notes.append(text)
            return [Para(text)]

    def reached_text(self, trial_id: str) -> str:
        value = python_value(self.reached.get(str(trial_id)))
        return "n/a" if value is None else f"{value:g}"
