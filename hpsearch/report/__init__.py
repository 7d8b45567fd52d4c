"""The sweep report: ``report.html`` (one self-contained page) and ``report.md``.

============  =========================================================================
_load         the sweep's files, read tolerantly (a damaged file becomes a note)
_facts        the numbers: best, ledger, rung funnel, precision, equal-budget rows
_study        Optuna studies: the sweep's own (:func:`load_study`), one built in memory
              from equal-budget rows (:func:`equal_budget_study`), fANOVA importance
_figures      matplotlib figures as PNG bytes (object API, no pyplot, no display)
_document     the report as blocks, rendered to HTML and to Markdown
_context      the facts every section reads, computed once
_front        the section on a sweep of several objectives: its Pareto front
_results      sections on what the sweep found: progress, best trials, curves, lr
_analysis     sections that explain it: precision, importance, the rung funnel
_accounting   sections that account for it: ledger (GPUs left idle), failures, all trials,
              about
_format       cells as text: numbers, hours, times, configurations, error lines
_build        facts -> document: the summary, the comparison, the sections in order
============  =========================================================================

May import ``hpsearch.store``, ``hpsearch.space``, pandas, matplotlib and Optuna; never
Ray or torch (a test checks this).

Example:
    >>> from hpsearch.report import write_report
    >>> html, md = write_report("runs/quickstart", compare="previous")   # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from hpsearch.errors import SweepNotFoundError
from hpsearch.report._facts import equal_budget
from hpsearch.report._load import SweepData, load_sweep
from hpsearch.report._study import equal_budget_study, importances, load_study
from hpsearch.store.layout import SweepDir, check_sweep_name, write_atomic
from hpsearch.store.listing import find_previous

__all__ = ["ReportPaths", "equal_budget", "equal_budget_study", "find_previous",
           "importances", "load_study", "load_sweep", "write_report"]

#: ``--compare previous``: the newest earlier sweep of the same space name.
PREVIOUS = "previous"


class ReportPaths(NamedTuple):
    html: Path
    md: Path


def write_report(sweep_dir: str | os.PathLike | SweepDir, *,
                 compare: str | None = None) -> ReportPaths:
    """Write ``<sweep>/report.html`` and ``<sweep>/report.md``.

    Works for a sweep in any state (running, finished, failed, interrupted, no trial yet):
    what its files hold is reported, and what cannot be read is said so in the report.

    Args:
        sweep_dir: The sweep directory.
        compare: Another sweep in the same storage to compare with: its name, or
            ``"previous"`` for the newest earlier sweep whose space has the same ``name:``
            (none found is a note in the report, not an error).

    Returns:
        The paths of the HTML and Markdown files. The Markdown's figures are PNG files in
        ``<sweep>/report-images/``; the HTML embeds the same images.

    Raises:
        SweepNotFoundError: ``sweep_dir`` is not a sweep, or ``compare`` names none.
        StorageError: A report file cannot be written.
    """
    from hpsearch.report._build import build_document
    from hpsearch.report._document import to_html, to_markdown

    data = load_sweep(sweep_dir)
    other, note = _comparison(data, compare)
    doc = build_document(data, compare=other, compare_note=note)
    sweep = data.sweep
    write_atomic(sweep.report_html, lambda tmp: tmp.write_text(to_html(doc), encoding="utf-8"))
    images = sweep.report_images
    _write_images(sweep, doc)
    md = to_markdown(doc, images=images.name)
    write_atomic(sweep.report_md, lambda tmp: tmp.write_text(md, encoding="utf-8"))
    return ReportPaths(sweep.report_html, sweep.report_md)


def _write_images(sweep: SweepDir, doc) -> None:
    folder = sweep.report_images
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        from hpsearch.errors import StorageError

        raise StorageError(f"cannot create {folder}: {exc.strerror or exc}") from None
    keep = {f"{f.name}.png" for f in doc.figures()}
    for old in folder.glob("*.png"):  # figures of an earlier report this one lacks
        if old.name not in keep:
            sweep.remove(old)
    for fig in doc.figures():
        write_atomic(folder / f"{fig.name}.png", lambda tmp, png=fig.png: tmp.write_bytes(png))


def _comparison(data: SweepData, compare: str | None) -> tuple[SweepData | None, str | None]:
    if not compare:
        return None, None
    if compare == PREVIOUS:
        found = find_previous(data.sweep)
        if found is None:
            name = data.space_name or data.sweep.name
            return None, (f"no earlier sweep of the space {name!r} in {data.sweep.storage} "
                          "to compare with")
        return load_sweep(found), None
    other = SweepDir(data.sweep.storage / check_sweep_name(compare, what="--compare sweep"))
    if other.path == data.sweep.path:
        return None, "--compare names this sweep itself; nothing to compare"
    if not os.path.lexists(other.manifest):
        raise SweepNotFoundError(f"--compare: no sweep named {compare!r} in "
                                 f"{data.sweep.storage}")
    return load_sweep(other), None



class _CallableModule(type(os)):
    """``hpsearch.report(step=..., val_loss=...)`` is the push API of command trainables
    (``hpsearch.command.push``). Once this package is imported, the attribute
    ``hpsearch.report`` is this module, so calling it still reports, through the top-level
    package's lazy export."""

    def __call__(self, **metrics: float) -> None:
        import hpsearch

        hpsearch.__getattr__("report")(**metrics)


import sys as _sys  # noqa: E402

_sys.modules[__name__].__class__ = _CallableModule
