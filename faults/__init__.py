"""The fault catalogue (DESIGN.md section 5) and the wrappers that inject a fault into
any kernel at a given coverage (``faults/README.md``).

Importing the package registers a kernel-name resolver, so injected names such as
``triton+F4@all#s0`` resolve through ``conformance.kernels.registry.get_kernel``.
"""

from conformance.kernels.registry import register_resolver as _register_resolver
from faults.catalogue import FAMILIES, FAULTS, FaultClass, faults_for, get_fault, not_applicable
from faults.inject import (
    annotate_result,
    inject,
    inject_injection,
    injection_note,
    injection_of,
    kernel_accumulator,
    prepare_case,
    prepare_injection,
    resolve_injected_name,
    resolve_kernel,
    wrapped_kernel,
)
from faults.spec import COVERAGES, F9_VARIANTS, FaultError, Injection, make_injection, parse_injection
from faults.truth import GroundTruth, ground_truth

_register_resolver(resolve_injected_name)

__all__ = [
    "FAULTS",
    "FAMILIES",
    "FaultClass",
    "faults_for",
    "not_applicable",
    "get_fault",
    "COVERAGES",
    "F9_VARIANTS",
    "FaultError",
    "Injection",
]
__all__ += ["make_injection", "parse_injection", "inject", "inject_injection", "injection_of", "wrapped_kernel"]
__all__ += ["kernel_accumulator", "prepare_case", "prepare_injection", "resolve_kernel", "ground_truth"]
__all__ += ["GroundTruth", "resolve_injected_name", "injection_note", "annotate_result"]
