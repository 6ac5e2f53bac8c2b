"""conformance.bench.gemm: GMAC/s arithmetic and table structure (no timing asserts)."""

from __future__ import annotations

import math
import sys

import pytest

from conformance.bench import gemm as bench


def test_gmacs_arithmetic():
    assert bench.gmacs(512, 2048, 2048, 0.1) == 512 * 2048 * 2048 / 0.1 / 1e9
    assert math.isclose(bench.gmacs(512, 2048, 2048, 0.1), 21.47483648)
    assert bench.gmacs(1, 1, 1, 0.0) == float("inf")


def test_shapes_are_qwen3_1_7b():
    assert {(m, k, n) for m, k, n, _ in bench.QWEN3_1_7B_SHAPES} == {
        (512, k, n) for k in (2048, 6144) for n in (2048, 6144)
    }


def test_run_bench_rows_tiny():
    shapes = ((8, 32, 16, "tiny"),)
    df = bench.run_bench(
        ("cpu", "triton"), reps=1, shapes=shapes, interpreter_shape=(4, 16, 16, "tiny interp"), cuda=False
    )
    got = [(r["kernel"], r["M"], r["K"], r["N"]) for r in df.to_dict("records")]
    assert got == [
        ("reference exact_int_mm", 8, 32, 16),
        ("reference scaled_mm", 8, 32, 16),
        ("reference exact_int_mm", 4, 16, 16),
        ("reference scaled_mm", 4, 16, 16),
        ("cpu", 8, 32, 16),
        ("triton", 4, 16, 16),
    ]
    ref_rows = df[df.kernel == "reference exact_int_mm"]
    assert (ref_rows["x reference"] == 1.0).all()
    for r in df.to_dict("records"):
        assert math.isclose(r["GMAC/s"], r["M"] * r["K"] * r["N"] / (r["ms"] / 1e3) / 1e9)


# ------------------------------------------------------------ GPU bench (no GPU needed)
def test_gpu_shapes_cover_both_models_and_squares():
    shapes = bench.gpu_shapes()
    got = {(s["M"], s["K"], s["N"]) for s in shapes}
    kn = {
        (1024, 2048),
        (1024, 1024),
        (2048, 1024),
        (1024, 3072),
        (3072, 1024),
        (2048, 2048),
        (2048, 6144),
        (6144, 2048),
    }  # 0.6B/1.7B (K, N), shared ones once
    assert got == {(m, k, n) for m in (1, 16, 128, 512, 4096) for k, n in kn} | {
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        (16384, 8192, 8192),
    }
    assert len(shapes) == len(got) == 43
    shared = next(s for s in shapes if (s["M"], s["K"], s["N"]) == (1, 2048, 1024))
    assert shared["layers"] == ["Qwen3-0.6B o_proj", "Qwen3-1.7B k_proj/v_proj"]


def test_tops_arithmetic():
    assert bench.tops(8192, 8192, 8192, 1000.0) == 2 * 8192**3 / 1000.0 / 1e6
    assert math.isclose(bench.tops(1, 2048, 6144, 36.0), 0.699, rel_tol=1e-3)  # issue's 0.7 TOPS


def _fake_result():
    def k(us, ok=True):
        return {"us": us, "kernel_us": us, "tops": None, "bits_ok": ok, "mismatches": 0 if ok else 3}

    rows = []
    for (m, kk, n), (t, i, p) in {
        (1, 2048, 6144): (30.0, 60.0, 35.0),
        (8192, 8192, 8192): (700.0, 2000.0, 850.0),
    }.items():
        r = {
            "M": m,
            "K": kk,
            "N": n,
            "layers": ["x"],
            "bits": {"rows_checked": m, "rows_total": m},
            "kernels": {"triton": k(t), "int_mm": k(i), "plain_triton": k(p, ok=m == 1)},
        }
        for v in r["kernels"].values():
            v["tops"] = bench.tops(m, kk, n, v["us"])
            v["fraction_of_peak"] = v["tops"] / 1979.0
        r["best_peer_tops"] = max(r["kernels"][x]["tops"] for x in ("int_mm", "plain_triton"))
        r["triton_vs_best_peer"] = r["kernels"]["triton"]["tops"] / r["best_peer_tops"]
        rows.append(r)
    host = {
        "shape": [1, 2048, 6144],
        "config": "ptr",
        "triton_host_us": 12.0,
        "bare_launch_host_us": 10.0,
        "triton_e2e_us": 30.0,
        "bare_launch_e2e_us": 29.0,
        "plain_triton_host_us": 20.0,
        "host_ratio": 1.2,
    }
    return {
        "environment": {"device": "NVIDIA H200", "torch": "t", "triton": "3.6"},
        "peak_tops": 1979.0,
        "peak_tbs": 4.8,
        "timing": "t",
        "bits_reference": "r",
        "rows": rows,
        "host_path": host,
        "tuning": {},
        "acceptance": bench.acceptance(rows, host),
    }


