"""Warm start, as a new sweep begins: its study learns from earlier sweeps of the space."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hpsearch.driver.record.study import open_study
from hpsearch.driver.search.warmstart import import_trials, resolve_sources, warm_seed
from hpsearch.space.spec import Spec
from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import write_manifest

__all__ = ["warm_start"]


def warm_start(spec: Spec, sweep: SweepDir, manifest: dict[str, Any], stream: Any) -> Spec:
    """Seed the new sweep's study with earlier sweeps' trials
    (:mod:`hpsearch.driver.search.warmstart`) and record what was imported; returns the
    spec with the sweep's own sampler seed."""
    spec = replace(spec, search=replace(spec.search,
                                        seed=warm_seed(spec.search.seed, sweep.name)))
    manifest["seed"] = spec.search.seed
    sources = resolve_sources(sweep, spec, spec.search.warm_start)
    if not sources:
        manifest["warm_start"] = {"from": [], "imported": 0, "note": "no earlier sweep"}
        print("warm start: no earlier sweep of this space yet; starting fresh", file=stream)
    else:
        study, journal = open_study(
            sweep, direction="minimize" if spec.objective.mode == "min" else "maximize")
        summary = import_trials(spec, study, sources)
        if journal is not None:
            journal.sync()
        manifest["warm_start"] = summary
        print(f"warm start: {summary['imported']} trials from {', '.join(summary['from'])}"
              f" ({summary['not_fitting']} outside this space, {summary['skipped']} failed "
              f"or unfinished); {len(summary['enqueued'])} best configurations run first",
              file=stream)
    write_manifest(sweep, manifest)
    return spec
