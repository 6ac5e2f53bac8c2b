"""Third-party kernels: pkg.module:function (declare / attributes / query),
the int8conf.kernels entry-point group, the vLLM-convention adapter, and
one-line KernelLoadErrors."""

from __future__ import annotations

import textwrap

import pytest
import torch

from conformance.kernels.loader import load_module_function
from conformance.kernels.registry import get_kernel, list_kernels, register, resolve_kernels
from conformance.kernels.runner import run_int_mm, run_kernel
from conformance.kernels.spec import KernelSpec
from conformance.runtime.output_dirs import kernel_label
from reference.contract import CUTLASS_STYLE, TRITON_STYLE, EpilogueContract
from reference.epilogue import reference_scaled_mm
from reference.errors import KernelLoadError
from reference.operands import GemmOperands

MODULE = textwrap.dedent("""
    import torch
    from conformance.kernels.loader import declare
    from conformance.kernels.spec import ShapeConstraints
    from reference.contract import TRITON_STYLE, CUTLASS_STYLE
    from reference.epilogue import reference_scaled_mm

    def _acc(a, b):
        return (a.long() @ b.long().T).int()

    @declare(contract="triton", constraints=ShapeConstraints(min_m=1), int_mm=_acc,
             name="mine", version="2.1")
    def declared(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        return reference_scaled_mm(a, b, sa, sb, TRITON_STYLE, bias, out_dtype)

    def attrs(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        return reference_scaled_mm(a, b, sa, sb, CUTLASS_STYLE, bias, out_dtype)
    attrs.int8conf_contract = {"scale_order": "w_then_a", "bias_point": "fp32_before_round"}

    SEEN = {}
    def vllm_style(a, b, scale_a, scale_b, out_dtype, bias):
        # vLLM convention: b is [K,N] (column-major view), scales are columns
        SEEN.update(b_shape=tuple(b.shape), b_stride=b.stride(), sa=tuple(scale_a.shape),
                    sb=tuple(scale_b.shape))
        return reference_scaled_mm(a, b.t().contiguous(), scale_a, scale_b, CUTLASS_STYLE,
                                   bias, out_dtype)

    def undeclared(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        return None

    def factory():
        from conformance.kernels.spec import KernelSpec
        return KernelSpec(name="fact", scaled_mm=attrs, contract=CUTLASS_STYLE)
    factory.int8conf_factory = True

    def bad_factory():
        raise ValueError("no GPU\\nmore")
    bad_factory.int8conf_factory = True
""")


@pytest.fixture
def usermod(tmp_path, monkeypatch):
    (tmp_path / "kern_user_mod.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    import sys

    sys.modules.pop("kern_user_mod", None)
    importlib.invalidate_caches()
    yield importlib.import_module("kern_user_mod")
    sys.modules.pop("kern_user_mod", None)


def _ops(bias=True):
    g = torch.Generator().manual_seed(2)
    return GemmOperands(
        torch.randint(-128, 128, (5, 9), dtype=torch.int8, generator=g),
        torch.randint(-128, 128, (6, 9), dtype=torch.int8, generator=g),
        torch.rand(5, generator=g) + 0.1,
        torch.rand(6, generator=g) + 0.1,
        torch.randn(6, generator=g).bfloat16() if bias else None,
    )


def test_declared_function(usermod):
    spec = get_kernel("kern_user_mod:declared")
    assert spec.name == "mine" and spec.version == "2.1" and spec.contract == TRITON_STYLE
    assert spec.origin == "module:kern_user_mod:declared" and len(spec.source_digest) == 64
    ops = _ops()
    run = run_kernel(spec, ops)
    assert run.error is None
    ref = reference_scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, TRITON_STYLE, ops.bias)
    assert torch.equal(run.output.view(torch.int16), ref.view(torch.int16))
    assert torch.equal(run_int_mm(spec, ops.a, ops.b).acc.long(), ops.a.long() @ ops.b.long().T)


