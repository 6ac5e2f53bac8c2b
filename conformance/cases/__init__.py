"""Operand cases for the conformance suite.

* :mod:`conformance.cases.synthetic`: the fixed synthetic kinds (``make_case``)
  and the epilogue-tie search (``meta["source"] == "synthetic"``);
* :mod:`conformance.cases.sweep`: the alignment-straddling shape sweep
  (``"sweep"``);
* :mod:`conformance.cases.families`: the trigger-condition families
  (``"family"``): accumulator (:mod:`~conformance.cases.accumulator`),
  output (:mod:`~conformance.cases.outputs`), alignment and shape
  (:mod:`~conformance.cases.alignment`), epilogue ties at every M
  (:mod:`~conformance.cases.ties`), operand layouts
  (:mod:`~conformance.cases.layouts`) and size-dependent paths (large M,
  wide N, split-K; :mod:`~conformance.cases.large_shapes`);
* :mod:`conformance.cases.captures`: replay of real layer captures
  (``"capture"``) and :func:`case_id`.

Everything is deterministic given its seeds (``torch.Generator``) and
independent of hypothesis (the property test lives in ``conformance.suite.property``).
Each case is a ``reference.operands.GemmOperands``.
"""

from conformance.cases.captures import NO_CAPTURES, CaptureReplay, capture_cases, case_id, load_capture_dir
from conformance.cases.sweep import TILE_EDGES, shape_sweep, sweep_shapes
from conformance.cases.synthetic import SYNTHETIC_KINDS, TIE_ORDERS, make_case, synthetic_cases, tie_discrimination
from conformance.cases.tie_search import MANT_BITS, TIE_BLOCK, VMAX, pick_ties, realize_acc

__all__ = [
    "NO_CAPTURES",
    "CaptureReplay",
    "capture_cases",
    "case_id",
    "load_capture_dir",
    "TILE_EDGES",
    "shape_sweep",
    "sweep_shapes",
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
