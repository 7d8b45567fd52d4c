"""The statuses (hpsearch/store/status.py): sweep statuses are the strings manifests hold."""

from __future__ import annotations

from pathlib import Path

from hpsearch.store import status as st

DOCS = Path(__file__).parents[2] / "docs" / "trial-tables.md"


def test_sweep_statuses_keep_the_strings_written_sweeps_hold():
    # The manifests of sweeps already on disk hold these strings, and notify commands
    # read them from HPSEARCH_STATUS: they never change.
    assert st.SWEEP_STATUSES == (
        "running", "finished", "deadline", "no_trial_completed", "all_failed",
        "missing_metric", "interrupted", "stalled", "disk_full", "planned", "failed",
        "crashed")


def test_every_sweep_status_constant_is_listed_once():
    constants = {name: value for name, value in vars(st).items()
                 if name.startswith("SWEEP_") and name != "SWEEP_STATUSES"}
    assert len(constants) == 12
    assert sorted(constants.values()) == sorted(st.SWEEP_STATUSES)
    assert len(set(st.SWEEP_STATUSES)) == len(st.SWEEP_STATUSES)


def test_the_manifest_docs_name_every_status_a_manifest_may_hold():
    manifest = DOCS.read_text().split("## `manifest.json`", 1)[1].split("\n## ", 1)[0]
    line = next(line for line in manifest.splitlines() if line.startswith("| `status` |"))
    said = set(st.SWEEP_STATUSES) - {st.SWEEP_PLANNED, st.SWEEP_FAILED, st.SWEEP_CRASHED}
    assert len(said) == 9
    assert [s for s in sorted(said) if f"`{s}`" not in line] == []
