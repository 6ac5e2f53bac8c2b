"""A user kernel's source digest (check C1, the sweep store's identity) covers the
helper modules of its own project (``conformance.kernels.digest.helper_files``):
editing a helper the kernel imports changes the digest; a file it does not import,
an installed library and int8conf itself do not; a kernel without helpers keeps the
single-module digest (module bytes + NUL + qualified name)."""

from __future__ import annotations

import hashlib
import sys

import pytest

from conformance.kernels import loader
from conformance.kernels.digest import callable_digest, helper_files

KERN = """import helper
from util.scale import double
from vendored import lib
from tk import tile_kernel
from conformance.kernels.loader import declare


@declare(contract="cutlass", devices=("cpu",))
def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, bias=None):
    return double(helper.K) + lib.X + tile_kernel.__name__.count("x")
"""
#: a @triton.jit kernel in a helper module: the kernel module holds a JITFunction
TK = """import triton


@triton.jit
def tile_kernel(x_ptr):
    pass
"""
ALONE = """import torch


def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, bias=None):
    return torch.zeros(1)
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A kernel project: kern.py importing helper.py, util/scale.py (a package
    module, from-imported function) and vendored/lib.py under a site-packages
    folder (as a virtual environment inside the project would be)."""
    (tmp_path / "kern.py").write_text(KERN)
    (tmp_path / "alone.py").write_text(ALONE)
    (tmp_path / "helper.py").write_text("K = 1\n")
    (tmp_path / "unused.py").write_text("Z = 0\n")
    (tmp_path / "tk.py").write_text(TK)
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "__init__.py").write_text("")
    (tmp_path / "util" / "scale.py").write_text("def double(x):\n    return 2 * x\n")
    site = tmp_path / ".venv" / "site-packages"
    (site / "vendored").mkdir(parents=True)
    (site / "vendored" / "__init__.py").write_text("")
    (site / "vendored" / "lib.py").write_text("X = 3\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ("kern", "alone", "helper", "unused", "util", "util.scale", "vendored", "vendored.lib", "tk")
    yield tmp_path, names
    for n in names:
        sys.modules.pop(n, None)


def _fresh(names):
    for n in names:
        sys.modules.pop(n, None)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_digest_covers_exactly_the_project_helpers(project):
    root, _ = project
    spec = loader.load_module_function("kern:scaled_mm")
    kern = sys.modules["kern"]
    # util/__init__.py: the package of a helper (its __init__ runs first)
    assert [rel for rel, _ in helper_files([kern.scaled_mm])] == [
        "helper.py",
        "tk.py",
        "util/__init__.py",
        "util/scale.py",
    ]
    base = _sha((root / "kern.py").read_bytes() + b"\0kern.scaled_mm")
    want = _sha(
        ",".join(
            [
                base,
                "helper.py:" + _sha(b"K = 1\n"),
                "tk.py:" + _sha(TK.encode()),
                "util/__init__.py:" + _sha(b""),
                "util/scale.py:" + _sha((root / "util" / "scale.py").read_bytes()),
            ]
        ).encode()
    )
    assert spec.source_digest == callable_digest(kern.scaled_mm) == want


@pytest.mark.parametrize(
    "edit, changes",
    [
        ("helper.py", True),
        ("util/scale.py", True),  # imported helpers
        ("tk.py", True),  # a @triton.jit kernel's module
        ("util/__init__.py", True),  # a helper's package
        ("unused.py", False),  # not reachable from the kernel
        (".venv/site-packages/vendored/lib.py", False),  # an installed library
    ],
)
def test_editing_a_helper_changes_the_digest(project, edit, changes):
    root, names = project
    before = loader.load_module_function("kern:scaled_mm").source_digest
    path = root / edit
    path.write_text(path.read_text() + "# edited\n")
    _fresh(names)
    after = loader.load_module_function("kern:scaled_mm").source_digest
    assert (after != before) == changes


def test_a_kernel_without_helpers_keeps_the_single_module_digest(project):
    root, _ = project
    fn = loader.load_module_function("alone:scaled_mm?contract=cutlass").scaled_mm
    assert helper_files([fn]) == []
    assert callable_digest(fn) == _sha((root / "alone.py").read_bytes() + b"\0alone.scaled_mm")


def test_builtin_and_int8conf_modules_are_never_helpers():
    from conformance.kernels import builtin_cpu, runner

    assert helper_files([builtin_cpu.scaled_mm]) == []
    assert helper_files([runner.pick_device]) == []


CALLABLES = """import functools


class Kernel:
    def __call__(self, a, b, scale_a, scale_b, out_dtype=None, bias=None):
        return a


def fn(a, b, scale_a, scale_b, out_dtype=None, bias=None, gain=1):
    return a


INSTANCE = Kernel()
PARTIAL = functools.partial(fn, gain=2)
"""


def test_callable_instances_and_partials_have_stable_digests(tmp_path, monkeypatch):
    """Re-check pass 2026-12-02: a callable instance or a functools.partial was digested
    by its repr (a memory address), so a re-run's digest differed and a sweep refused to
    resume its own store. Now: the class's file and name / the partial's bound arguments
    and the function it wraps."""
    import functools

    (tmp_path / "cal.py").write_text(CALLABLES)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import cal

        src = (tmp_path / "cal.py").read_bytes()
        inst = _sha(src + b"\0cal.Kernel()")
        assert callable_digest(cal.INSTANCE) == callable_digest(cal.Kernel()) == inst
        fn = _sha(src + b"\0cal.fn")
        part = _sha(b"functools.partial\0" + repr(((), [("gain", 2)])).encode())
        assert callable_digest(cal.PARTIAL) == _sha(f"{part},{fn}".encode())
        assert callable_digest(functools.partial(cal.fn, gain=3)) != callable_digest(cal.PARTIAL)
        assert callable_digest(functools.partial(cal.fn, gain=2)) == callable_digest(cal.PARTIAL)
    finally:
        sys.modules.pop("cal", None)


def test_a_namespace_package_kernel_covers_its_sibling_modules(tmp_path, monkeypatch):
    """Re-check pass 2026-12-02: ``nspkg.sub.kern`` (no __init__.py anywhere) importing
    ``nspkg.util`` was not covered: the root came from ``nspkg.__file__`` (None)."""
    (tmp_path / "nspkg" / "sub").mkdir(parents=True)
    (tmp_path / "nspkg" / "util.py").write_text("G = 1\n")
    (tmp_path / "nspkg" / "sub" / "kern.py").write_text(
        "from nspkg import util\n\n"
        "def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, bias=None):\n"
        "    return a * util.G\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        before = loader.load_module_function("nspkg.sub.kern:scaled_mm?contract=cutlass")
        assert [r for r, _ in helper_files([before.scaled_mm])] == ["util.py"]
        (tmp_path / "nspkg" / "util.py").write_text("G = 2\n")
        for n in ("nspkg", "nspkg.sub", "nspkg.sub.kern", "nspkg.util"):
            sys.modules.pop(n, None)
        after = loader.load_module_function("nspkg.sub.kern:scaled_mm?contract=cutlass")
        assert after.source_digest != before.source_digest
    finally:
        for n in ("nspkg", "nspkg.sub", "nspkg.sub.kern", "nspkg.util"):
            sys.modules.pop(n, None)
