"""The safe YAML reader: line numbers, YAML 1.2 numbers, and what it refuses to do."""

from __future__ import annotations

import pytest

from hpsearch.errors import SpaceError
from hpsearch.space import load_space
from hpsearch.space._yaml import Index, format_path, load_yaml_value, parse_yaml

from .conftest import VALID


def test_every_key_path_records_its_line():
    doc = parse_yaml(VALID)
    assert doc.issues == []
    assert doc.lines[("params", "lr")] == 5
    assert doc.lines[("params", "lr", "low")] == 5
    assert doc.lines[("params", "precision", "choices", Index(2))] == 7
    assert doc.lines[("scheduler", "max_t")] == 12


def test_error_names_file_and_line_of_the_key(write):
    file = write(VALID.replace("low: 1.0e-4", "low: 0.0"), name="lm.yaml")
    with pytest.raises(SpaceError) as info:
        load_space(file)
    (issue,) = info.value.issues
    assert (issue.path, issue.line) == ("params.lr.low", 5)
    assert str(issue) == f"params.lr.low: must be > 0 when log is true (got 0.0) [{file}:5]"


def test_all_problems_are_reported_at_once_in_file_order(write):
    text = (VALID.replace("low: 1.0e-4", "low: 0.0").replace("num: 32", "num: 0")
            .replace("mode: min", "mode: mini"))
    with pytest.raises(SpaceError) as info:
        load_space(write(text))
    assert [i.path for i in info.value.issues] == ["objective.mode", "params.lr.low", "trials.num"]
    assert [i.line for i in info.value.issues] == [3, 5, 13]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1e-4", 1e-4), ("1.0e-4", 1e-4), ("3E2", 300.0), (".5", 0.5), ("1_000", 1000),
        ("0x10", 16), ("-7", -7), ("1:30", "1:30"), ("010", "010"), ("true", True),
        ("null", None), ("[fp32, bf16]", ["fp32", "bf16"]), ("{a: 1}", {"a": 1}),
        (".inf", float("inf")), ("yes", "yes"), ("off", "off"), ("False", False),
    ],
)
def test_scalars_resolve_as_yaml_1_2_numbers(text, expected):
    assert load_yaml_value(text) == expected


def test_nan_is_read_as_a_float_for_validation_to_reject():
    value = load_yaml_value(".nan")
    assert value != value


def test_python_tags_are_never_executed(write, tmp_path):
    marker = tmp_path / "pwned"
    text = VALID.replace(
        "storage:   ./runs",
        f"storage: !!python/object/apply:os.mkdir [{str(marker)!r}]",
    )
    with pytest.raises(SpaceError) as info:
        load_space(write(text))
    assert not marker.exists()
    assert [(i.path, i.kind) for i in info.value.issues] == [("storage", "tag")]


def test_billion_laughs_is_refused_without_expanding():
    rows = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi"):
        rows.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    doc = parse_yaml("\n".join(rows) + "\n")
    assert [i.kind for i in doc.issues] == ["yaml"]
    assert "more than" in doc.issues[0].message


def test_merge_keys_work_and_are_not_duplicates():
    doc = parse_yaml("base: &b {low: 1, high: 2}\nlr:\n  <<: *b\n  high: 3\n")
    assert doc.issues == []
    assert doc.value["lr"] == {"low": 1, "high": 3}


def test_duplicate_key_names_both_lines():
    doc = parse_yaml("a: 1\nb: 2\na: 3\n", file="x.yaml")
    (issue,) = doc.issues
    assert (issue.path, issue.kind, issue.line) == ("a", "duplicate_key", 3)
    assert "line 1" in issue.message


def test_syntax_error_gives_line_and_column():
    (issue,) = parse_yaml("a: [1, 2\nb: 3\n").issues
    assert issue.kind == "yaml"
    assert "line 2, column 2" in issue.message


def test_deep_nesting_is_an_issue_not_a_recursion_error():
    doc = parse_yaml("a: " + "[" * 1500 + "]" * 1500 + "\n")
    assert [i.kind for i in doc.issues] == ["yaml"]


def test_format_path_tells_list_indices_from_integer_keys():
    assert format_path(("params", "x", "choices", Index(2))) == "params.x.choices[2]"
    assert format_path(("params", 64)) == "params.64"
    assert format_path(("params", True)) == "params.true"
