"""docs/space-format.md stays true: its example is valid and its kinds are the real ones."""

from __future__ import annotations

import re
from pathlib import Path

from hpsearch.space import parse_space
from hpsearch.space._schema import KINDS
from hpsearch.space._yaml import parse_yaml

DOC = (Path(__file__).parents[2] / "docs" / "space-format.md").read_text()


def test_complete_example_in_the_docs_is_valid():
    block = DOC.split("## A complete example\n\n```yaml\n")[1].split("```")[0]
    doc = parse_yaml(block)
    assert doc.issues == []
    spec = parse_space(doc.value)
    assert spec.param("loss_scale_init").when.values == ("fp16",)


def test_every_yaml_snippet_in_the_docs_parses():
    for block in re.findall(r"```yaml\n(.*?)```", DOC, flags=re.S):
        # The `trainable` block lists its forms one per line (the same key thrice).
        lines = [ln for ln in block.splitlines() if not re.match(r"trainable: \S", ln)]
        assert parse_yaml("\n".join(lines)).issues == [], block


def test_the_kinds_table_lists_exactly_the_kinds_used():
    table = DOC.split("`kind` is one of:")[1]
    documented = re.findall(r"^\| `(\w+)` \|", table, flags=re.M)
    assert documented == list(KINDS)
