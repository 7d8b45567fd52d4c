"""What watches a running sweep: Tune callbacks and the sweep's stopper.

============  ==========================================================================
plugins       a run's watchers built together in one operation (:class:`Monitors`)
tables        feeds the records from Tune's events; writes the trial tables
progress      the live status line, or timestamped lines in a log
stops         the one stopper: Ctrl-C, all failed, stalled, deadline, time budget
stall         what a sweep waits for when nothing happens
quiet         trials that stopped reporting: a line, and an end for a hung one
disk          the full-disk watch: trials paused, the sweep ended, resumable
housekeeping  leaked placement groups; warm groups beyond the sweep's share
============  ==========================================================================
"""
