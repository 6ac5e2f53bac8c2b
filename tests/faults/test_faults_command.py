"""``int8conf faults``: the faulty formulas per declared contract."""

from __future__ import annotations

import json

from conformance.cli import main


def test_faults_command_lists_faulty_formulas_for_a_kernels_contract(capsys):
    assert main(["faults", "--kernel", "triton", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["contract"] == {"scale_order": "a_then_w", "bias_point": "after_round", "rounding": "rne"}
    assert doc["declared"] == {"no_bias": "rne((x*s_a)*s_w)", "with_bias": "rne(rne((x*s_a)*s_w) + b)"}
    f = {r["id"]: r for r in doc["faults"]}
    assert [r["id"] for r in doc["faults"]] == [f"F{i}" for i in range(1, 10)]
    assert f["F1"]["no_bias"] == "rne((x*bf16(s_a))*s_w)"
    assert f["F2"]["no_bias"] == "rne((r16(x*s_a))*s_w)"
    assert f["F3"]["with_bias"] == "rne(rne((x*s_w)*s_a) + b)"
    assert f["F4"]["with_bias"] == "rtz(rtz((x*s_a)*s_w) + b)"
    assert f["F5"]["no_bias"] == "rne(x*(s_a*s_w))"  # scales fused
    assert f["F5"]["with_bias"] == "rne((x*s_a)*s_w + b)"  # bias moved before rounding
    assert main(["faults", "--contract", "fused/fp32_before_round", "--json"]) == 0
    f = {r["id"]: r for r in json.loads(capsys.readouterr().out)["faults"]}
    assert f["F3"]["no_bias"] == "rne((x*s_a)*s_w)" and f["F5"]["no_bias"] == "rne((x*s_w)*s_a)"
    assert f["F2"]["no_bias"] == "rne(x*r16(s_a*s_w))"
    assert f["F5"]["with_bias"] == "rne(rne(x*(s_a*s_w)) + b)"
    assert main(["faults"]) == 0 and "scale_precision" in capsys.readouterr().out


def test_faults_command_bad_contract_is_one_line(capsys):
    assert main(["faults", "--contract", "sideways"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("int8conf: error: --contract")
