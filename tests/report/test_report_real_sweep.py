"""The report of a real tiny sweep: `hpsearch run` on the session's Ray cluster, then
`hpsearch report` as a user runs them. Its images decode, the Markdown names the trial
table's best configuration, and the ledger adds up to the table."""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
import sys
import textwrap

import pytest
from PIL import Image

import hpsearch
from hpsearch.report import load_sweep
from hpsearch.report._facts import ledger

SPACE = """\
    name: tiny-report
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
      precision: {type: categorical, choices: [fp32, bf16]}
      batch_size: 64
      log_every: 8
    search: {algorithm: random, seed: 3}
    scheduler: {type: asha, time_attr: epoch, max_t: 3, grace_period: 1, reduction_factor: 3}
    trials: {num: 4, max_concurrent: 2}
    resources: {workers: 1, cpus_per_worker: 1}
"""


def hpsearch_cmd(*args, cwd, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


@pytest.mark.ray
@pytest.mark.slow
def test_report_of_a_real_sweep(tmp_path, session_ray):
    space = tmp_path / "tiny.yaml"
    space.write_text(textwrap.dedent(SPACE))
    storage = tmp_path / "nightly"
    env = {"HPSEARCH_STORAGE": str(storage)}
    run = hpsearch_cmd("run", str(space), cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    listing = hpsearch_cmd("ls", "--json", cwd=tmp_path, env=env, timeout=120)
    assert listing.returncode == 0 and '"name": "tiny-report"' in listing.stdout

    made = hpsearch_cmd("report", "tiny-report", cwd=tmp_path, env=env, timeout=180)
    assert made.returncode == 0, made.stderr
    sweep = storage / "tiny-report"
    html = (sweep / "report.html").read_text()
    md = (sweep / "report.md").read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) >= 5  # 4 trials: too few for importance, which says so
    assert "Not enough trials to compare" in html
    for data in images:
        with Image.open(io.BytesIO(base64.b64decode(data))) as im:
            im.load()
            assert im.format == "PNG"
    assert "could not be drawn" not in html and "> **Note:**" not in md

    trials = hpsearch.read_trials(sweep)
    assert len(trials) == 4
    best = trials.loc[trials.best_value.idxmin()]
    summary = next(ln for ln in md.splitlines() if ln.startswith("| **Best**"))
    assert f"from trial {best.trial_id}" in summary
    config = next(ln for ln in md.splitlines() if ln.startswith("| **Configuration**"))
    assert f"lr={best.lr:.4g}" in config and f"precision={best.precision}" in config
    rerun = next(ln for ln in md.splitlines() if ln.startswith("| **Rerun it**"))
    assert f"--set lr={float(best.lr)!r}" in rerun

    # log_every rows sit between the reports; ASHA and the table saw the reports only.
    history = hpsearch.read_history(sweep)
    evals = history[history.evaluated]
    assert evals.groupby("trial_id").size().to_dict() == \
        trials.set_index("trial_id").epochs.astype(int).to_dict()
    logged = history[~history.evaluated]
    assert len(logged) >= 2 * len(trials) and logged.val_loss.isna().all()
    assert set(logged.step % 8) == {0} and logged.train_loss.notna().all()

    book = ledger(load_sweep(sweep))
    assert book.worker_s == pytest.approx(trials.worker_s.sum(), rel=1e-12) and book.worker_s > 0
    assert book.gpu_s == trials.gpu_s.sum() == 0
    assert sum(v["worker_s"] for v in book.by_status.values()) == pytest.approx(book.worker_s)
    total = next(ln for ln in md.splitlines() if ln.startswith("| total |"))
    assert f"| {trials.worker_s.sum():.1f} | 0.0 |" in total
