"""``hpsearch.space`` and ``hpsearch validate`` load neither Ray nor torch (nor Optuna)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAVY = ("ray", "torch", "optuna")
EXAMPLE = Path(__file__).parents[2] / "search_spaces" / "charlm.yaml"

SCRIPT = f"""
import sys
import hpsearch.space
from hpsearch.cli import main
try:
    main(["validate", {str(EXAMPLE)!r}, "--set", "trials.num=4"])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
print("HEAVY:", heavy)
"""


def test_space_package_and_validate_command_stay_light():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "HEAVY: []" in out.stdout, out.stdout[-500:]


def test_python_dash_m_hpsearch_validates():
    out = subprocess.run([sys.executable, "-m", "hpsearch", "validate", str(EXAMPLE)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "rungs at epochs 1, 3" in out.stdout
