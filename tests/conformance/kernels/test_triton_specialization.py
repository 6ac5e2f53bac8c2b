"""In a conformance run the built-in Triton kernels specialize on no integer argument (one compile per
configuration and dtype set, not one per operand layout); outside one they keep the production hints."""

import pytest

from conformance.kernels import builtin_triton as bt
from conformance.kernels.spec import CONFORMANCE_RUN_ENV


def _int_params(name: str) -> set:
    """The kernel's non-constexpr arguments that are neither pointers nor TMA descriptors."""
    kernel, _ = bt._kernel(name, True)
    return {p.name for p in kernel.params if not p.is_constexpr and not p.name.endswith(("_ptr", "_desc"))}


@pytest.mark.parametrize("name", ["ptr", "tma"])
def test_a_conformance_run_specializes_on_no_integer_argument(name, monkeypatch):
    monkeypatch.setenv(CONFORMANCE_RUN_ENV, "1")
    monkeypatch.delenv(bt.SPECIALIZE_ENV, raising=False)
    assert _int_params(name) == set(bt._unspecialized(name))
    kernel = bt._kernel(name, True)[0]
    named = {kernel.params[i].name if isinstance(i, int) else i for i in kernel.do_not_specialize}
    assert named == _int_params(name)


@pytest.mark.parametrize("name", ["ptr", "tma"])
def test_outside_a_conformance_run_or_with_full_the_production_hints_stay(name, monkeypatch):
    monkeypatch.delenv(CONFORMANCE_RUN_ENV, raising=False)
    assert bt._unspecialized(name) == bt.UNSPECIALIZED[name]
    monkeypatch.setenv(CONFORMANCE_RUN_ENV, "1")
    monkeypatch.setenv(bt.SPECIALIZE_ENV, "full")
    assert bt._unspecialized(name) == bt.UNSPECIALIZED[name]
    kernel = bt._kernel(name, True)[0]
    named = {kernel.params[i].name if isinstance(i, int) else i for i in kernel.do_not_specialize}
    assert named == set(bt.UNSPECIALIZED[name])
