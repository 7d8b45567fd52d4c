"""A run's search, opened in one operation: the study with this run's sampler, the
searcher over it and the ASHA scheduler seeded from it (:func:`open_search`).

``hpsearch run``, ``hpsearch resume`` and the replay benchmark
(``benchmarks/replay/methods.py``) all open their search here, so the replay scores the
same wiring the sweep runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.samplers import make_sampler
from hpsearch.driver.search.schedulers import make_scheduler
from hpsearch.driver.search.searcher import Admits, SweepSearch, SweepSearcher
from hpsearch.space.spec import Spec

__all__ = ["Search", "open_search"]


@dataclass(frozen=True)
class Search:
    """A run's search plug-ins: Tune's searcher and its trial scheduler.

    Attributes:
        searcher: Asks and ends trials through the record; asks the admission first.
        scheduler: ASHA (or FIFO without a ``scheduler:``), marking its stops in the record.
    """

    searcher: SweepSearcher
    scheduler: Any

    def search_alg(self, *, slots: int) -> SweepSearch:
        """The searcher as Tune's ``search_alg``, asking for at most ``slots`` at once."""
        return SweepSearch(self.searcher, slots=slots)


def open_search(record: SweepRecord, admission: Admits) -> Search:
    """Open the record's study with this run's sampler, and the searcher and scheduler
    over it. A resumed sweep's sampler is reseeded (:func:`reseeded`)."""
    spec = record.spec
    record.open_study(sampler=make_sampler(reseeded(spec, len(record.recorded))))
    return Search(SweepSearcher(record, admission=admission), make_scheduler(spec, record))


def reseeded(spec: Spec, runs_before: int) -> Spec:
    """The spec whose sampler continues a sweep that already has ``runs_before`` trials:
    its seed mixed with that count, so that a resumed sweep's random start-up points are
    not the first run's again (the sampler's state is not saved)."""
    seed = spec.search.seed
    if not runs_before or seed is None:
        return spec
    return replace(spec, search=replace(spec.search, seed=(seed * 1_000_003 + runs_before) % 2**32))
