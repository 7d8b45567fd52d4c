"""docs/nightly.md's command lines, for the tests that run them as written."""

from __future__ import annotations

from pathlib import Path

DOC = (Path(__file__).parents[2] / "docs" / "nightly.md").read_text()
ALERT = '#!/usr/bin/env bash\nenv | grep ^HPSEARCH_ | sort > "$HOME/alerted"\n'


def documented(command: str) -> str:
    """The one line of docs/nightly.md that starts with ``command``."""
    lines = [ln.strip() for ln in DOC.splitlines() if ln.strip().startswith(command)]
    assert len(lines) == 1, lines
    return lines[0]


def home_with_alert(tmp_path: Path) -> Path:
    """A HOME whose ``~/.local/bin/hpsearch-alert`` (the docs' alert script) writes the
    ``HPSEARCH_*`` variables it was called with to ``~/alerted``."""
    home = tmp_path / "home"
    alert = home / ".local" / "bin" / "hpsearch-alert"
    alert.parent.mkdir(parents=True)
    alert.write_text(ALERT)
    alert.chmod(0o755)
    return home


def alerted(home: Path) -> dict[str, str]:
    """The variables the alert script was last called with."""
    return dict(ln.split("=", 1) for ln in (home / "alerted").read_text().splitlines())
