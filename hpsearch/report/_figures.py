"""The report's figures, drawn with matplotlib's object API into PNG bytes.

No pyplot: figures are built as :class:`matplotlib.figure.Figure` objects and rendered by
the Agg canvas, so writing a report never opens a window, never touches a notebook's
current figure and works on a machine without a display.
"""

from __future__ import annotations

import io
import math
from typing import Any

__all__ = ["STATUS_COLORS", "curves", "front", "funnel", "importance", "lr_effect",
           "parallel_coordinates", "precision", "progress"]

STATUS_COLORS = {
    "completed": "#2ca02c", "stopped_by_asha": "#ff7f0e", "stopped": "#bcbd22",
    "diverged": "#d62728", "unsupported_precision": "#9467bd", "failed": "#222222",
    "running": "#1f77b4", "pending": "#7f7f7f",
}
_DPI = 100


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=_DPI, layout="constrained")


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return buf.getvalue()


def _color(status: Any) -> str:
    return STATUS_COLORS.get(str(status), "#7f7f7f")


def _wide_positive(values) -> bool:
    """Whether a log axis reads better: all positive over more than a factor of 10."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    return bool(values) and min(values) > 0 and max(values) / min(values) > 10


def _scale(hours_max: float) -> tuple[float, str]:
    """The unit that reads best for a span of ``hours_max``: (its length in hours, name)."""
    if hours_max < 2 / 60:
        return 1 / 3600, "seconds"
    return (1 / 60, "minutes") if hours_max < 2 else (1.0, "hours")


def progress(frame, *, metric: str, mode: str) -> bytes:
    """Best value so far against wall time and against worker time."""
    fig = _figure(10.5, 3.6)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, column, what in ((axes[0], "wall_h", "wall"), (axes[1], "worker_h", "worker")):
        div, unit = _scale(float(frame[column].max()))
        x = frame[column] / div
        ax.scatter(x, frame["value"], s=10, color="#9aa5b8", alpha=0.7, label="a report")
        ax.step(x, frame["best"], where="post", color="#2457a6", linewidth=2,
                label="best so far")
        label = f"sweep wall time ({unit})" if what == "wall" else f"worker-{unit} spent"
        ax.set_xlabel(label)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
    if _wide_positive(frame["value"]):
        axes[0].set_yscale("log")
    axes[0].set_ylabel(f"{metric} ({mode})")
    axes[0].legend(fontsize="small", loc="upper right" if mode == "min" else "lower right")
    axes[0].set_title("best against wall time", fontsize="medium")
    axes[1].set_title("best against compute", fontsize="medium")
    return _png(fig)


def curves(series: list[dict[str, Any]], *, metric: str, x_label: str, rungs: list[float],
           train: bool) -> bytes:
    """Learning curves: the objective at each evaluation and, when ``train``, the training
    loss at every logged row, one colour per trial.

    ``series``: per trial ``label``, ``x``/``y`` (evaluations) and ``tx``/``ty`` (training).
    """
    import matplotlib as mpl

    fig = _figure(10.5, 4.0 if train else 4.2)
    axes = fig.subplots(1, 2) if train else [fig.subplots(1, 1)]
    cmap = mpl.colormaps["tab10"]
    for i, s in enumerate(series):
        color = cmap(i % 10)
        axes[0].plot(s["x"], s["y"], marker="o", markersize=3, linewidth=1.5, color=color,
                     label=s["label"])
        if train and len(s["tx"]):
            axes[1].plot(s["tx"], s["ty"], linewidth=1, color=color, alpha=0.85)
    ys = [v for s in series for v in s["y"]]
    if _wide_positive(ys):
        axes[0].set_yscale("log")
    axes[0].set(xlabel=x_label, ylabel=metric, title=f"{metric} at each evaluation")
    xs = [v for s in series for v in [*s["x"], *s["tx"]]]
    integer_x = all(float(v).is_integer() for v in xs)
    for ax in axes:
        if integer_x:  # whole epochs: no 1.25-epoch ticks
            ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))
        for rung in rungs:
            ax.axvline(rung, color="#999999", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
    if train:
        tys = [v for s in series for v in s["ty"]]
        if _wide_positive(tys):
            axes[1].set_yscale("log")
        axes[1].set(xlabel=x_label, ylabel="train_loss", title="training loss, every logged row")
    axes[0].legend(fontsize="x-small", loc="best")
    return _png(fig)


def lr_effect(points: list[dict[str, Any]], *, metric: str, log_x: bool, best_id: str | None) -> bytes:
    """Each trial's best value against its learning rate, coloured by status."""
    fig = _figure(7.5, 4.0)
    ax = fig.subplots(1, 1)
    for status in sorted({p["status"] for p in points}):
        group = [p for p in points if p["status"] == status]
        ax.scatter([p["lr"] for p in group], [p["value"] for p in group], s=28,
                   color=_color(status), label=status, edgecolor="white", linewidth=0.5)
    best = [p for p in points if p["trial_id"] == best_id]
    if best:
        ax.scatter([best[0]["lr"]], [best[0]["value"]], s=160, facecolor="none",
                   edgecolor="#2457a6", linewidth=1.8, label="best")
    if log_x:
        ax.set_xscale("log")
    if _wide_positive([p["value"] for p in points]):
        ax.set_yscale("log")
    ax.set(xlabel="lr", ylabel=f"best {metric}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


def precision(points: list[dict[str, Any]], rows: list[dict[str, Any]], *, metric: str) -> bytes:
    """Per precision: each trial's best value, and the median samples/s."""
    fig = _figure(10.5, 3.6)
    axes = fig.subplots(1, 2)
    names = [r["precision"] for r in rows]
    for i, name in enumerate(names):
        group = [p for p in points if p["precision"] == name]
        for j, p in enumerate(group):
            jitter = ((j * 0.37) % 1 - 0.5) * 0.3
            axes[0].scatter(i + jitter, p["value"], s=24, color=_color(p["status"]),
                            edgecolor="white", linewidth=0.5)
    for status in sorted({p["status"] for p in points}):
        axes[0].scatter([], [], color=_color(status), label=status)
    axes[0].set_xticks(range(len(names)), names)
    if _wide_positive([p["value"] for p in points]):
        axes[0].set_yscale("log")
    axes[0].set(ylabel=f"best {metric}", title="best value per trial")
    axes[0].legend(fontsize="x-small")
    speeds = [r["samples_per_s"] or 0.0 for r in rows]
    axes[1].bar(range(len(names)), speeds, color="#4c78a8")
    axes[1].set_xticks(range(len(names)), names)
    for i, r in enumerate(rows):
        if r["samples_per_s"] is None:
            axes[1].text(i, 0, "n/a", ha="center", va="bottom")
    axes[1].set(ylabel="samples/s (median)", title="training throughput")
    for ax in axes:
        ax.grid(alpha=0.3, axis="y")
    return _png(fig)


def importance(values: dict[str, float]) -> bytes:
    """Parameter importance as horizontal bars, the most important on top."""
    names = list(values)[::-1]
    fig = _figure(7.0, 0.45 * len(names) + 1.2)
    ax = fig.subplots(1, 1)
    ax.barh(names, [values[n] for n in names], color="#4c78a8")
    for i, n in enumerate(names):
        ax.text(values[n], i, f" {values[n]:.2f}", va="center", fontsize="small")
    ax.set_xlim(0, max(1.0, max(values.values()) * 1.15))
    ax.set(xlabel="importance (fANOVA, sums to 1)")
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


def parallel_coordinates(axes_spec: list[dict[str, Any]], lines: list[list[float]],
                         values: list[float], *, metric: str, mode: str) -> bytes:
    """One vertical axis per parameter (positions in [0, 1]) and one line per trial,
    coloured by its value; the best trials are drawn last, on top.

    ``axes_spec``: per axis ``name`` and ``ticks`` (``[(position, label)]``).
    """
    import matplotlib as mpl

    fig = _figure(10.5, 4.2)
    ax = fig.subplots(1, 1)
    cmap = mpl.colormaps["viridis" if mode == "min" else "viridis_r"]  # dark = better
    lo, hi = min(values), max(values)
    norm = mpl.colors.Normalize(lo, hi if hi > lo else lo + 1)
    order = sorted(range(len(values)), key=lambda i: values[i] * (-1 if mode == "min" else 1))
    xs = list(range(len(axes_spec)))
    for i in order:  # an axis a trial has no value on (a `when` condition) is stepped over
        pts = [(x, y) for x, y in zip(xs, lines[i]) if math.isfinite(y)]
        ax.plot([x for x, _ in pts], [y for _, y in pts], color=cmap(norm(values[i])),
                linewidth=1.4, alpha=0.85, marker="o", markersize=2.5)
    for x, spec in zip(xs, axes_spec):
        ax.axvline(x, color="#555555", linewidth=1)
        for pos, label in spec["ticks"]:
            ax.text(x + 0.03, pos, label, fontsize="x-small", va="center", color="#333333")
    ax.set_xticks(xs, [s["name"] for s in axes_spec])
    ax.set_yticks([])
    ax.set_ylim(-0.06, 1.06)
    ax.set_xlim(-0.15, len(xs) - 0.6)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    sm = mpl.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax, label=metric, pad=0.01)
    return _png(fig)


