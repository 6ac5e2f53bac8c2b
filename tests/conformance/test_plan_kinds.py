"""The plan-kind table (``suite.plan.PLANS``): a reduced suite names only what the kernel's plan kind has."""

from __future__ import annotations

from conformance.kernels.registry import get_kernel
from conformance.suite.plan import BLOCK, FP8_PLAN, PER_TOKEN, ZERO_POINT, plan_kind, reduced_suite

SERVING = "the serving checks (C13, C14, C15)"


def test_each_builtin_family_has_its_plan_kind():
    kinds = [plan_kind(get_kernel(n)) for n in ("cpu", "fp8-cpu", "block-cpu", "azp-cpu")]
    assert kinds == [PER_TOKEN, FP8_PLAN, BLOCK, ZERO_POINT]


def test_reduced_suite_names_only_what_the_plan_kind_has():
    # captures off, tile edges off, no property examples, no serving, no model checks
    args = (False, False, 0, False, "int8")
    assert reduced_suite(*args, serving_checks=False) == [
        "the tile-edge shapes and case families",
        "layer-capture replay",
        "the property test",
        SERVING,
        "the model-level checks (C7, E1)",
    ]
    assert reduced_suite(*args, serving_checks=False, kind=BLOCK) == [SERVING]  # C13-C15 run on a block sample
    assert reduced_suite(*args, serving_checks=False, kind=ZERO_POINT) == []  # every other check n/a there
