"""Search-space files: YAML -> validated, frozen :class:`Spec`. Imports neither ray nor torch."""

from hpsearch.space.spec import (
    PRECISIONS,
    Budget,
    CategoricalParam,
    Checkpoints,
    Condition,
    FloatParam,
    IntParam,
    Objective,
    Param,
    Resources,
    Scheduler,
    Search,
    Spec,
    Trials,
)

__all__ = [
    "PRECISIONS",
    "Budget",
    "CategoricalParam",
    "Checkpoints",
    "Condition",
    "FloatParam",
    "IntParam",
    "Objective",
    "Param",
    "Resources",
    "Scheduler",
    "Search",
    "Spec",
    "Trials",
]
