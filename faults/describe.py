"""What each fault does to one declared contract (``int8conf faults``): the catalogue
entry plus the faulty epilogue formulas (F1-F5), the operand change (F6-F9) or the
narrowed FP8 accumulator (F10), for the faults that apply to the kernel's operands."""

from __future__ import annotations

from faults.catalogue import faults_for
from faults.postprocessing import faulty_steps
from faults.precondition import F6_WINDOW
from faults.spec import F9_VARIANTS, F10_DEFAULT, F10_MAX_DEFICIT, POSTPROCESSING_FAULTS
from reference.contract import EpilogueContract

_OPERAND_TEXT = {
    "F6": (
        "K extended with -128 x -128 columns on the selected rows x channels until each "
        "selected accumulator >= 2^31 (prepared on a {r}x{c} window of the case)"
    ),
    "F7": "K extended with -128 x -128 columns until each selected accumulator >= 2^24",
    "F8": "nothing (null control through the same wrapper)",
    "F9": "kernel fed other operands; variants: " + ", ".join(F9_VARIANTS) + " (default first)",
    "F10": (
        "x = the FP8 accumulator with N significant bits fewer than declared (exact counts as 24), truncating, "
        f"declared promotion; variants d1..d{F10_MAX_DEFICIT} (default {F10_DEFAULT})"
    ),
}


def declared_formula(contract: EpilogueContract, bias: bool) -> str:
    """The declared epilogue as a formula, e.g. ``rne(rne((x*s_a)*s_w) + b)``."""
    y = {"a_then_w": "(x*s_a)*s_w", "w_then_a": "(x*s_w)*s_a", "fused": "x*(s_a*s_w)"}[contract.scale_order]
    if not bias:
        return f"rne({y})"
    if contract.bias_point == "fp32_before_round":
        return f"rne({y} + b)"
    return f"rne(rne({y}) + b)"


def fault_rows(contract: EpilogueContract, operands: str = "int8") -> list[dict]:
    """One dict per catalogue fault that applies to ``operands`` kernels: ``id, name, family,
    description, no_bias, with_bias`` (the faulty formulas under ``contract``, or the operand /
    accumulator change in both columns)."""
    rows = []
    r, c = F6_WINDOW
    for f in faults_for(operands):
        if f.id in POSTPROCESSING_FAULTS:
            nb = faulty_steps(contract, f.id, False)["definition"]
            wb = faulty_steps(contract, f.id, True)["definition"]
        else:
            nb = wb = _OPERAND_TEXT[f.id].format(r=r, c=c)
        rows.append(
            {
                "id": f.id,
                "name": f.name,
                "family": f.family,
                "description": f.description,
                "no_bias": nb,
                "with_bias": wb,
            }
        )
    return rows