def funnel(rows: list[dict[str, Any]], *, unit: str) -> bytes:
    """Per milestone: the trials that reached it, split by what became of them there."""
    marks = [r for r in rows if r["milestone"] != "before"]
    labels = [f"{unit} {r['milestone']:g}" for r in marks]
    went = [r["went_on"] for r in marks]
    asha = [r["stopped_by_asha"] for r in marks]
    other = [sum(r["ended_otherwise"].get(s, 0) for s in r["ended_otherwise"]
                 if s != "completed") for r in marks]
    done = [r["ended_otherwise"].get("completed", 0) for r in marks]
    running = [r["running"] for r in marks]
    fig = _figure(8.0, 3.4)
    ax = fig.subplots(1, 1)
    bottom = [0] * len(marks)
    for label, counts, color in (
        ("completed", done, STATUS_COLORS["completed"]),
        ("went on", went, "#8fb3d9"),
        ("stopped by ASHA here", asha, STATUS_COLORS["stopped_by_asha"]),
        ("ended here otherwise", other, STATUS_COLORS["diverged"]),
        ("running", running, STATUS_COLORS["running"]),
    ):
        if any(counts):
            ax.bar(labels, counts, bottom=bottom, color=color, label=label)
            bottom = [b + c for b, c in zip(bottom, counts)]
    for i, r in enumerate(marks):
        ax.text(i, r["reached"], f"{r['reached']}", ha="center", va="bottom")
    ax.set_ylim(0, max([r["reached"] for r in marks] + [1]) * 1.18)
    ax.set(ylabel="trials that reached it")
    ax.legend(fontsize="small", loc="upper right")
    ax.grid(alpha=0.3, axis="y")
    return _png(fig)


