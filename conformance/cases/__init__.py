"""Operand cases of the conformance suite (``reference.operands.GemmOperands``, deterministic per seed).

``synthetic`` (fixed kinds, ``make_case``), ``tile_edges`` (one case per shape straddling the tile edges),
``families`` (the trigger-condition families), ``captures`` (real layer
captures, :func:`case_id`). Family map, planting and layouts: ``README.md`` here.
"""

from conformance.cases.captures import NO_CAPTURES, CaptureReplay, by_case_id, capture_cases, case_id, load_capture_dir
from conformance.cases.synthetic import SYNTHETIC_KINDS, TIE_ORDERS, make_case, synthetic_cases, tie_discrimination
from conformance.cases.tie_search import MANT_BITS, TIE_BLOCK, VMAX, pick_ties, realize_acc
from conformance.cases.tile_edges import TILE_EDGES, tile_edge_cases, tile_edge_shapes

__all__ = [
    "NO_CAPTURES",
    "CaptureReplay",
    "by_case_id",
    "capture_cases",
    "case_id",
    "load_capture_dir",
    "TILE_EDGES",
    "tile_edge_cases",
    "tile_edge_shapes",
    "MANT_BITS",
    "SYNTHETIC_KINDS",
    "TIE_BLOCK",
    "TIE_ORDERS",
    "VMAX",
    "make_case",
    "pick_ties",
    "realize_acc",
    "synthetic_cases",
    "tie_discrimination",
]
