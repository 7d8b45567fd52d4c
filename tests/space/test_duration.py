from __future__ import annotations

import pytest

from hpsearch.space import format_duration, parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90s", 90), ("30m", 1800), ("8h", 28800), ("1h30m", 5400), ("2d", 172800),
        ("1.5h", 5400), ("1d2h3m4s", 93784), ("1h 30m", 5400), ("8H", 28800),
        (3600, 3600), (0.5, 0.5), ("3600", 3600),
    ],
)
def test_parse_duration_accepts_documented_forms(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value",
    ["", "h", "8 hours", "1:30", "30m1h", "-5m", 0, -1, float("nan"), float("inf"), True,
     None, [1], "1e3h"],
)
def test_parse_duration_rejects_everything_else_with_a_value_error(value):
    with pytest.raises(ValueError, match="got"):
        parse_duration(value)


@pytest.mark.parametrize(("seconds", "text"), [(5400, "1h30m"), (90, "1m30s"), (30, "30s"),
                                               (172800, "2d"), (1.5, "1.5s")])
def test_format_duration_round_trips(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds
