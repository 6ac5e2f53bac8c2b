"""``int8conf replay DIR`` (issue 43 item 2): a saved reproducer re-judged by the suite's checks, the kernel in a
child process. Exit 1 when the named check fails again, 0 when it does not (another kernel on the same operands),
3 when the kernel crashed (the signal named, the interpreter alive), raised or could not be called, 2 with one line
on bad input; ``replay_command`` spells a command that does what it says."""

from __future__ import annotations

import json
import os
import shlex

import buggy_kernels
import pytest
import torch
from subprocesses import run_python

from conformance.cases.large_shapes import wide_n_case
from conformance.cli import main
from conformance.kernels.registry import get_kernel
from conformance.runtime.pool import KernelRef
from conformance.runtime.repro import load_reproducer, save_reproducer
from conformance.suite.replay import replay_command
from conformance.suite.workers import kernel_ref
from conformance.triage.reshape import at_shape
from faults.inject import inject_injection
from faults.spec import make_injection
from reference.operands import GemmOperands, storage_span

#: an M = 1 case whose two scale orders round to different bf16 bits (0x3C31 / 0x3C32)
DECODE_BUG = "buggy_kernels:decode_path_order"


def _repro(path, ops, ref, check=None):
    what = {"status": "fail", "check": check} if check else {"status": "crash", "signal": "SIGSEGV"}
    return save_reproducer(path, ops, None if ref is None else ref.to_dict(), ops.name, what)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("int8conf: error: "), err
    return err.strip()


