"""Which checkpoint a restarted trial's command resumes from (``trainable.resume``).

A restarted trial (a retry, a resumed sweep) is given ``resume.args`` with the newest
match of ``resume.if_exists`` under its folder (:func:`resume_for`). The newest match is
not always whole: a trial killed while it wrote a checkpoint (its driver SIGKILLed, a
power cut) leaves a ``checkpoint-N/`` folder without its last files, or a ``ckpt.pt``
cut short, and a command resumed from it fails at its start, at every retry.

So a command that was given a match and failed before its first report has that match
refused (:meth:`Resume.refuse`): it is listed in the trial folder's
:data:`REFUSED_FILE`, and the trial's next attempt resumes from the newest match not
listed, or from the start when none is left. The steps between the two checkpoints are
run, and reported, again. A refused match the script writes again (its modification time
changed) counts again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hpsearch.command.sources import newest_match

__all__ = ["REFUSED_FILE", "Resume", "refused", "resume_for"]

#: In a trial's folder: the matches its command failed on before its first report, one
#: per line, skipped by the next attempts.
REFUSED_FILE = ".hpsearch-refused-resumes"


@dataclass(frozen=True)
class Resume:
    """The match of ``resume.if_exists`` a trial's command is resumed from.

    Attributes:
        root: The trial's folder (``{trial_dir}``).
        pattern: ``resume.if_exists`` (a path under it, or a glob).
        match: The newest match not refused (``{resume_from}``).
    """

    root: str
    pattern: str
    match: str

    def refuse(self) -> str | None:
        """The command failed before its first report: later attempts skip this match.
        Returns the match they resume from instead, or ``None`` (from the start). A list
        the disk cannot take (full: what cut the checkpoint short) leaves the match as it
        is, and the trial's own error stands."""
        try:
            with open(os.path.join(self.root, REFUSED_FILE), "a") as out:
                out.write(f"{_mtime_ns(self.match)}\t{self.match}\n")
        except OSError:
            return self.match
        return newest_match(self.root, self.pattern, skip=refused(self.root))

    def named(self, path: str | None) -> str:
        """``path`` as a person reads it: under the trial's folder."""
        return "the start" if path is None else os.path.relpath(path, self.root)


def refused(root: str) -> set[str]:
    """The matches the trial at ``root`` refused (:meth:`Resume.refuse`) and has not
    written again since."""
    try:
        with open(os.path.join(root, REFUSED_FILE)) as listed:
            entries = [line.rstrip("\n").split("\t", 1) for line in listed]
    except OSError:
        return set()
    return {entry[1] for entry in entries
            if len(entry) == 2 and entry[0] == str(_mtime_ns(entry[1]))}


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def resume_for(root: str, pattern: str | None) -> Resume | None:
    """What the command of the trial at ``root`` resumes from: the newest match of
    ``pattern`` its earlier attempts did not refuse; ``None`` when there is none (or no
    ``resume.if_exists``)."""
    if not pattern:
        return None
    match = newest_match(root, pattern, skip=refused(root))
    return None if match is None else Resume(root, pattern, match)
