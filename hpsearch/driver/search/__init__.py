"""What to try and what to stop: the study, the searcher, ASHA, samplers, warm start.

==========  ============================================================================
plugins     a run's search opened in one operation: the study's sampler, searcher, ASHA
ids         a trial's hpsearch id, carried in its config whatever Tune calls it
space       the spec's searched parameters as Optuna define-by-run and distributions
samplers    ``search.algorithm`` -> an Optuna sampler; QMC then TPE
searcher    Tune's ``Searcher`` over the record's ask and end: where trials begin and end
rules       the rung rule of a sweep's objectives: ASHA's, or MO-ASHA's
rungs       ASHA's rule as plain data (the sweep, the planner and replays share it)
pareto      MO-ASHA's rule as plain data: non-dominated sorting of a rung, its order
pasha       PASHA: ASHA whose top rung grows while the ranking is still changing
schedulers  ASHA on Tune's public scheduler interface, seeded from the study
warmstart   warm start: a new sweep's study learns from earlier sweeps of the space
==========  ============================================================================

The study itself, its journal and how it stores several objectives are the record's
(:mod:`hpsearch.driver.record`). Nothing here decides how many trials run at once
(``limits``) or how a trial runs (``trials``): the searcher is handed an admission
object that decides.
"""
