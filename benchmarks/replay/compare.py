"""Comparing replayed searches: any-time regret with bootstrap intervals, time to a target.

A result row (:func:`~benchmarks.replay.simulator.simulate`) holds a method's ``curve``:
``[t, best so far]`` at each improvement. At a budget ``b`` (time(R) units) its regret is
the best value found by ``b`` minus the best value in the table (the other way round for
``max``): 0 means the search has found the table's best evaluation. Before the first
evaluation a run has no value; it counts as the table's worst.

That regret rewards luck as well as search: the table's best evaluation is one run's
lucky seed, and a search that runs more trials draws more seeds. The row's ``found``
holds the other view (:data:`VIEWS`): at each improvement, the mean over its recorded
seeds of the configuration and epoch that gave it, against the best such mean in the
table: how good the configuration a search would hand over is. ``found_full`` (rows
written since PASHA, which ends most trials early on purpose) is that configuration's
best mean over a whole run: what it gives when it is trained again in full.

Intervals are 95% percentile-bootstrap intervals of the mean over seeds (2000 resamples
with a fixed generator: the table prints the same figures every time).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["BUDGETS", "VIEWS", "bootstrap_mean", "print_table", "read_rows", "regret_at", "time_to"]

#: The budgets the table reports, in units of time(R).
BUDGETS = (1, 2, 5, 10, 20, 50)

#: ``view -> (the row's curve, the row's best in table, a title)``.
VIEWS = {
    "seen": ("curve", "best_in_table", "the best value seen"),
    "found": ("found", "best_mean_in_table", "the configuration found (its mean over seeds)"),
    "full": ("found_full", "best_mean_in_table",
             "the configuration found, trained in full (its best epoch's mean over seeds)"),
}


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The result rows of a ``--out`` file (one JSON object a line)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def best_at(row: dict[str, Any], budget: float, *, key: str = "curve") -> float | None:
    """The best value ``row``'s search had found by ``budget``; ``None`` before any
    (``key="found"``: the seed-mean value of the incumbent then)."""
    found = None
    for t, value in row[key]:
        if t > budget:
            break
        found = value
    return found


def regret_at(row: dict[str, Any], budget: float, *, worst: float, sign: float = 1.0,
              view: str = "seen") -> float:
    """``row``'s regret at ``budget`` in ``view`` (module docstring)."""
    key, best, _ = VIEWS[view]
    found = best_at(row, budget, key=key)
    return sign * ((worst if found is None else found) - row[best])


def time_to(row: dict[str, Any], target: float, *, sign: float = 1.0) -> float:
    """The budget at which ``row``'s search first reached ``target`` (``inf``: never)."""
    for t, value in row["curve"]:
        if sign * value <= sign * target:
            return t
    return math.inf


