"""``int8conf kernels``: built-ins and adapters with availability and reasons."""

import importlib.util
import json

import pytest

from conformance.cli import main


def test_kernels_lists_builtins_and_adapters_with_reasons(capsys, monkeypatch):
    # hide the optional libraries: the listing must still name every adapter and say why
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda n, *a: None if n in ("torchao", "bitsandbytes", "vllm", "sgl_kernel") else real(n, *a),
    )
    from conformance.kernels import adapters

    monkeypatch.setattr(adapters, "_CACHE", {})
    assert main(["kernels", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["cpu"]["available"] and rows["cpu"]["contract"] == "w_then_a/bias:fp32_before_round/rne"
    for name in (
        "torchao",
        "torchao-w8a8",
        "torchao-w8a8-bf16",
        "torchao-triton",
        "bnb",
        "vllm-cutlass",
        "vllm-triton",
        "sgl-int8",
    ):
        assert name in rows
    assert rows["vllm-cutlass"]["available"] is False
    assert rows["vllm-cutlass"]["reason"] == "vllm is not installed (pip install vllm (CUDA))"
    assert rows["bnb"]["available"] is False
    assert rows["bnb"]["reason"] == "bitsandbytes is not installed (pip install 'int8conf[bnb]')"
    assert rows["sgl-int8"]["reason"].startswith("sgl_kernel is not installed")


def test_unavailable_adapter_is_one_line_error(capsys):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm installed here")
    assert main(["check", "--kernel", "vllm-cutlass", "--no-model", "--examples", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vllm is not installed" in err[0]
