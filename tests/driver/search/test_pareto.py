"""Several objectives at an ASHA rung: the front, its order, and which trials MO-ASHA
stops, from hand-made reports (the expected decisions are worked out in the comments)."""

from __future__ import annotations

import math
import random

import pytest

from hpsearch.driver.search.pareto import ParetoRungs, fronts, pareto_order

# (modes, reduction_factor, [(trial, objective values, stopped?)]), all at rung 1.
CASES = {
    "loss and memory, both min": (("min", "min"), 3, [
        ("a", (0.5, 100), False),  # first at the rung
        ("b", (0.6, 120), True),   # dominated by a: 2nd of 2, not in the top ceil(2/3) = 1
        ("c", (0.4, 200), False),  # front {a, c}; the net starts at the best loss: c first
        ("d", (0.45, 90), False),  # dominates a; front {c, d}: 2nd of 4, top ceil(4/3) = 2
        ("e", (0.7, 300), True),   # dominated by every other: 5th of 5
        ("f", (0.3, 500), False),  # best loss: first of front {c, d, f}
    ]),
    "loss min, throughput max": (("min", "max"), 2, [
        ("a", (0.5, 1000), False),
        ("b", (0.4, 800), False),  # front {a, b}; best loss first
        ("c", (0.6, 900), True),   # dominated by a: 3rd of 3, top ceil(3/2) = 2
        ("d", (0.55, 2000), False),  # front {a, b, d}: after b, the farthest from it
    ]),
    "three objectives, min max min": (("min", "max", "min"), 3, [
        ("a", (1, 1, 1), False),
        ("b", (2, 0, 2), True),    # worse than a everywhere
        ("c", (0.5, 0.5, 3), False),  # a and c are not comparable; c has the best first
        ("d", (1, 1, 0.9), False),  # dominates a (equal, equal, better): 2nd of 4
        ("e", (1.2, 2, 5), False),  # on the front, the farthest from c: 2nd of 5
        ("f", (3, 0, 6), True),    # dominated by all: 6th of 6
    ]),
}


@pytest.mark.parametrize("case", CASES)
def test_mo_asha_stops_the_trials_its_rung_ranks_below_the_top_share(case):
    modes, rf, reports = CASES[case]
    rungs = ParetoRungs(milestones=(1, 3), reduction_factor=rf, modes=modes)
    decisions = [rungs.judge(key, 1, values) for key, values, _ in reports]
    assert decisions == [stopped for _, _, stopped in reports]


def test_each_trial_is_judged_once_per_rung_at_the_highest_it_passed():
    rungs = ParetoRungs(milestones=(1, 3), reduction_factor=3, modes=("min", "min"))
    assert rungs.judge("a", 1, (0.5, 1)) is False
    assert rungs.judge("a", 2, (0.1, 0.1)) is False  # between rungs: nothing to judge
    assert rungs.judge("b", 4, (0.9, 9)) is False  # past rung 3 at once: first there
    assert set(rungs.recorded[3]) == {"b"} and set(rungs.recorded[1]) == {"a"}
    # ... and then at the rung it skipped, as Ray's bracket does: a dominates it there
    assert rungs.judge("b", 5, (0.9, 9)) is True and set(rungs.recorded[1]) == {"a", "b"}
    assert rungs.judge("b", 6, (0.9, 9)) is False  # no rung left to judge it at


def test_a_non_finite_objective_is_recorded_and_stopped_unless_first():
    rungs = ParetoRungs(milestones=(1,), reduction_factor=3, modes=("min", "max"))
    assert rungs.judge("a", 1, (math.nan, 1.0)) is False  # first: nothing to compare
    assert rungs.judge("b", 1, (0.5, 1.0)) is False  # the NaN one is not a point
    assert rungs.judge("c", 1, (0.4, math.inf)) is True
    assert rungs.recorded[1] == {"a": None, "b": (-0.5, 1.0), "c": None}


def test_a_resumed_sweep_seeds_its_rungs_and_the_next_trial_is_judged_against_them():
    rungs = ParetoRungs(milestones=(1,), reduction_factor=3, modes=("min", "min"))
    rungs.seed("a", 1, (0.5, 100))
    rungs.seed("a", 1, (9, 9))  # a trial is recorded once per rung
    rungs.seed("x", 7, (0.1, 1))  # not a rung
    assert rungs.judge("b", 1, (0.6, 120)) is True  # as in the first case


