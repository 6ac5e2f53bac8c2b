"""The fault catalogue (DESIGN.md section 5) and the wrappers that inject a
fault into any kernel at a given coverage.

Public API::

    FAULTS                      # faults.catalogue: the one table of the nine faults
    COVERAGES = ("one", "1%", "all")
    inject(kernel, fault, coverage="all", seed=0) -> KernelSpec
    prepare_case(ops, fault, coverage="all", seed=0) -> GemmOperands
    ground_truth(kernel, fault, coverage, seed, ops) -> GroundTruth
    parse_injection("F4:all") -> Injection;  injection_of(spec) -> Injection | None

Importing the package registers a kernel-name resolver, so injected names
such as ``triton+F4@all#s0`` resolve through
``conformance.kernels.registry.get_kernel``. Definitions of every fault:
``faults/README.md`` and the family modules (``postprocessing``,
``precondition``, ``operand``); masks: ``faults.mask``.
"""

from conformance.kernels.registry import register_resolver as _register_resolver
from faults.catalogue import FAMILIES, FAULTS, FaultClass, get_fault
from faults.inject import (
    annotate_result,
    inject,
    injection_note,
    injection_of,
    kernel_accumulator,
    prepare_case,
    resolve_injected_name,
    wrapped_kernel,
)
from faults.spec import COVERAGES, F9_VARIANTS, FaultError, Injection, make_injection, parse_injection
from faults.truth import GroundTruth, ground_truth

_register_resolver(resolve_injected_name)

__all__ = [
    "FAULTS",
    "FAMILIES",
    "FaultClass",
    "get_fault",
    "COVERAGES",
    "F9_VARIANTS",
    "FaultError",
    "Injection",
    "make_injection",
    "parse_injection",
    "inject",
    "injection_of",
    "wrapped_kernel",
    "kernel_accumulator",
    "prepare_case",
    "ground_truth",
    "GroundTruth",
    "resolve_injected_name",
    "injection_note",
    "annotate_result",
]
