"""Ctrl-C during a sweep: once stops it gracefully, twice stops it at once.

Tune's own SIGINT handler is turned off (``TUNE_DISABLE_SIGINT_HANDLER``); this one asks
the sweep's stopper to end the run at Tune's next step, which stops the running trials
and leaves them unfinished in the record for ``hpsearch resume``. A second Ctrl-C raises
``KeyboardInterrupt`` at once. The handler that was there before is put back afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from hpsearch.driver.monitor.stops import SweepStopper

__all__ = ["ctrl_c_stops"]


@contextlib.contextmanager
def ctrl_c_stops(stopper: SweepStopper, *,
                 say: Callable[[str], None] | None = None) -> Iterator[None]:
    """While inside, the first Ctrl-C calls ``stopper.interrupt()`` (and ``say`` a line),
    the second raises ``KeyboardInterrupt``. Outside the main thread, where no handler can
    be installed, Ctrl-C behaves as it did."""
    key = "TUNE_DISABLE_SIGINT_HANDLER"
    before_env = os.environ.get(key)
    os.environ[key] = "1"
    pressed = [0]

    def handler(signum: int, frame: Any) -> None:
        pressed[0] += 1
        if pressed[0] > 1:
            raise KeyboardInterrupt
        stopper.interrupt()
        if say is not None:
            say("Ctrl-C: stopping the trials; the sweep can be resumed (Ctrl-C again to "
                "stop at once)")

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if before_env is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before_env
