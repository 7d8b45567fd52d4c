"""Everything that talks to Ray: the sweep driver.

==========  ============================================================================
connect     reach a Ray cluster or start a local instance, in seconds or one clear error
plan        how many trials fit at once; rungs and cost, before anything runs (pure)
search      spec -> Optuna sampler and searcher, ASHA or FIFO scheduler
runners     how a trial runs (in-process | Ray Train), chosen once per spec
callbacks   Tune callbacks: trial tables, progress, the all-failed stop
fit         build a Tuner, run it to its end, write tables and manifest
sweep       ``run_sweep`` / ``resume_sweep``: the library API of ``run`` and ``resume``
single      ``hpsearch trial``: one configuration, no search
repairs     every private Ray access and every resume repair, guarded by Ray version
==========  ============================================================================

May import everything below it (``space``, ``store``, ``train``, ``workloads``) and Ray,
Optuna and torch, always inside functions where module import time matters. Nothing
below imports from here.
"""
