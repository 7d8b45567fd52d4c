"""A sweep's record: its study journal, its trial rows and tables, its manifest.

============  ==========================================================================
sweep_record  :class:`SweepRecord`: the one owner of a sweep's record, and its verbs
live          a trial this run runs (:class:`LiveTrial`): a report's study step
study         the Optuna study and its journal: where it lives, what it says of a trial
objectives    several objectives and constraints as the study stores them
============  ==========================================================================
"""
