"""The raylet's messages to the driver ("8 PYTHON worker processes have been started"),
which Ray prints from its own thread whatever ``log_to_driver`` says, go to the sweep's
log while a sweep runs, and Ray's printer is put back after. No Ray instance needed: the
function Ray's thread calls is called as it calls it."""

from __future__ import annotations

import logging

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