def test_acceptance_reads_the_targets_off_the_rows():
    acc = _fake_result()["acceptance"]
    assert acc["triton_ge_best_peer_everywhere"] is True
    assert acc["tops_8192"] == bench.tops(8192, 8192, 8192, 700.0)
    assert acc["tops_8192_ge_1400"] is True  # 2*8192^3 / 700 us = 1570.7 TOPS
    assert acc["us_m1_2048x6144"] == 30.0 and acc["us_m1_le_45"] is True
    assert acc["host_ratio_le_1_2"] is True
    assert acc["bits_identical_everywhere"] is False
    assert acc["bits_mismatch"] == ["8192x8192x8192:plain_triton"]


def test_gpu_reports_written(tmp_path):
    res = _fake_result()
    paths = bench.write_gpu_reports(res, tmp_path)
    assert paths["md"].parent == tmp_path / "nvidia-h200"
    md = paths["md"].read_text()
    assert "| 8192×8192×8192 | x | 700.0 µs / 1570.7 (79 %)" in md
    assert "MISMATCH plain_triton" in md
    import json

    assert json.loads(paths["json"].read_text())["rows"][0]["M"] == 1


def test_gpu_roofline_png(tmp_path):
    pytest.importorskip("matplotlib")  # the optional 'plots' extra
    paths = bench.write_gpu_reports(_fake_result(), tmp_path)
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


def test_the_bench_probes_and_precompiles_what_the_tuner_may_try(monkeypatch):
    """Gluon configurations reach the bench's hang probe and pre-compile exactly when
    the tuner may try them (``_gluon_enabled``); every label maps back to its
    configuration."""
    from conformance.kernels import builtin_triton as bt

    monkeypatch.setattr(bt, "_gluon_enabled", lambda dev: False)
    assert bench._tuned_configs(4096) == [c for c in bt.BUCKET_CONFIGS["large"] if c.label() not in bt._EXCLUDED]
    monkeypatch.setattr(bt, "_gluon_enabled", lambda dev: True)
    got = bench._tuned_configs(4096)
    assert [c for c in got if c.kernel == "gluon"] == list(bt.GLUON_CONFIGS["large"]) + list(
        bt.GLUON_WS_CONFIGS["large"]
    )
    assert [c for c in bench._tuned_configs(128) if c.kernel == "gluon"] == list(bt.GLUON_CONFIGS["small"])
    assert bench._tuned_configs(8) == list(bt.BUCKET_CONFIGS["decode"])  # no Gluon at decode
    for c in got:
        assert bench.config_by_label(c.label()) == c
    with pytest.raises(KeyError, match="no configuration of the built-in triton kernel"):
        bench.config_by_label("ptr 1x1x1 g1 sk1 w1 s1")


def test_the_bench_covers_the_ws_gluon_configs_unless_opted_out(monkeypatch):
    """The warp-specialised Gluon configurations reach the bench's hang probe and
    pre-compile (``_tuned_configs``) wherever ``_gluon_enabled`` holds, after the other
    Gluon ones, unless ``INT8CONF_TRITON_GLUON_WS=0``; their labels map back."""
    from conformance.kernels import builtin_triton as bt

    monkeypatch.delenv("INT8CONF_TRITON_GLUON_WS", raising=False)
    monkeypatch.setattr(bt, "_gluon_enabled", lambda dev: True)
    ws = list(bt.GLUON_WS_CONFIGS["large"])
    monkeypatch.setenv("INT8CONF_TRITON_GLUON_WS", "0")
    assert not any(c in ws for c in bench._tuned_configs(4096))
    monkeypatch.delenv("INT8CONF_TRITON_GLUON_WS")
    got = bench._tuned_configs(4096)
    assert got[-len(ws) :] == ws
    assert [c for c in got if c.kernel == "gluon" and not c.warp_spec] == list(bt.GLUON_CONFIGS["large"])
    assert not any(c in ws for c in bench._tuned_configs(128))  # large bucket only
    for c in ws:
        assert bench.config_by_label(c.label()) == c
    monkeypatch.setattr(bt, "_gluon_enabled", lambda dev: False)
    assert not any(c in ws for c in bench._tuned_configs(4096))


