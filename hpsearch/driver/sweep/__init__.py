"""A sweep's lifecycle: the only room that composes the others.

========  ==============================================================================
run       ``run_sweep`` / ``resume_sweep``: open the directory, plan, drive a run
fit       one run's plug-ins wired together, a new Tuner, how the run ends
record    the study and the tables made to agree: on resume, and at a sweep's end
interrupt Ctrl-C: once gracefully, twice at once
timing    the deadline, resolved once per run; the plan a run records
result    ``SweepResult`` and ``Interrupted``
notify    the report and the notify command at the end of every run
========  ==============================================================================
"""
