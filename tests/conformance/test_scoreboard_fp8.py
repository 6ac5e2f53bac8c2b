"""The scoreboard's FP8 rows: FP8 kernels on FP8 cases, each with the accumulator it declares and the one C11
measures; a kernel that keeps less than it declares is not conformant."""

import json

from conformance.scoreboard.board import run_scoreboard, scoreboard_fp8_cases

NARROW = "buggy_fp8_kernels:fp8_narrow_accumulator"


def test_fp8_rows_name_the_declared_and_the_measured_accumulator(tmp_path):
    cases = scoreboard_fp8_cases(quick=True)
    assert len(cases) == 3 and all(c.a.dtype.itemsize == 1 and c.a.is_floating_point() for c in cases)
    doc = run_scoreboard(
        tmp_path, kernels=["fp8-cpu", NARROW], devices=["cpu"], cases=[], fp8_cases=cases, quiet=True, jobs=2
    )
    assert doc["rows"] == [] and json.loads((tmp_path / "scoreboard.json").read_text())["fp8"] == doc["fp8"]
    rows = {r["kernel"]: r for r in doc["fp8"]["rows"]}
    good, narrow = rows["fp8-cpu"], rows[NARROW]
    assert good["accumulator"]["declared"] == good["accumulator"]["measured"] == "exact"
    assert good["overall"] == "conformant" and good["checks"]["C11"] == "pass" and good["cases_run"] == 3
    assert narrow["accumulator"]["declared"] == "fp32 bits=14 truncate promote=128"
    assert narrow["accumulator"]["measured"] == "fp32 bits=10 truncate promote=128"
    assert narrow["overall"] == "not conformant" and narrow["checks"]["C11"] == "fail"
    assert doc["fp8"]["max_spacing_from_standard"]["fp8-cpu@cpu"]["w_then_a/fp32_before_round"] == 0
    inter = doc["fp8"]["interchangeability"]["fp8-cpu@cpu"]
    assert inter[f"{NARROW}@cpu"] == {"identical": 3, "shared": 3}  # accumulator-safe cases: the same bits
    md = (tmp_path / "scoreboard.md").read_text()
    assert "## FP8 (e4m3) rows" in md and "`fp32 bits=10 truncate promote=128 (fail)`" in md