def test_a_buggy_kernels_failing_case_replays_with_exit_1_naming_the_check(tmp_path):
    d = _repro(tmp_path / "order", buggy_kernels.order_case(), KernelRef(DECODE_BUG), "C8")
    r = run_python(["-m", "conformance.cli", "replay", d], cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"replay: {DECODE_BUG} on order (M,K,N=[1, 5, 1])"
    assert (
        lines[1].startswith("C8 declared_contract: fail - 1/1 elements differ")
        and "out 0x3C31 vs ref 0x3C32" in lines[1]
    )
    assert [ln.split(" ")[0] for ln in lines[1:-1]] == ["C8", "C1", "C2", "C3", "C4", "C5", "C6", "C10"]
    assert lines[-1] == "replay: C8 fails (exit 1)"


def test_the_triages_minimal_case_replays_failing_and_passes_with_a_correct_kernel(tmp_path, capsys):
    """The reproducer ``int8conf check``'s triage saves (``what_happened["check"]``: C8) of decode_path_order."""
    out = tmp_path / "r"
    quick = ["--no-model", "--no-captures", "--no-tile-edges", "--examples", "0", "--quiet"]
    assert main(["check", "--kernel", DECODE_BUG, *quick, "--out", str(out)]) == 1
    (d,) = (out / "decode_path_order" / "repro").glob("triage-C8-*")
    capsys.readouterr()
    assert main(["replay", str(d)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("C8 declared_contract: fail") and lines[-1] == "replay: C8 fails (exit 1)"
    assert main(["replay", str(d), "--kernel", "buggy_kernels:good_cutlass"]) == 0


def test_replay_triage_searches_where_a_saved_case_fails_on_demand(tmp_path, capsys):
    # any saved case: a wide-N case of bias_cache_wraps (N > 256 reads bias[n % 256]), searched on demand
    d = _repro(tmp_path / "wide", wide_n_case(1), KernelRef("buggy_kernels:bias_cache_wraps"), "C8")
    assert main(["replay", str(d), "--triage"]) == 1
    out = capsys.readouterr().out
    assert "replay: where C8 lives (case " in out and "N passes at 256, fails at 257" in out
    assert "passes with bias present -> absent" in out
    tri = json.loads((d / "triage" / "triage.json").read_text())
    assert tri["C8"]["boundaries"]["n"]["exact"] and tri["C8"]["budget"] == 24 and tri["C8"]["minimal"]["fails"]
    assert main(["replay", str(d), "--triage", "--kernel", "buggy_kernels:good_cutlass"]) == 0  # passes: no search
    assert "where C8 lives" not in capsys.readouterr().out


def test_a_call_triage_reproducer_replays_its_raise_as_exit_1(tmp_path, capsys):
    # triage of the CALL pseudo-check saves check "CALL": the kernel raising again is that check failing (exit 1)
    ref = KernelRef("buggy_kernels:raises_past_m16")
    d = _repro(tmp_path / "call", at_shape(buggy_kernels.tie_case(), m=17), ref, "CALL")
    assert main(["replay", str(d)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "replay: CALL fails (exit 1)"
    assert sum(line.startswith("CALL kernel_call: ") for line in out) == 1  # it was printed twice
    assert main(["replay", str(d), "--kernel", "buggy_kernels:good_cutlass"]) == 0


@pytest.mark.parametrize("kernel", ["buggy_kernels:good_cutlass", "cpu"])
def test_the_same_operands_with_a_correct_kernel_exit_0(tmp_path, capsys, kernel):
    d = _repro(tmp_path / "order", buggy_kernels.order_case(), KernelRef(DECODE_BUG), "C8")
    assert main(["replay", str(d), "--kernel", kernel]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("C8 declared_contract: pass") and out[-1] == "replay: C8 does not fail (exit 0)"


def test_a_segfaulting_kernel_gives_3_with_the_signal_not_a_dead_interpreter(tmp_path):
    """A crash reproducer as ``int8conf check`` writes it (no ``check`` key): K = HOSTILE_K segfaults."""
    ops = buggy_kernels.const_case(buggy_kernels.HOSTILE_K)
    d = _repro(tmp_path / "seg", ops, KernelRef("buggy_kernels:segfaulting_kernel"))
    r = run_python(["-m", "conformance.cli", "replay", d], cwd=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    crash = "the kernel's process died on this case (killed by SIGSEGV)"
    assert lines[1] == f"CALL kernel_call: fail - kernel failed (crash): {crash}"
    assert lines[-1] == f"replay: no verdict: {crash} (exit 3)"
    assert "segfaulting_kernel" in r.stderr  # the child's faulthandler stack names the kernel's frame


def test_no_valid_output_is_exit_1_with_the_interface_line_first(tmp_path, capsys):
    d = _repro(tmp_path / "order", buggy_kernels.order_case(), KernelRef(DECODE_BUG), "C8")
    assert main(["replay", str(d), "--kernel", "buggy_kernels:returns_none"]) == 1
    out = capsys.readouterr().out.splitlines()
    none = "kernel returned None, expected a torch.Tensor [1,1] torch.bfloat16"
    assert out[1] == f"IF interface: fail - interface: {none}"
    assert (
        out[2].startswith("C8 declared_contract: n/a")
        and out[-1] == f"replay: the kernel returned no valid output ({none}) (exit 1)"
    )


def test_a_kernel_that_raises_or_cannot_run_gives_3(tmp_path, capsys):
    a = torch.ones((17, 5), dtype=torch.int8)  # raises_past_m16 raises for M > 16
    ops = GemmOperands(a, a[:1].clone(), torch.ones(17), torch.ones(1), name="m17", meta={"source": "synthetic"})
    d = _repro(tmp_path / "m17", ops, KernelRef("buggy_kernels:raises_past_m16"), "C8")
    assert main(["replay", str(d)]) == 3
    assert capsys.readouterr().out.splitlines()[-1] == "replay: no verdict: RuntimeError: no tile for M=17 (exit 3)"
    d = _repro(tmp_path / "order", buggy_kernels.order_case(), KernelRef(DECODE_BUG), "C8")
    assert main(["replay", str(d), "--kernel", "buggy_kernels:declining_kernel"]) == 3  # K = 5, declares K % 8 == 0
    assert "not runnable here" in capsys.readouterr().out.splitlines()[-1]


def test_an_injected_kernel_replays_with_its_fault_and_the_spelled_command_does_the_same(tmp_path, capsys):
    """case.json's ref carries the injection; ``--kernel`` alone replaces it (no fault); ``replay_command``'s words
    parse back to the same kernel, fault and check."""
    ref = KernelRef("buggy_kernels:good_cutlass", make_injection("F4"))
    d = _repro(tmp_path / "inj", buggy_kernels.order_case(), ref, "C8")
    assert main(["replay", str(d)]) == 1
    assert capsys.readouterr().out.splitlines()[0].startswith("replay: buggy_kernels:good_cutlass+F4[all,seed=0] on")
    assert main(["replay", str(d), "--kernel", "buggy_kernels:good_cutlass"]) == 0
    cmd = replay_command(d, ref.to_dict(), "C8")
    assert (
        cmd == f"int8conf replay {shlex.quote(str(d))} --kernel buggy_kernels:good_cutlass --inject F4:all:0 --check C8"
    )
    capsys.readouterr()
    assert main(shlex.split(cmd)[1:]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "replay: C8 fails (exit 1)"


def test_replay_command_quotes_the_directory_and_names_a_missing_kernel():
    assert (
        replay_command("/r/it's here", {"name": "cpu", "fault": None})
        == "int8conf replay '/r/it'\"'\"'s here' --kernel cpu"
    )
    assert replay_command("/r/x", None, "C8") == "int8conf replay /r/x --kernel KERNEL --check C8"


def test_kernel_ref_names_an_injected_module_kernel_by_its_clean_name_and_fault():
    """Before: None (``good_cutlass+F4@all#s0`` resolves by no name), so its crash reproducers had no kernel."""
    inj = make_injection("F4", "1%", 7)
    spec = inject_injection(get_kernel("buggy_kernels:good_cutlass"), inj)
    assert kernel_ref(spec) == KernelRef("buggy_kernels:good_cutlass", inj)


@pytest.mark.parametrize(
    "args, line",
    [
        (["{tmp}/nowhere"], "int8conf: error: {tmp}/nowhere: no such reproducer directory"),
        (["{order}/case.json"], "int8conf: error: {order}/case.json: not a directory (a reproducer is one: "),
        # a device this machine lacks is bad input (exit 2), as under check and gate
        (["{order}", "--device", "cuda:7"], "int8conf: error: --device 'cuda:7': "),
        (["{tmp}"], "int8conf: error: {tmp}/case.json: missing (not a reproducer directory)"),
        (["{mem}"], "int8conf: error: this reproducer's kernel was in-memory (no name saved): name one with --kernel"),
        (
            ["{order}", "--check", "C9"],
            "int8conf: error: --check C9: not a per-case check of decode_path_order; a replay judges CALL, IF, C1, C2, C3, C4, C5, C6, "
            "C8, C10",
        ),
        (
            ["{order}", "--check", "C99"],
            "int8conf: error: --check C99: no such check; a replay judges CALL, IF, C1, C2, C3, C4, C5, C6, C8, C10",
        ),
        (["{order}", "--inject", "F99"], "int8conf: error: --inject 'F99': unknown fault 'F99'"),
        (["{order}", "--kernel", "nope"], "int8conf: error: unknown kernel 'nope'"),
    ],
)
def test_bad_input_is_exit_2_with_one_line(tmp_path, capsys, args, line):
    ops = buggy_kernels.order_case()
    where = {
        "tmp": str(tmp_path),
        "mem": str(_repro(tmp_path / "mem", ops, None, "C8")),
        "order": str(_repro(tmp_path / "order", ops, KernelRef(DECODE_BUG), "C8")),
    }
    assert main(["replay", *(a.format(**where) for a in args)]) == 2
    assert _one_error_line(capsys).startswith(line.format(**where))


def test_the_reproducer_s_command_names_each_pythonpath_entry_once(tmp_path, monkeypatch):
    here = str(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, "/opt/k", here, "", "/opt/k"]))
    d = _repro(tmp_path / "r", buggy_kernels.order_case(), KernelRef(DECODE_BUG), "C8")
    line = next(ln for ln in (d / "command.sh").read_text().splitlines() if ln.startswith("export PYTHONPATH="))
    assert line == f"export PYTHONPATH={here}{os.pathsep}/opt/k"


def _padded_column_major_case() -> GemmOperands:
    """M,K,N = 3,5,4: ``b`` the ``w.t()`` view of a [K, N + 3] buffer (leading stride 7), ``a`` a [:, :K] view of
    a [M, K + 2] buffer, seeded int8 values and padding."""
    g = torch.Generator().manual_seed(43)
    a = torch.randint(-128, 128, (3, 7), generator=g, dtype=torch.int8)[:, :5]
    b = torch.randint(-128, 128, (5, 7), generator=g, dtype=torch.int8)[:, :4].t()
    sa, sb = torch.full((3,), 0.0625), torch.full((4,), 0.125)
    return GemmOperands(a, b, sa, sb, None, torch.float32, "padded-colmajor", "pow2", {})


def test_a_reproducer_keeps_each_operand_s_layout_and_padding_bytes(tmp_path):
    """The file holds a strided operand's storage span: it loads with the strides and the padding it was saved with
    (contiguous copies hid a kernel that misreads a padded leading stride: its reproducer replayed passing)."""
    ops = _padded_column_major_case()
    d = _repro(tmp_path / "layout", ops, KernelRef("buggy_kernels:transposed_padded_b_misread"), "C8")
    got, info = load_reproducer(d)
    assert (got.a.stride(), got.b.stride()) == ((7, 1), (1, 7)) == (tuple(info["strides"]["a"]), ops.b.stride())
    for new, old in ((got.a, ops.a), (got.b, ops.b)):  # the values and the bytes between them
        assert torch.equal(new, old)
        span = storage_span(old)
        assert torch.equal(new.as_strided((span,), (1,)), old.as_strided((span,), (1,), old.storage_offset()))
    assert main(["replay", str(d)]) == 1  # the misread reproduces
    assert main(["replay", str(d), "--kernel", "buggy_kernels:good_cutlass"]) == 0
