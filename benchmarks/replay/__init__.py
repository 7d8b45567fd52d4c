"""Replaying recorded learning curves through hpsearch's own searcher and scheduler (#25).

A search method is judged on many repetitions, in simulated time, as Syne Tune's
simulator backend and the ASHA, BOHB and DEHB papers do: trials are answered from a table
of real learning curves (``benchmarks/record_curves.py``) instead of being trained.

==========  ============================================================================
curves      the curve table, time(R), and the nearest-neighbour surrogate (and its error)
methods     each method as the objects a user's stack builds: hpsearch's SweepSearcher
            and ASHA from a space file, Ray Tune's OptunaSearch + ASHAScheduler, Optuna
            alone with its pruners; all driven through their public interfaces
peers       Syne Tune's ASHA and BOHB (optional: ``pip install syne-tune``), called in the
            order its own Tuner calls them
simulator   N simulated workers, an event queue in simulated seconds, no Ray
compare     any-time regret with bootstrap intervals, time to a target, the table
confirm     the same methods through real ``hpsearch run`` sweeps (a replay command trainable)
front       several objectives: the share of the Pareto front MO-ASHA finds
trial       the replay command trainable ``confirm`` runs
cli         ``search_quality.py --simulate`` and ``--table``
==========  ============================================================================

``dehb_method`` drives DEHB through its own ask/tell (optional: the ``bench`` extra).

Entry point: ``python benchmarks/search_quality.py --simulate`` (its docstring).
"""
