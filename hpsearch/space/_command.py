"""The ``trainable`` section as a mapping: a command trainable (``docs/space-format.md``).

Read in two steps, as the rest of the spec is: :func:`read_command` checks the mapping's
own shape, and :func:`check_command` (once ``params``, ``objective`` and ``scheduler`` are
read) checks that every placeholder names a parameter or a built-in, that the metrics
patterns give the objective and the time attribute, and that every searched parameter
reaches the command. Nothing is run: the program is looked for only when a trial starts.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

from hpsearch.command.sources import FORMATS, MetricsFile, format_of
from hpsearch.command.template import BUILTINS, RESUME_FROM, names_in, split_command
from hpsearch.space._schema import BAD, Report, got, ok, show, suggest
from hpsearch.space._yaml import REJECTED, Index
from hpsearch.space.duration import parse_duration
from hpsearch.space.spec import Command, Objective, Param, Scheduler

__all__ = ["KEYS", "check_command", "read_command"]

KEYS = ("command", "metrics", "metrics_from", "resume", "cwd", "env", "stop_grace",
        "launcher")
#: How the command is started: ``plain`` as a plain process, ``torchrun`` with the
#: variables torchrun sets. ``None``: ``torchrun`` at several workers, else plain.
LAUNCHERS = ("plain", "torchrun")
_PATH = ("trainable",)
_EXAMPLE = "{command: 'python train.py --lr={lr}', metrics: 'val_loss=(?P<val_loss>\\S+)'}"


def read_command(section: Mapping, report: Report, *, base_dir: str, resolve: bool) -> Any:
    """The :class:`Command` a ``trainable`` mapping describes, or :data:`BAD`.

    Args:
        base_dir: The space file's folder: ``cwd`` is relative to it.
        resolve: Check that ``cwd`` is a directory (``validate``, ``run``, ``trial``).
    """
    report.reject_unknown_keys(section, _PATH, KEYS)
    argv = _read_words(section, "command", report, required=True)
    metrics = _read_metrics(section.get("metrics"), report)
    files = _read_metrics_from(section.get("metrics_from"), report)
    if metrics and files:
        report.add(_PATH + ("metrics_from",), "conflict", "give either `metrics` (patterns "
                   "for the output) or `metrics_from` (files), not both")
        files = BAD
    resume = _read_resume(section.get("resume"), report)
    cwd = report.text(section, _PATH, "cwd", default=".")
    env = _read_env(section.get("env"), report)
    grace = _read_grace(section.get("stop_grace"), report)
    launcher = report.option(section, _PATH, "launcher", LAUNCHERS, default=None)
    if not ok(argv, metrics, files, resume, cwd, env, grace, launcher):
        return BAD
    if not argv:
        return report.add(_PATH + ("command",), "empty", "must name a program, e.g. "
                          "`python train.py --lr={lr}`")
    where = os.path.normpath(os.path.join(base_dir, os.path.expanduser(cwd)))
    if resolve and not os.path.isdir(where):
        return report.add(_PATH + ("cwd",), "command", f"`{where}` is not a directory; cwd "
                          "is relative to the space file's folder")
    if_exists, args = resume
    inside = os.path.relpath(where, os.getcwd())
    in_job = None if inside == ".." or inside.startswith("../") else inside
    return Command(cwd_in_job=in_job, argv=tuple(argv), metrics=tuple(metrics),
                   metrics_from=tuple(files), resume_if_exists=if_exists,
                   resume_args=tuple(args), cwd=where, env=tuple(env.items()), stop_grace_s=grace,
                   launcher=launcher)


def check_command(command: Command, report: Report, *, params: Iterable[Param],
                  fixed: Mapping[str, Any], objective: Objective, scheduler: Scheduler,
                  more: Iterable[str] = (), workers: int = 1) -> Any:
    """``command`` if its placeholders and patterns fit the rest of the spec, else :data:`BAD`.
    ``more``: the other metrics the space names (objectives after the first, constraints),
    which the patterns must give too."""
    if command.launcher == "plain" and workers > 1:
        report.add(_PATH + ("launcher",), "conflict", f"`plain` runs one process, but "
                   f"resources.workers is {workers}: each of a trial's workers runs the command "
                   "with torchrun's variables; leave launcher out, or set workers: 1")
    searched = [p.name for p in params]
    for name in searched + list(fixed):
        if name in BUILTINS and name != "seed":
            report.add(("params", name), "name", f"`{name}` is a placeholder every command "
                       "trainable has; give the parameter another name")
    known = set(searched) | set(fixed) | set(BUILTINS)
    if scheduler.budget_key:
        known.add(scheduler.budget_key)
    used: set[str] = set()
    conditional = {p.name for p in params if p.when is not None}
    words = [(("command",), command.argv), (("resume", "args"), command.resume_args)]
    for key, argv in words:
        here = known | {RESUME_FROM} if key == ("resume", "args") else known
        for i, word in enumerate(argv):
            path = _PATH + key  # the message quotes the word; a string has no indexes
            flag = argv[i - 1] if i else ""
            bare_flag = flag.startswith("-") and "=" not in flag and "{" not in flag
            for name in _names(word, path, report):
                used.add(name)
                if name in conditional and bare_flag:
                    report.add(path, "command", f"`{flag} {word}`: `{name}` is conditional, "
                               "and a word with its placeholder is left out of the trials "
                               f"that do not sample it, which would leave `{flag}` behind: "
                               f"write `{flag}={word}`")
                if name == RESUME_FROM and name not in here:
                    report.add(path, "command", f"`{{{name}}}` is the newest match of "
                               "resume.if_exists: use it in resume.args")
                elif name not in here:
                    close = suggest(name, sorted(known))
                    hint = f"; did you mean `{{{close}}}`?" if close else ""
                    report.add(path, "command", f"`{{{name}}}` names no parameter and no "
                               f"built-in ({', '.join(BUILTINS)}){hint}")
    for name in searched:
        if name not in used:
            report.add(("params", name), "command", f"is searched, but no placeholder of "
                       f"trainable.command uses it: add e.g. `--{name}={{{name}}}`, or make "
                       "it fixed")
    if command.metrics:
        groups: set[str] = set()
        for pattern in command.metrics:
            groups |= set(re.compile(pattern).groupindex)
        time = [scheduler.time_attr] if scheduler.budget_key else []
        wanted = list(dict.fromkeys([objective.metric, *more, *time]))
        for name in wanted:
            if name not in groups:
                what = ("the time attribute" if name in time and name != objective.metric
                        else "the objective metric" if name == objective.metric
                        else "the metric")
                report.add(_PATH + ("metrics",), "command", f"no named group gives {what} "
                           f"`{name}`: add `(?P<{name}>...)` to a pattern")
    return command


def _names(word: str, path: tuple, report: Report) -> list[str]:
    try:
        return names_in(word)
    except ValueError as exc:
        report.add(path, "command", str(exc))
        return []


def _read_words(section: Mapping, key: str, report: Report, *, required: bool) -> Any:
    value = section.get(key)
    path = _PATH + (key,)
    if value is REJECTED:
        return BAD
    if value is None:
        if required:
            return report.add(path, "missing", f"required key is missing; e.g. {_EXAMPLE}")
        return []
    if isinstance(value, (list, tuple)):
        for i, word in enumerate(value):
            if not isinstance(word, (str, int, float)) or isinstance(word, bool):
                return report.add(path + (Index(i),), "type", f"expected a string {got(word)}")
        return [str(w) for w in value]
    if not isinstance(value, str):
        return report.add(path, "type", f"expected a string or a list of strings {got(value)}")
    try:
        return split_command(value)
    except ValueError as exc:
        return report.add(path, "format", f"cannot split it into words: {exc} (got {show(value)})")


def _read_metrics(value: Any, report: Report) -> Any:
    """``metrics``: a regular expression with named groups, or a list of them."""
    return report.listed(value, _PATH + ("metrics",),
                         lambda pattern, here: _read_pattern(pattern, here, report))


def _read_pattern(pattern: Any, here: tuple, report: Report) -> Any:
    if not isinstance(pattern, str) or not pattern:
        return report.add(here, "type", f"expected a regular expression {got(pattern)}")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return report.add(here, "format", f"the regular expression does not compile: {exc}")
    if not compiled.groupindex:
        return report.add(here, "command", "has no named group: write each metric as "
                          "`(?P<name>[0-9.eE+-]+)`")
    return pattern


def _read_metrics_from(value: Any, report: Report) -> Any:
    """``metrics_from``: a path, or a list of paths or ``{path, format}`` mappings."""
    return report.listed(value, _PATH + ("metrics_from",),
                         lambda item, here: _read_metrics_file(item, here, report))


def _read_metrics_file(item: Any, here: tuple, report: Report) -> Any:
    if isinstance(item, str):
        item = {"path": item}
    section = report.mapping(item, here, example="{path: logs/metrics.csv, format: csv}")
    if section is BAD:
        return BAD
    report.reject_unknown_keys(section, here, ("path", "format"))
    name = report.text(section, here, "path")
    if name is BAD:
        return BAD
    if os.path.isabs(name) or ".." in name.split("/"):
        return report.add(here + ("path",), "command", "must be a path under "
                          f"{{trial_dir}}, relative to it {got(name)}")
    fmt = section.get("format", format_of(name))
    if fmt is None:
        return report.add(here + ("format",), "missing", f"cannot tell the format of "
                          f"`{name}` from its name: add `format:` ({', '.join(FORMATS)})")
    if fmt not in FORMATS:
        close = suggest(str(fmt), FORMATS)
        hint = f"; did you mean `{close}`?" if close else ""
        return report.add(here + ("format",), "value", f"must be one of "
                          f"{', '.join(FORMATS)} {got(fmt)}{hint}")
    return MetricsFile(name, fmt)


def _read_resume(value: Any, report: Report) -> Any:
    path = _PATH + ("resume",)
    if value is None:
        return None, []
    section = report.mapping(value, path, example="{if_exists: ckpt.pt, args: --resume}")
    if section is BAD:
        return BAD
    report.reject_unknown_keys(section, path, ("if_exists", "args"))
    if_exists = report.text(section, path, "if_exists")
    args = _read_words({"command": section.get("args")}, "command", report, required=False) \
        if section.get("args") is not None else report.add(path + ("args",), "missing", "required key is "
                                             "missing; e.g. `args: --init_from=resume`")
    if not ok(if_exists, args):
        return BAD
    if os.path.isabs(if_exists) or ".." in if_exists.split("/"):
        return report.add(path + ("if_exists",), "command", "must be a file under "
                          f"{{trial_dir}} (or a glob, e.g. `checkpoint-*`), relative to it "
                          f"{got(if_exists)}")
    return if_exists, args


def _read_env(value: Any, report: Report) -> Any:
    path = _PATH + ("env",)
    if value is None:
        return {}
    section = report.mapping(value, path, example="{OMP_NUM_THREADS: '1'}")
    if section is BAD:
        return BAD
    out = {}
    for key, item in section.items():
        if not isinstance(key, str) or not key or "=" in key:
            return report.add(path + (key,), "name", "must be an environment variable name")
        if isinstance(item, bool):
            item = "1" if item else "0"
        if not isinstance(item, (str, int, float)):
            return report.add(path + (key,), "type", f"expected a string {got(item)}")
        out[key] = str(item)
    return out


def _read_grace(value: Any, report: Report) -> Any:
    if value is None:
        return 10.0
    try:
        return parse_duration(value)
    except (ValueError, TypeError) as exc:
        return report.add(_PATH + ("stop_grace",), "format", f"{exc} (e.g. 10s)")