# ------------------------------------------------------------ the bench command line
def _bench_help() -> str:
    from conformance.cli import _subparsers, build_parser

    return " ".join(_subparsers(build_parser())["bench"].format_help().split())


def test_bench_help_shows_defaults_and_what_quick_means_with_gpu():
    """New-user pass: ``--quick`` was described for the CPU benchmark only, and the
    defaults of ``--reps`` / ``--precompile-workers`` were not shown."""
    text = _bench_help()
    assert "with --gpu three shapes: 1x2048x6144 and 512x2048x6144 (Qwen3-1.7B gate/up) and 4096^3" in text
    assert len(bench.gpu_shapes(quick=True)) == 3
    assert "at least 1; default 3)" in text
    assert "(0 = no pre-compile; the hang probe still runs; default 8)" in text
    assert "--gpu and --main-job only: report root (default int8conf-reports/bench)" in text  # never a committed folder


@pytest.mark.parametrize(
    "argv, named, mode",
    [
        (
            ["--quick", "--extra-kernel", "nosuch:fn", "--out", "/tmp/x"],
            "--out, --extra-kernel",
            "option(s) of the GPU benchmark (bench --gpu)",
        ),
        (["--out", "somewhere"], "--out", "option(s) of the GPU benchmark (bench --gpu)"),
        (["--precompile-workers", "0"], "--precompile-workers", "option(s) of the GPU benchmark (bench --gpu)"),
        (["--extra-kernel", "cpu"], "--extra-kernel", "option(s) of the GPU benchmark (bench --gpu)"),
        (["--gpu", "--kernel", "cpu"], "--kernel", "option(s) of the CPU benchmark (bench without --gpu)"),
        (["--gpu", "--reps", "3"], "--reps", "option(s) of the CPU benchmark (bench without --gpu)"),
        (["--gpu", "--json", "r.json"], "--json", "option(s) of the CPU benchmark (bench without --gpu)"),
        (["--gpu", "--no-interpreter"], "--no-interpreter", "option(s) of the CPU benchmark (bench without --gpu)"),
    ],
)
def test_bench_refuses_the_other_modes_options_before_any_work(argv, named, mode, monkeypatch, capsys, tmp_path):
    """An option of the other mode was silently ignored (``bench --quick --extra-kernel
    nosuch:fn`` exited 0): now one usage line (exit 2) naming it and its mode, before any
    timing, kernel lookup or CUDA check (this machine may have no GPU)."""
    from conformance.cli import main

    def no_work(*a, **k):
        raise AssertionError("work started")

    monkeypatch.setattr(bench, "run_bench", no_work)
    monkeypatch.setattr(bench, "run_gpu_bench", no_work)
    monkeypatch.chdir(tmp_path)
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    prefix = "int8conf: error: bench --gpu: " if "--gpu" in argv else "int8conf: error: bench: "
    assert len(err) == 1 and err[0].startswith(prefix + named + ": " + mode), err
    assert not (tmp_path / "r.json").exists()


def test_bench_gpu_options_reach_the_gpu_run(monkeypatch):
    """Without options, ``--gpu`` runs with 8 pre-compile workers and the probe on;
    ``--precompile-workers 0`` keeps the probe."""
    from conformance.cli import main
    from conformance.commands import bench as cmd

    seen = []

    class Stop(BaseException):  # not an Exception: the CLI turns those into exit 4 (an internal error)
        pass

    def fake(shapes, **kw):
        seen.append((len(shapes), kw))
        raise Stop

    monkeypatch.setattr(cmd, "_cuda", lambda: True)
    monkeypatch.setattr(bench, "run_gpu_bench", fake)
    for argv in (["--gpu", "--quick"], ["--gpu", "--precompile-workers", "0"]):
        with pytest.raises(Stop):
            main(["bench", *argv])
    assert seen == [
        (3, {"extra_kernels": (), "precompile_workers": 8, "probe": True}),
        (43, {"extra_kernels": (), "precompile_workers": 0, "probe": True}),
    ]