@pytest.mark.parametrize("modes, rf, seeded, newcomer", [
    # rf 2, two points: the newcomer, dominated by the only other one, is 2nd of 2
    (("min", "max"), 2, [(0.5, 1.0)], (0.9, 0.5)),
    # rf 3, three points: fronts [a], [newcomer], [b]: 2nd of 3
    (("min", "min"), 3, [(0.5, 100), (0.6, 120)], (0.55, 110)),
    # rf 3, six points on one objective: 3rd of 6
    (("min",), 3, [(0.1,), (0.2,), (0.4,), (0.5,), (0.6,)], (0.3,)),
])
def test_a_trial_placed_exactly_at_the_share_is_stopped(modes, rf, seeded, newcomer):
    """The deliberate difference from Syne Tune's MOASHA (module docstring): at position
    ``n / rf`` exactly (0 the best) the trial is outside the top ``n / rf`` and stops,
    where ``p / n <= 1 / rf`` would let it go on; with the point ahead of it made worse,
    it continues."""
    rungs = ParetoRungs(milestones=(1,), reduction_factor=rf, modes=modes)
    for n, point in enumerate(seeded):
        rungs.seed(f"s{n}", 1, point)
    assert rungs.judge("new", 1, newcomer) is True
    ahead = ParetoRungs(milestones=(1,), reduction_factor=rf, modes=modes)
    for n, point in enumerate(seeded[1:]):  # one point fewer ahead of it: continues
        ahead.seed(f"s{n}", 1, point)
    ahead.seed("worse", 1, tuple(v + 10 if m == "min" else v - 10
                                 for v, m in zip(seeded[0], modes)))
    assert ahead.judge("new", 1, newcomer) is False


def test_with_one_objective_it_keeps_the_top_share_of_a_rung():
    rungs = ParetoRungs(milestones=(1,), reduction_factor=3, modes=("min",))
    losses = [0.5, 0.9, 0.1, 0.3, 0.8, 0.05]
    for n, loss in enumerate(losses, start=1):
        better = sum(prev < loss for prev in losses[: n - 1])
        assert rungs.judge(f"t{n}", 1, (loss,)) is (better >= math.ceil(n / 3))


def brute_force_ranks(points):
    """Each point's front, from the definition: 0 when no point dominates it (at least as
    good everywhere, better somewhere), else one more than the worst-ranked point that
    does (the longest chain of points dominating it)."""
    def better(p, q):
        return all(a >= b for a, b in zip(p, q)) and any(a > b for a, b in zip(p, q))

    ranks = {}

    def rank(i):
        if i not in ranks:
            above = [j for j in range(len(points)) if better(points[j], points[i])]
            ranks[i] = 1 + max(map(rank, above)) if above else 0
        return ranks[i]

    return [rank(i) for i in range(len(points))]


@pytest.mark.parametrize("seed", range(50))
def test_the_fronts_of_random_points_are_non_dominated_sorting(seed):
    rng = random.Random(seed)
    dims = rng.choice([1, 2, 3])  # one dimension per case: every case has a front to check
    points = [tuple(rng.choice([0, 1, 2, 3]) for _ in range(dims))
              for _ in range(rng.randint(1, 12))]  # few values: ties and duplicates
    ranks = brute_force_ranks(points)
    expected = [[i for i in range(len(points)) if ranks[i] == k] for k in range(max(ranks) + 1)]
    assert fronts(points) == expected
    order = pareto_order(points)
    assert sorted(order) == list(range(len(points)))
    assert [ranks[i] for i in order] == sorted(ranks)  # front by front, best first


def test_a_front_spreads_from_its_best_first_objective_and_is_deterministic():
    # Five points on one front, (-loss, speed): the best loss first, then the far end,
    # then the middle; the same input gives the same order every time.
    points = [(-0.1, 1.0), (-0.2, 2.0), (-0.3, 3.0), (-0.4, 4.0), (-0.5, 5.0)]
    assert pareto_order(points) == [0, 4, 2, 1, 3] == pareto_order(list(points))
    assert pareto_order([(-1, 1), (-1, 1)]) == [0, 1]  # equal: the earlier first
