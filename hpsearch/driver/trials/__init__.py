"""How a trial runs: runners, the harness's sessions under Ray, warm worker groups.

==============  ========================================================================
runners         the runner interface; in-process and Ray Train runners
warm            the warm-group runner: the driver's side of a sweep's worker-group pool
pool            the pool and its group hosts (Ray actors), and the warm workers' loop
resolve         which runner a spec gets (the one place the driver imports a trainable)
command         command trainables: one process per worker, reports from its output
command_launch  one rank's command, its torchrun environment, and how its end is judged
command_group   a multi-worker command trial as a Ray Train run
sessions        where the harness's reports and checkpoints go under Tune and Ray Train
checkpoints     a trial's checkpoints, keyed by its hpsearch id
gpus            which GPU a process trains on; what is given back between trials
single          ``hpsearch trial``: one configuration, no search
==============  ========================================================================
"""