@pytest.mark.parametrize("workers", [0, 3])
def test_the_hang_probe_runs_without_precompile_workers(workers, monkeypatch):
    """``--precompile-workers 0`` used to switch the TMA/Gluon hang probe off as well;
    the probe protects the in-process tuner from a hanging candidate, so it runs
    whatever the worker count (``probe=False`` is the one way to skip it)."""
    calls = []

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench, "environment", lambda: {"device": "NVIDIA H200"})
    monkeypatch.setattr(bench, "probe_configs", lambda log=print: calls.append("probe") or {})
    monkeypatch.setattr(bench, "precompile", lambda shapes, w: calls.append(f"precompile {w}") or 1.0)
    monkeypatch.setattr(bench, "plain_triton_gemm", stop)  # the first step after them
    shapes = bench.gpu_shapes(quick=True)
    with pytest.raises(Stop):
        bench.run_gpu_bench(shapes, precompile_workers=workers, log=lambda *_: None)
    assert calls == ["probe"] + ([f"precompile {workers}"] if workers else [])
    calls.clear()
    with pytest.raises(Stop):
        bench.run_gpu_bench(shapes, precompile_workers=workers, probe=False, log=lambda *_: None)
    assert calls == ([f"precompile {workers}"] if workers else [])


def test_bench_times_a_named_or_queried_user_kernel(monkeypatch, tmp_path, capsys):
    """New-user pass 2026-12-02: ``bench --kernel mod:fn`` re-resolved the kernel by
    its declared ``name=`` ("unknown kernel") or lost its ``?contract=`` query
    ("declares no epilogue contract"); the resolved specs now reach run_bench."""
    from conformance.cli import main
    from conformance.kernels.spec import KernelSpec

    (tmp_path / "bk_user.py").write_text(
        "from conformance.kernels.loader import declare\n"
        "from conformance.kernels.registry import get_kernel\n\n"
        "@declare(contract='cutlass', name='bk_named', devices=('cpu',))\n"
        "def named(a, b, scale_a, scale_b, out_dtype=None, bias=None):\n"
        "    return get_kernel('cpu').scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)\n\n"
        "def plain(a, b, scale_a, scale_b, out_dtype=None, bias=None):\n"
        "    return get_kernel('cpu').scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def fake_run_bench(kernels, **kw):
        seen.append(kernels)
        return []

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    monkeypatch.setattr(bench, "render", lambda *a, **k: None)
    for name, want in (
        ("bk_user:named", "bk_named"),
        ("bk_user:plain?contract=cutlass", "bk_user:plain?contract=cutlass"),
    ):
        assert main(["bench", "--kernel", name, "--quick"]) == 0, capsys.readouterr().err
        (spec,) = seen[-1]
        assert isinstance(spec, KernelSpec) and spec.name == want
    sys.modules.pop("bk_user", None)


def test_bench_json_that_is_a_directory_is_refused_before_timing(monkeypatch, tmp_path, capsys):
    """New-user pass 2026-12-02: ``--json <a directory>`` ran the whole benchmark, then
    failed on its temp file's rename."""
    from conformance.cli import main

    def no_work(*a, **k):
        raise AssertionError("work started")

    monkeypatch.setattr(bench, "run_bench", no_work)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    for target, why in (
        (tmp_path / "adir", "adir is a directory, not a file"),
        (tmp_path / "afile" / "r.json", "exists and is not a directory"),
        ("", "'.': give the path of a file"),
    ):
        assert main(["bench", "--kernel", "cpu", "--quick", "--json", str(target)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("int8conf: error: --json ") and why in err[0]


def test_unknown_bench_option_lists_each_known_option_once(capsys):
    """New-user pass 2026-12-02: the list read "--help, --help, -h, -h"."""
    from conformance.cli import build_parser, unknown_options

    lines = unknown_options(build_parser(), ["bench", "--zzzz"])
    assert len(lines) == 1 and lines[0].count("--help") <= 1
