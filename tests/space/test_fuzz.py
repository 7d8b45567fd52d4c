"""Random damage to a valid space never produces anything but a Spec or a SpaceError."""

from __future__ import annotations

import copy
import datetime
import random

import pytest
import yaml

from hpsearch.errors import SpaceError
from hpsearch.space import load_space, parse_space
from hpsearch.space.spec import Spec

from .conftest import VALID

WEIRD = [
    None, True, False, 0, 1, -1, 2, 2.5, -0.0, 1e-300, 1e300, 10**30, float("nan"),
    float("inf"), float("-inf"), "", " ", "x", "auto", "fp16", "min", "tpe", "asha", "8h",
    "charlm", "mod:fn", [], [1], ["fp32", "fp32"], [[1]], {}, {"a": 1}, {"type": "float"},
    {"precision": "fp16"}, {1: 2}, datetime.date(2024, 1, 1), "precision", "when",
]


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield prefix + (key,)
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield prefix + (i,)
            yield from _paths(value, prefix + (i,))


def _damage(raw, rng):
    raw = copy.deepcopy(raw)
    for _ in range(rng.randint(1, 4)):
        path = rng.choice(list(_paths(raw)))
        parent = raw
        for key in path[:-1]:
            parent = parent[key]
        action = rng.random()
        if action < 0.2 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action < 0.35 and isinstance(parent, dict):
            parent[rng.choice(["low", "high", "when", "type", "x", "choices", 7])] = rng.choice(WEIRD)
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(WEIRD))
    return raw


@pytest.mark.parametrize("seed", range(4))
def test_random_damage_gives_a_spec_or_a_space_error(seed, tmp_path):
    rng = random.Random(seed)
    base = yaml.safe_load(VALID)
    for i in range(150):
        raw = _damage(base, rng)
        try:
            assert isinstance(parse_space(raw), Spec)
        except SpaceError as exc:
            assert exc.issues and all(issue.message for issue in exc.issues)
        if i % 10 == 0:  # and through the file reader, with lines
            file = tmp_path / "fuzz.yaml"
            try:
                file.write_text(yaml.safe_dump(raw, allow_unicode=True))
            except yaml.YAMLError:
                continue
            try:
                load_space(file)
            except SpaceError:
                pass


@pytest.mark.parametrize("seed", range(2))
def test_random_overrides_give_a_spec_or_a_space_error(seed):
    rng = random.Random(seed)
    base = yaml.safe_load(VALID)
    keys = [".".join(str(k) for k in p) for p in _paths(base)] + ["lr", "x", "", "a..b"]
    values = ["1", "-1", "true", "null", "[", "{a: 1}", "[fp32]", ".nan", "1e999", "'s'", "a=b"]
    for _ in range(150):
        items = [f"{rng.choice(keys)}={rng.choice(values)}" for _ in range(rng.randint(1, 3))]
        try:
            parse_space(base, overrides=items)
        except SpaceError as exc:
            assert exc.issues
