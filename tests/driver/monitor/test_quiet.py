"""Running trials gone quiet are named once, measured by their own pace (no Ray: the clock
and Tune's trials are stand-ins; Silences is the rule, QuietTrials feeds it)."""

from types import SimpleNamespace

import pytest

from hpsearch.driver.monitor.quiet import Overdue, QuietTrials, Silences


def test_a_trial_is_overdue_after_factor_times_its_longest_wait():
    s = Silences(factor=4, floor_s=10, first_report_s=100)
    s.started("a", 0)
    for t in (5, 15, 20):  # waits of 5, 10, 5: the longest is 10
        s.reported("a", t)
    assert s.overdue(60) == []  # silent 40 = 4 x 10: not over
    assert s.overdue(61) == [Overdue("a", 41, 10)]
    assert s.overdue(1000) == []  # each silence is named once
    s.reported("a", 1000)  # its wait of 980 s is now its pace
    assert s.overdue(1000 + 4 * 980) == []
    assert s.overdue(1000 + 4 * 980 + 1) == [Overdue("a", 4 * 980 + 1, 980)]


def test_the_floor_holds_for_fast_reporters():
    s = Silences(factor=5, floor_s=120, first_report_s=600)
    s.started("a", 0)
    s.reported("a", 1)
    assert s.overdue(120) == []  # 5 x 1 s would be 5 s: the floor is 120 s
    assert s.overdue(122) == [Overdue("a", 121, 1)]


def test_a_trial_without_reports_is_measured_against_the_slowest_first_report():
    s = Silences(factor=2, floor_s=10, first_report_s=600)
    s.started("a", 0)
    assert s.overdue(599) == []
    assert s.overdue(601) == [Overdue("a", 601, None)]  # before any first report: 600 s
    s.started("b", 0)
    s.started("c", 0)
    s.reported("b", 30)
    s.reported("b", 35)
    s.reported("c", 50)  # first reports took 30 and 50 s: c's pace, and b's 30
    s.started("d", 50)
    assert s.overdue(150) == [Overdue("b", 115, 30)]  # b: its own pace, 2 x 30 s
    # c: 2 x its own 50 s; d: 2 x the slowest first report (c's 50 s) from its start at 50
    assert s.overdue(151) == [Overdue("c", 101, 50), Overdue("d", 101, 50)]


def test_an_ended_trial_is_never_named():
    s = Silences(factor=2, floor_s=1, first_report_s=5)
    s.started("a", 0)
    s.ended("a")
    assert s.overdue(100) == []


@pytest.mark.parametrize("hung_after, says", [(None, "set trials.hung_after"),
                                              (1800, "stopped as hung after 1800 s")])
def test_the_callback_names_the_trial_and_its_log_once(hung_after, says):
    now = [0.0]
    lines: list[str] = []
    quiet = QuietTrials(lines.append, trial_id=lambda t: t.config["id"],
                        hung_after_s=hung_after, check_every_s=0,
                        silences=Silences(factor=5, floor_s=60, first_report_s=600),
                        clock=lambda: now[0])
    trial = SimpleNamespace(config={"id": "t1"})
    quiet.on_trial_start(0, [], trial)
    now[0] = 10.0
    quiet.on_trial_result(0, [], trial, {})
    for t in (30.0, 71.0, 500.0):  # the floor: 60 s of silence
        now[0] = t
        quiet.on_step_end(0, [])
    assert len(lines) == 1
    assert lines[0].startswith("trial t1 has reported nothing for 61 s (its reports so far "
                               "came at most 10 s apart); its output: trials/t1/output.log")
    assert says in lines[0]
    now[0] = 2000.0
    quiet.on_trial_complete(0, [], trial)
    quiet.on_step_end(0, [])
    assert len(lines) == 1