def front(points: list[dict[str, Any]], *, objectives: list[tuple[str, str]]) -> bytes:
    """Every pair of objectives against each other: the front (joined, in order of the
    first of the pair), the other trials that reached ``max_t``, the trials ASHA stopped
    (their last values, on a shorter budget) and the infeasible ones."""
    pairs = [(i, j) for i in range(len(objectives)) for j in range(i + 1, len(objectives))]
    fig = _figure(min(5.2 * len(pairs), 15.6), 4.2)
    axes = fig.subplots(1, len(pairs), squeeze=False)[0]
    kinds = (("dominated", "completed, dominated", "#9e9e9e", "o", 26),
             ("stopped", "stopped by ASHA (shorter budget)", STATUS_COLORS["stopped_by_asha"],
              ".", 30),
             ("infeasible", "infeasible", "#d62728", "x", 30),
             ("front", "on the front", "#2457a6", "o", 46))
    for ax, (i, j) in zip(axes, pairs):
        for kind, label, color, marker, size in kinds:
            group = [p for p in points if p["kind"] == kind]
            if group:
                ax.scatter([p["values"][i] for p in group], [p["values"][j] for p in group],
                           s=size, color=color, marker=marker, label=label, zorder=3,
                           edgecolor="white" if marker == "o" else None, linewidth=0.5)
        line = sorted((p["values"][i], p["values"][j]) for p in points if p["kind"] == "front")
        if len(line) > 1:
            ax.plot(*zip(*line), color="#2457a6", linewidth=1.2, alpha=0.6, zorder=2)
        (xi, mi), (yj, mj) = objectives[i], objectives[j]
        ax.set(xlabel=f"{xi} ({mi})", ylabel=f"{yj} ({mj})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    return _png(fig)