def test_attribute_declaration_and_query_override(usermod):
    assert get_kernel("kern_user_mod:attrs").contract == CUTLASS_STYLE
    spec = get_kernel("kern_user_mod:attrs?contract=fused/after_round&name=x")
    assert spec.contract == EpilogueContract("fused", "after_round") and spec.name == "x"


def test_a_query_over_a_declare_decorator_is_named_in_the_description_and_the_kernel_s_name():
    """The overriding run gets its own name (its report folder: the declared run's reports are not replaced)."""
    over = get_kernel("buggy_kernels:decode_path_order?contract=triton&contiguous_only=1")
    assert over.description.endswith(
        "; the name's query overrides the declared contract (w_then_a/bias:fp32_before_round/rne), contiguous_only (False)"
    )
    assert over.name == "decode_path_order?contract=triton&contiguous_only=1"
    assert kernel_label(over.name) == "decode_path_order_contract_triton_contiguous_only_1"
    same = get_kernel("buggy_kernels:decode_path_order?contract=cutlass")  # what it declares: nothing overridden
    assert "overrides" not in same.description and same.name == "decode_path_order"
    named = get_kernel("buggy_kernels:decode_path_order?contract=triton&name=mine")  # a name given: that name
    assert named.name == "mine"


def test_vllm_adapter(usermod):
    spec = get_kernel("kern_user_mod:vllm_style?contract=cutlass&convention=vllm")
    ops = _ops()
    ops.scale_b = torch.tensor(0.25)  # scalar scale broadcast to [N,1]
    run = run_kernel(spec, ops)
    assert run.error is None
    assert usermod.SEEN == {"b_shape": (9, 6), "b_stride": (1, 9), "sa": (5, 1), "sb": (6, 1)}
    ref = reference_scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, CUTLASS_STYLE, ops.bias)
    assert torch.equal(run.output.view(torch.int16), ref.view(torch.int16))


def test_factory(usermod):
    spec = get_kernel("kern_user_mod:factory")
    assert spec.name == "fact" and spec.origin == "module:kern_user_mod:factory"
    with pytest.raises(
        KernelLoadError,
        match=r"^kernel 'kern_user_mod:bad_factory': factory "
        r"raised ValueError: no GPU$",
    ):
        get_kernel("kern_user_mod:bad_factory")


@pytest.mark.parametrize(
    "name,msg",
    [
        ("kern_user_mod:undeclared", "declares no epilogue contract"),
        ("kern_user_mod:nothere", "module 'kern_user_mod' has no attribute 'nothere'"),
        ("no_such_pkg_xyz.mod:fn", "cannot import module 'no_such_pkg_xyz.mod': ModuleNotFoundError"),
        ("kern_user_mod:attrs?convention=cuda", "bad declaration: convention='cuda'"),
        ("no-such-kernel", "unknown kernel 'no-such-kernel'"),
        ("", "kernel name must be a non-empty string"),
    ],
)
def test_load_errors_are_one_line(usermod, name, msg):
    with pytest.raises(KernelLoadError) as ei:
        get_kernel(name)
    assert msg in str(ei.value) and "\n" not in str(ei.value)


def test_entry_point_group(usermod, tmp_path, monkeypatch):
    dist = tmp_path / "kernuser-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kernuser\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[int8conf.kernels]\nuserkern = kern_user_mod:declared\nbroken = kern_user_mod:nope\n"
    )
    assert "userkern" in list_kernels() and "broken" in list_kernels()
    spec = get_kernel("userkern")
    assert spec.origin == "entry-point:userkern" and spec.contract == TRITON_STYLE
    with pytest.raises(
        KernelLoadError,
        match=r"^entry point 'broken' \(kern_user_mod:nope\) "
        r"failed to load: AttributeError",
    ):
        get_kernel("broken")


