"""Ctrl-C during a sweep: hpsearch's handler replaces Tune's, once stops gracefully,
twice at once, and the handler before is put back (no Ray needed)."""

import os
import signal

import pytest

from hpsearch.driver.sweep.interrupt import ctrl_c_stops


class Stopper:
    interrupted = 0

    def interrupt(self):
        self.interrupted += 1


def test_once_asks_the_stopper_twice_raises_and_the_old_handler_comes_back(monkeypatch):
    monkeypatch.delenv("TUNE_DISABLE_SIGINT_HANDLER", raising=False)
    stopper, said = Stopper(), []
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_stops(stopper, say=said.append):
            assert os.environ["TUNE_DISABLE_SIGINT_HANDLER"] == "1"
            os.kill(os.getpid(), signal.SIGINT)
            assert stopper.interrupted == 1 and "Ctrl-C again" in said[0]
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) == before
    assert "TUNE_DISABLE_SIGINT_HANDLER" not in os.environ  # as it was
