"""What to try and what to stop: the study, the searcher, ASHA, samplers, warm start.

==========  ============================================================================
ids         a trial's hpsearch id, carried in its config whatever Tune calls it
space       the spec's searched parameters as Optuna define-by-run and distributions
samplers    ``search.algorithm`` -> an Optuna sampler; QMC then TPE
study       the study journal: where it is, how it is written, what it records
searcher    Tune's ``Searcher`` over Optuna's ask/tell: where trials begin and end
rungs       ASHA's rule as plain data (the sweep, the planner and replays share it)
pareto      MO-ASHA's rule as plain data: non-dominated sorting of a rung, its order
objectives  several objectives and constraints as the study records them
schedulers  ASHA on Tune's public scheduler interface, seeded from the study
warmstart   warm start: a new sweep's study learns from earlier sweeps of the space
==========  ============================================================================

Nothing here decides how many trials run at once (``limits``) or how a trial runs
(``trials``): the searcher is handed an admission object that decides.
"""