def bootstrap_mean(xs: Sequence[float], *, resamples: int = 2000, seed: int = 0
                   ) -> tuple[float, float, float]:
    """The mean of ``xs`` and its 95% percentile-bootstrap interval."""
    data = np.asarray(xs, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    return float(data.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _slow_share(row: dict[str, Any], fast: str = "fp32") -> float | None:
    busy = row.get("worker_time") or {}
    total = sum(busy.values())
    if not total or fast not in busy:
        return None
    return 1 - busy[fast] / total


def summarise(rows: Iterable[dict[str, Any]], *, worst: float, target: float,
              sign: float = 1.0, budgets: Sequence[float] = BUDGETS,
              view: str = "seen") -> dict[str, dict]:
    """``{method: {"regret": {budget: (mean, low, high)}, "seeds", "ttt", "reached",
    "slow_share", "trials"}}`` over every seed of each method."""
    by_method: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_method[row["method"]].append(row)
    out = {}
    for method, runs in by_method.items():
        times = [time_to(r, target, sign=sign) for r in runs]
        shares = [s for s in map(_slow_share, runs) if s is not None]
        out[method] = {
            "seeds": len(runs),
            "regret": {b: bootstrap_mean([regret_at(r, b, worst=worst, sign=sign, view=view)
                                          for r in runs])
                       for b in budgets if all(b <= r["budget"] for r in runs)},
            "ttt": statistics.median(times), "reached": sum(math.isfinite(t) for t in times),
            "slow_share": statistics.fmean(shares) if shares else None,
            "trials": statistics.fmean(r["trials"] for r in runs),
        }
    return out


def _ci(cell: tuple[float, float, float]) -> str:
    mean, low, high = cell
    return f"{mean:.4f} [{low:.4f}, {high:.4f}]"


def verdict(summary: dict[str, dict], *, default: str = "hpsearch",
            against: Sequence[str] = ("ray-stock", "random-asha", "syne-asha", "syne-bohb",
                                      "syne-median"),
            budgets: Sequence[float] = (5, 10, 20, 50)) -> list[str]:
    """One line per rival: at which budgets the default's interval lies wholly below its
    (ahead), wholly above (behind), or the two overlap (tied)."""
    lines = []
    mine = summary.get(default)
    for other in against:
        theirs = summary.get(other)
        if mine is None or theirs is None:
            continue
        cells = []
        for b in budgets:
            if b not in mine["regret"] or b not in theirs["regret"]:
                continue
            (_, lo, hi), (_, olo, ohi) = mine["regret"][b], theirs["regret"][b]
            word = "ahead" if hi < olo else "behind" if lo > ohi else "tied"
            cells.append(f"{b:g}x {word}")
        lines.append(f"{default} vs {other}: " + ", ".join(cells))
    return lines + agreement(summary, budgets=budgets)


def agreement(summary: dict[str, dict], *, budgets: Sequence[float] = (5, 10, 20, 50)
              ) -> list[str]:
    """One line per real-Ray method (``<method>@ray``, :mod:`benchmarks.replay.confirm`)
    with a replayed twin: whether its mean lies inside the replay's 95% interval, and
    whether the two intervals overlap, at each budget both have."""
    lines = []
    for real in sorted(m for m in summary if m.endswith("@ray")):
        twin = summary.get(real[:-len("@ray")])
        if twin is None:
            continue
        cells = []
        for b in budgets:
            if b in summary[real]["regret"] and b in twin["regret"]:
                (mean, lo, hi), (_, tlo, thi) = summary[real]["regret"][b], twin["regret"][b]
                inside = "inside" if tlo <= mean <= thi else "outside"
                overlap = "overlap" if lo <= thi and tlo <= hi else "apart"
                cells.append(f"{b:g}x {mean:.4f} {inside} [{tlo:.4f}, {thi:.4f}], {overlap}")
        lines.append(f"{real} ({summary[real]['seeds']} seeds) against its replay: "
                     + "; ".join(cells))
    return lines


def print_table(rows: list[dict[str, Any]], *, worst: float, target: float,
                labels: dict[str, str], sign: float = 1.0, extra: Sequence[str] = ()) -> None:
    """The comparison as two Markdown tables (:data:`VIEWS`), each with its verdict."""
    for line in extra:
        print(line)
    for view, (key, _, title) in VIEWS.items():
        if not all(key in r for r in rows):
            continue  # rows written before the view
        print(f"\nRegret of {title}, mean [95% interval] over seeds:\n")
        _print_view(rows, worst=worst, target=target, labels=labels, sign=sign, view=view)


def _print_view(rows: list[dict[str, Any]], *, worst: float, target: float,
                labels: dict[str, str], sign: float, view: str) -> None:
    summary = summarise(rows, worst=worst, target=target, sign=sign, view=view)
    budgets = sorted({b for s in summary.values() for b in s["regret"]})
    print("| method | seeds | " + " | ".join(f"regret at {b:g}x" for b in budgets)
          + " | time to target | slower precisions | trials |")
    print("|---" * (len(budgets) + 5) + "|")
    for method in [m for m in labels if m in summary] + sorted(set(summary) - set(labels)):
        s = summary[method]
        ttt = "never" if math.isinf(s["ttt"]) else f"{s['ttt']:.2f}x"
        share = "-" if s["slow_share"] is None else f"{s['slow_share']:.0%}"
        print(f"| {labels.get(method, method)} | {s['seeds']} | "
              + " | ".join(_ci(s["regret"][b]) if b in s["regret"] else "-" for b in budgets)
              + f" | {ttt} ({s['reached']}/{s['seeds']}) | {share} | {s['trials']:.0f} |")
    print()
    for line in verdict(summary):
        print(line)
