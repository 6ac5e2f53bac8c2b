"""conformance.bench: GMAC/s arithmetic and table structure (no timing asserts)."""

from __future__ import annotations

import math

from conformance import bench


def test_gmacs_arithmetic():
    assert bench.gmacs(512, 2048, 2048, 0.1) == 512 * 2048 * 2048 / 0.1 / 1e9
    assert math.isclose(bench.gmacs(512, 2048, 2048, 0.1), 21.47483648)
    assert bench.gmacs(1, 1, 1, 0.0) == float("inf")


def test_shapes_are_qwen3_1_7b():
    assert {(m, k, n) for m, k, n, _ in bench.QWEN3_1_7B_SHAPES} == {
        (512, k, n) for k in (2048, 6144) for n in (2048, 6144)}


def test_run_bench_rows_tiny():
    shapes = ((8, 32, 16, "tiny"),)
    df = bench.run_bench(("cpu", "triton"), reps=1, shapes=shapes,
                         interpreter_shape=(4, 16, 16, "tiny interp"), cuda=False)
    got = [(r["kernel"], r["M"], r["K"], r["N"]) for r in df.to_dict("records")]
    assert got == [("reference exact_int_mm", 8, 32, 16), ("reference scaled_mm", 8, 32, 16),
                   ("reference exact_int_mm", 4, 16, 16), ("reference scaled_mm", 4, 16, 16),
                   ("cpu", 8, 32, 16), ("triton", 4, 16, 16)]
    ref_rows = df[df.kernel == "reference exact_int_mm"]
    assert (ref_rows["x reference"] == 1.0).all()
    for r in df.to_dict("records"):
        assert math.isclose(r["GMAC/s"], r["M"] * r["K"] * r["N"] / (r["ms"] / 1e3) / 1e9)
