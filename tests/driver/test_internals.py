"""The raylet's messages to the driver ("8 PYTHON worker processes have been started"),
which Ray prints from its own thread whatever ``log_to_driver`` says, go to the sweep's
log while a sweep runs, and Ray's printer is put back after. No Ray instance needed: the
function Ray's thread calls is called as it calls it. Which placement groups are orphans
nobody will remove, judged on Ray's own table records."""

from __future__ import annotations

import logging

import pytest
import ray._private.worker as worker

from hpsearch.driver.internals import raylet_messages_to

MESSAGE = {"ip": "10.0.0.2", "pid": "raylet", "job": "01", "is_err": True,
           "lines": ["WARNING: 8 PYTHON worker processes have been started on node: ab"]}


def test_the_raylets_messages_go_to_the_log_and_the_printer_comes_back(caplog, capsys):
    original = worker.print_to_stdstream
    log = logging.getLogger("test.raylet_messages")
    with caplog.at_level(logging.WARNING, logger=log.name):
        with raylet_messages_to(log):
            worker.print_to_stdstream(MESSAGE, ignore_prefix=False)  # as listen_error_messages
    assert "(raylet) WARNING: 8 PYTHON worker processes" in caplog.text
    assert capsys.readouterr().err == ""
    assert worker.print_to_stdstream is original


# --- placement groups nobody will remove ---------------------------------------------------


def _group(*, creator: bytes, actor_dead: bool, job: str, job_dead: bool,
           removed: bool = False, detached: bool = False):
    from ray.core.generated import gcs_pb2

    table = gcs_pb2.PlacementGroupTableData
    return table(placement_group_id=b"\x01" * 18, creator_actor_id=creator,
                 creator_actor_dead=actor_dead, creator_job_id=bytes.fromhex(job),
                 creator_job_dead=job_dead, is_detached=detached,
                 state=table.REMOVED if removed else table.CREATED)


CONTROLLER = bytes.fromhex("4753021d5c375d2c264bcf080b000000")


def never_asked():
    raise AssertionError("the actor table was asked where the group's record decides")


@pytest.mark.parametrize("group, creator_state, orphan", [
    # the leak a clean-clone run met: a finished sweep's TrainController, dead in the
    # actor table, its group's record still saying it lives
    (dict(creator=CONTROLLER, actor_dead=False, job="0b000000", job_dead=True), "DEAD", True),
    # the same, its creator alive (another tenant's actor that outlives its job)
    (dict(creator=CONTROLLER, actor_dead=False, job="0b000000", job_dead=True), "ALIVE", False),
    # this driver's controller, dead during its worker group's setup
    (dict(creator=CONTROLLER, actor_dead=True, job="0c000000", job_dead=False), never_asked,
     True),
    (dict(creator=CONTROLLER, actor_dead=False, job="0c000000", job_dead=False), never_asked,
     False),
    # another live job's group: not ours to judge
    (dict(creator=CONTROLLER, actor_dead=True, job="0d000000", job_dead=False), never_asked,
     False),
    # Tune's own groups (a nil creator), removed ones, detached ones
    (dict(creator=b"\xff" * 16, actor_dead=True, job="0b000000", job_dead=True), never_asked,
     False),
    (dict(creator=CONTROLLER, actor_dead=True, job="0b000000", job_dead=True, removed=True),
     never_asked, False),
    (dict(creator=CONTROLLER, actor_dead=True, job="0b000000", job_dead=True, detached=True),
     never_asked, False),
])
def test_an_orphan_placement_group_is_one_nobody_else_will_remove(group, creator_state,
                                                                   orphan):
    from hpsearch.driver.internals import is_orphan_group

    ask = creator_state if callable(creator_state) else (lambda: creator_state)
    assert is_orphan_group(_group(**group), job="0c000000", creator_state=ask) is orphan
