"""Search-space files: YAML -> validated, frozen :class:`Spec`. Imports neither ray nor torch.

The format is documented in ``docs/space-format.md``. The entry points are
:func:`load_space` (a file) and :func:`parse_space` (a mapping); both take ``--set``
overrides, which :func:`apply_overrides` applies on its own.
"""

from hpsearch.space._summary import summarize
from hpsearch.space._validate import storage_problem
from hpsearch.space.duration import format_duration, parse_duration
from hpsearch.space.load import check_harness_values, load_space, parse_space
from hpsearch.space.overrides import apply_overrides
from hpsearch.space.spec import (
    Budget,
    CategoricalParam,
    Checkpoints,
    Command,
    Condition,
    FloatParam,
    IntParam,
    MlflowTrack,
    Objective,
    Param,
    Resources,
    Scheduler,
    Search,
    Spec,
    Track,
    Trials,
)

__all__ = [
    "Budget",
    "CategoricalParam",
    "Checkpoints",
    "Command",
    "Condition",
    "FloatParam",
    "IntParam",
    "MlflowTrack",
    "Objective",
    "Param",
    "Resources",
    "Scheduler",
    "Search",
    "Spec",
    "Track",
    "Trials",
    "apply_overrides",
    "check_harness_values",
    "format_duration",
    "load_space",
    "parse_duration",
    "parse_space",
    "storage_problem",
    "summarize",
]