def test_register_and_resolve():
    spec = KernelSpec(name="kern_test_registered", scaled_mm=lambda *a, **k: None, contract=CUTLASS_STYLE)
    register(spec)
    assert get_kernel("kern_test_registered") is spec
    names = [s.name for s in resolve_kernels(["cpu", "all", "kern_test_registered", "cpu"])]
    assert names == ["cpu", "int_mm", "triton", "kern_test_registered"]
    with pytest.raises(KernelLoadError, match="built-in name"):
        register(KernelSpec(name="cpu", scaled_mm=print, contract=CUTLASS_STYLE))


def test_unknown_query_keys_and_bad_devices_are_refused_with_their_name():
    from conformance.kernels.loader import declare, load_module_function, spec_from_object, split_query
    from reference.errors import ContractError

    assert split_query("m:f?contract=cutlass&overflow=wrap") == ("m:f", {"contract": "cutlass", "overflow": "wrap"})
    with pytest.raises(ContractError, match=r"unknown query key\(s\) \['overflo'\]"):
        split_query("m:f?contract=cutlass&overflo=saturate")
    tpu = declare("cutlass", devices=("tpu",))(lambda *a, **k: None)
    with pytest.raises(KernelLoadError, match="device 'tpu' is not a torch device type"):
        spec_from_object(tpu, "m:tpu", "test")
    with pytest.raises(KernelLoadError, match=r"\?devices=: devices is empty"):
        load_module_function("buggy_kernels:column_major_output?devices=")

    with pytest.raises(ContractError, match=r"query key\(s\) \['contract'\] given more than once"):
        split_query("m:f?contract=cutlass&contract=triton")
    # a KernelSpec's declaration is its own: a query on one is refused, not ignored (it passed before)
    with pytest.raises(KernelLoadError, match=r"is a KernelSpec, whose declaration is its own: \?contract&name= "):
        load_module_function("buggy_kernels:custom_op_control?contract=triton&name=zzz")
    with pytest.raises(KernelLoadError, match=r"'cpu' declares itself; a \?query declares a 'pkg.module:function'"):
        get_kernel("cpu?contract=triton")


def test_a_single_device_string_is_one_device():
    """``devices="cpu"`` is the one device ``cpu``, not the letters of the string."""
    from conformance.kernels.loader import declare, spec_from_object

    one = declare("cutlass", devices="cpu")(lambda *a, **k: None)
    assert spec_from_object(one, "m:one", "test").devices == ("cpu",)


def test_declare_takes_the_per_device_overflow_mapping_the_kernels_readme_shows():
    from conformance.kernels.loader import declare, spec_from_object

    fn = declare("cutlass", overflow={"cpu": "wrap", "CUDA": "undefined"})(lambda *a, **k: None)
    spec = spec_from_object(fn, "m:fn", "test")
    assert (spec.overflow_on("cpu"), spec.overflow_on("cuda:1")) == ("wrap", "undefined")
    bad = declare("cutlass", overflow={"cuda": "clamp"})(lambda *a, **k: None)
    with pytest.raises(KernelLoadError, match="overflow='clamp' is not one of"):
        spec_from_object(bad, "m:bad", "test")


def test_a_loaded_kernel_cannot_take_a_builtin_name():
    """Its reports would replace the built-in's (reports/check/cpu/)."""
    from conformance.kernels.loader import declare, spec_from_object

    fn = declare("cutlass", name="cpu")(lambda *a, **k: None)
    with pytest.raises(
        KernelLoadError,
        match=r"^kernel 'm:f' declares the name 'cpu', which is "
        r"reserved for the built-in kernel",
    ):
        spec_from_object(fn, "m:f", "module:m:f")
    with pytest.raises(KernelLoadError, match="declares the name 'all'"):
        spec_from_object(declare("cutlass")(lambda *a, **k: None), "m:f", "module:m:f", {"name": "all"})
    spec = KernelSpec(name="triton", scaled_mm=print, contract=CUTLASS_STYLE)
    with pytest.raises(KernelLoadError, match="declares the name 'triton'"):
        spec_from_object(spec, "m:SPEC", "module:m:SPEC")
    assert spec_from_object(declare("cutlass", name="cpu2")(lambda *a, **k: None), "m:f", "t").name == "cpu2"


