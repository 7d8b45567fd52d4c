"""Everything that talks to Ray: the sweep driver, in rooms whose arrows point down.

=========  =============================================================================
sweep      run, resume, fit, the record across runs, Ctrl-C: the only room that
           composes the others
monitor    what watches a running sweep: tables, progress, the stopper, stalls,
           housekeeping
trials     how a trial runs: runners, sessions, warm worker groups, ``hpsearch trial``
limits     how many trials may run: the plan, the admission rule, the cluster ledger
search     what to try and what to stop: study, searcher, ASHA rungs, samplers, warm start
cluster    what talks to the cluster: connect, preflight, doctor, submit, orphans
internals  every private Ray and Optuna access, version-checked, in one module
=========  =============================================================================

A room may import the rooms below it in this table, and ``space``, ``store``, ``train``
and ``workloads`` (``tests/test_architecture.py`` holds the arrows). Ray, Optuna and
torch are imported inside functions where module import time matters. Nothing outside
``driver`` but ``cli`` imports from here.
"""
