"""The epilogue step language under its own name: defined in :mod:`reference.contract`, evaluated by
:func:`reference.epilogue.apply_steps`."""

from reference.contract import (
    NAMED,
    EpilogueSteps,
    Step,
    StepsDecl,
    declared_to_dict,
    from_contract,
    parse_declared,
    parse_step,
    parse_steps,
    select_steps,
    steps_label,
)
from reference.epilogue import apply_steps

__all__ = [
    "NAMED",
    "EpilogueSteps",
    "Step",
    "StepsDecl",
    "apply_steps",
    "declared_to_dict",
    "from_contract",
    "parse_declared",
    "parse_step",
    "parse_steps",
    "select_steps",
    "steps_label",
]
