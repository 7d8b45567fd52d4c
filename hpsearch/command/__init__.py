"""Command trainables: a team's own script, run unmodified, one process per worker.

Plain Python, no Ray and no torch: the driver's runners (``hpsearch.driver.trials.command``)
put these parts under Tune and Ray Train.

==========  ==========================================================================
template    the command's placeholders: which names it uses, and its words for a trial
metrics     the script's output lines -> reports (named groups, dicts, ``key=value``, JSON)
sources     files the script writes (``metrics_from``) and its pushes -> reports
resume      which checkpoint a restarted trial resumes from; one cut short is passed over
push        ``hpsearch.report(...)``, run inside the script (standard library only)
process     one command as a process tree: started, streamed line by line, stopped
supervise   the small process between a trial and its command that takes the command's
            whole process tree down with it (run as a script, stdlib only)
==========  ==========================================================================
"""