MIXED_MODULE = textwrap.dedent("""
    import torch
    from conformance.kernels.loader import declare

    @declare(contract="cutlass")
    def good_before(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return None

    @declare(contract="no_such_contract")
    def bad_contract(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return None

    @declare(contract="cutlass", overflow="clamp", convention="tf")
    def two_bad_fields(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return None

    @declare(contract="triton")
    def good_after(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return None
""")


def test_a_bad_declare_names_its_function_and_field_and_spares_the_module(tmp_path, monkeypatch):
    """One bad ``@declare`` no longer fails the module's import: the kernels
    declared before and after it load, and loading the bad one names the
    function, the field and the value in one line."""
    import sys

    from conformance.kernels.loader import load_module_function

    (tmp_path / "kern_mixed_mod.py").write_text(MIXED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kern_mixed_mod", raising=False)
    assert load_module_function("kern_mixed_mod:good_before").contract == CUTLASS_STYLE
    assert load_module_function("kern_mixed_mod:good_after").contract == TRITON_STYLE
    with pytest.raises(KernelLoadError) as e:
        load_module_function("kern_mixed_mod:bad_contract")
    assert str(e.value) == (
        "kernel 'kern_mixed_mod:bad_contract': bad declaration: @declare(...) on function "
        "'bad_contract' (module kern_mixed_mod): contract='no_such_contract': cannot read an "
        "epilogue contract from 'no_such_contract' (use 'cutlass', 'triton' or "
        "'<scale_order>/<bias_point>')"
    )
    with pytest.raises(KernelLoadError) as e:
        get_kernel("kern_mixed_mod:two_bad_fields")
    msg = str(e.value)
    assert "\n" not in msg and "on function 'two_bad_fields'" in msg
    assert "convention='tf' is not one of ('int8conf', 'vllm')" in msg
    assert "overflow='clamp' is not one of ('wrap', 'saturate', 'undefined')" in msg
    # a query string cannot repair an invalid decorator (the declaration is wrong as written)
    with pytest.raises(KernelLoadError, match="contract='no_such_contract'"):
        load_module_function("kern_mixed_mod:bad_contract?contract=cutlass")


def test_a_per_device_mapping_may_name_contracts():
    """``{"cpu": "triton", "cuda": "cutlass"}`` was refused ("unknown step 'triton'")."""
    from conformance.kernels.loader import declare, spec_from_object
    from reference.contract import select_steps, steps_label

    spec = spec_from_object(
        declare(
            {"cpu": "triton", "cuda/float16": "w_then_a/after_round", "*": ["cast fp32", "mul s_a*s_w", "cast out"]}
        )(lambda *a, **k: None),
        "m:f",
        "test",
    )
    label = lambda dev, dt: steps_label(select_steps(spec.steps, dev, dt))  # noqa: E731
    assert label("cpu", torch.bfloat16) == "a_then_w/after_round: cast fp32; mul s_a; mul s_w; cast out; add bias"
    assert label("cuda", torch.float16).startswith("w_then_a/after_round: cast fp32; mul s_w; mul s_a")
    assert label("cuda", torch.bfloat16).endswith("cast fp32; mul s_a*s_w; cast out")


def test_a_per_device_mapping_must_cover_every_declared_device():
    """{"cuda": "triton"} on a kernel declared for the CPU used to load: on the CPU it was
    then checked against the contract nearest to the cuda entry, a silent guess."""
    from conformance.kernels.loader import declare, spec_from_object

    with pytest.raises(
        KernelLoadError,
        match=r"names \['cuda'\] but not the declared device\(s\) "
        r"\['cpu'\]: add an entry for each \(or '\*'\)",
    ):
        spec_from_object(declare({"cuda": "triton"})(lambda *a, **k: None), "m:f", "t")
    assert spec_from_object(
        declare({"cuda": "triton"}, devices=("cuda",))(lambda *a, **k: None), "m:f", "t"
    ).devices == ("cuda",)
    assert spec_from_object(
        declare({"cuda/float16": "triton", "*": "cutlass"}, devices=("cpu", "cuda"))(lambda *a, **k: None), "m:f", "t"
    )


def test_a_declared_warm_up_may_name_the_compiled_variant():
    """``warm_up`` takes a function of scaled_mm's arguments (the warm-up compiles each variant it names once)."""
    from conformance.kernels.loader import declare

    def variant(a, b, scale_a, scale_b, out_dtype=None, bias=None):
        return (a.shape[0] > 16, out_dtype)

    @declare(contract="triton", warm_up=variant)
    def mm(a, b, scale_a, scale_b, out_dtype=None, bias=None):
        raise NotImplementedError

    assert mm.int8conf.warm_up is variant


def test_a_module_exiting_while_imported_is_one_load_error(tmp_path, monkeypatch):
    (tmp_path / "kern_exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KernelLoadError, match=r"called sys.exit\(3\) while being imported"):
        load_module_function("kern_exits_on_import:fn")


@pytest.mark.parametrize(
    "name, body, how",
    [
        ("kern_os_exit_on_import", "import os\nprint('bye')\nos._exit(0)\n", "exit status 0"),
        ("kern_segv_on_import", "import ctypes\nctypes.string_at(0)\n", "signal SIGSEGV"),
    ],
)
def test_a_module_ending_the_process_while_imported_is_one_load_error(tmp_path, monkeypatch, name, body, how):
    """os._exit or a crash at import would end int8conf with the module's status (0 read as conformant): the
    import is tried in a forked child first, and the parent's error names how it ended."""
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KernelLoadError) as e:
        load_module_function(f"{name}:fn")
    assert str(e.value) == (
        f"--kernel '{name}:fn': importing module '{name}' ended the process ({how}) before it returned: "
        "a module-level os._exit or a crash at import"
    )


def test_a_query_declared_kernel_keeps_its_query_for_a_fresh_process(tmp_path, monkeypatch):
    """A reproducer's command.sh re-resolves the kernel by name: a ``?contract=`` declaration must travel with it."""
    from conformance.suite.workers import kernel_ref

    (tmp_path / "kern_query_mod.py").write_text(
        "def fn(a, b, scale_a, scale_b, out_dtype=None, bias=None):\n    raise NotImplementedError\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = load_module_function("kern_query_mod:fn?contract=cutlass")
    ref = kernel_ref(spec)
    assert ref is not None and ref.name == "kern_query_mod:fn?contract=cutlass"
    assert ref.resolve().contract == spec.contract
    assert (
        load_module_function("kern_query_mod:fn?contract=cutlass").origin == "module:kern_query_mod:fn?contract=cutlass"
    )


def test_an_undeclared_callable_is_named_with_the_query_that_declares_it(usermod):
    """Two runs of one undeclared callable under two contracts wrote one report folder: its query is in its name."""
    one = get_kernel("kern_user_mod:vllm_style?contract=cutlass&convention=vllm")
    two = get_kernel("kern_user_mod:vllm_style?contract=triton&convention=vllm")
    assert one.name == "kern_user_mod:vllm_style?contract=cutlass&convention=vllm"
    assert kernel_label(one.name) == "kern_user_mod_vllm_style_contract_cutlass_convention_vllm"
    assert kernel_label(two.name) != kernel_label(one.name)
    assert get_kernel("kern_user_mod:vllm_style?contract=triton&convention=vllm&name=mine").name == "mine"


def test_a_module_named_without_its_function_gets_the_module_function_hint(tmp_path, monkeypatch):
    (tmp_path / "kern_no_fn_named.py").write_text("def scaled_mm(*a):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KernelLoadError) as e:
        get_kernel("kern_no_fn_named")
    assert (
        str(e.value) == "kernel 'kern_no_fn_named' is a module: name its kernel function, 'kern_no_fn_named:FUNCTION'"
    )
    with pytest.raises(KernelLoadError, match="^unknown kernel 'kern_not_a_module_xyz'"):
        get_kernel("kern_not_a_module_xyz")
