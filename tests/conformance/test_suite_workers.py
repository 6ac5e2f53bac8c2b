"""``run_suite(jobs=N)`` / ``int8conf check --jobs``: fixed cases answered by forked workers give the results
the in-process plan gives, and a case whose worker dies is answered in-process."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import subprocess
import sys
import threading

import pytest
import torch
from buggy_kernels import dies_in_workers, make_kernel

from conformance.cases import make_case
from conformance.kernels.loader import spec_from_object
from conformance.kernels.registry import get_kernel
from conformance.runtime.forking import FORK_GATE
from conformance.runtime.pool import BAD_CUDA_FORK, OK, IsolatedKernel, KernelRef, Served
from conformance.suite.plan import SuiteState, given_cases, run_kernel_check, run_model_check
from conformance.suite.run import run_suite
from conformance.suite.workers import (
    Containment,
    checks_in_worker,
    evaluate_in_workers,
    import_in_background,
    parallel_ok,
)
from reference.accumulate import exact_int_mm

KINDS = ("ordinary", "extreme", "pow2", "fp16_out", "m1", "tails")


def _cases():
    return [make_case(k, seed=s) for k in KINDS for s in (0, 1)]


def _state(spec, cases):
    return SuiteState(spec, cases, given_cases(cases), None, "cpu")


def _rows(res) -> list:
    drop = ("elapsed_s", "t_kernel_s")
    return [{k: v for k, v in cr.to_dict().items() if k not in drop} for cr in res.cases]


def test_workers_give_the_in_process_results_of_a_buggy_kernel():
    spec = make_kernel("order-bug", order="a_then_w")  # declares w_then_a: C8 fails on the tie cases
    cases = _cases()
    one = run_suite(_state(spec, cases), property_examples=0, model_checks=False, jobs=1)
    st = _state(spec, cases)
    assert parallel_ok(st) is None
    assert evaluate_in_workers(st, 2) == len(cases)
    two = run_suite(st, property_examples=0, model_checks=False, jobs=2)
    assert json.dumps(_rows(one), sort_keys=True) == json.dumps(_rows(two), sort_keys=True)
    assert [c.verdict for c in one.checks] == [c.verdict for c in two.checks]
    assert not one.conformant and one.overall == two.overall


def test_a_case_whose_worker_dies_is_answered_in_process():
    spec = spec_from_object(dies_in_workers, "dies", "test", {"contract": "cutlass"})
    cases = _cases()[:4]
    st = _state(spec, cases)
    assert evaluate_in_workers(st, 2) == 0 and not st.results
    res = run_suite(st, property_examples=0, model_checks=False, jobs=2)
    assert len(res.cases) == 4 and res.conformant


def test_pairwise_runs_in_process():
    spec = make_kernel("a", order=None)
    st = SuiteState(spec, _cases()[:2], given_cases([]), make_kernel("b"), "cpu")
    assert "in-process" in parallel_ok(st)


def _plain(r) -> str:
    d = r.to_dict()
    d["evidence"] = {k: v for k, v in d.get("evidence", {}).items() if not k.endswith("_s")}  # timings
    return json.dumps(d, sort_keys=True, default=str)


def test_e1_in_a_worker_gives_the_in_process_result_and_a_dead_worker_gives_none():
    """The suite runs E1 in a forked worker beside C7 (both engines' forwards at once on a CPU run); its
    CheckResult is the in-process one, and a worker that dies hands the check back (None)."""
    spec = make_kernel("e1-beside", acc_off_by_one=True)  # its int_mm adds 1 at [0, 0]: E1's hash differs
    want = run_model_check("E1", spec, device="cpu")
    got, why = checks_in_worker(_state(spec, []), ["E1"])["E1"]()
    assert got is not None and why is None and want.verdict == "fail" and _plain(got) == _plain(want)
    parent = os.getpid()

    def int_mm_dies_in_workers(a, b):
        if os.getpid() != parent:
            os._exit(3)
        return exact_int_mm(a, b).to(torch.int32)

    dies = dataclasses.replace(spec, name="e1-dies", int_mm=int_mm_dies_in_workers)
    got, why = checks_in_worker(_state(dies, []), ["E1"])["E1"]()
    assert got is None and why == "the kernel's process died during the request: exited with status 3"


def test_checks_beside_start_no_worker_where_cuda_is_initialized_and_hand_back_a_bad_cuda_fork(monkeypatch):
    """A process that initialized CUDA cannot fork a child that uses it: no worker is started (the caller runs the
    checks in-process), and a child that answers BAD_CUDA_FORK (CUDA initialized here after it was forked) hands
    each check back (None), never a failing check."""
    from conformance.runtime import pool
    from conformance.suite import workers

    spec = make_kernel("beside", order=None)
    monkeypatch.setattr(workers, "start_method", lambda: "spawn")
    assert checks_in_worker(_state(spec, []), ["E1", "C9"]) == {}
    monkeypatch.setattr(workers, "start_method", lambda: "fork")
    monkeypatch.setattr(pool, "_in_bad_cuda_fork", lambda: True)  # read in the forked child
    st = _state(spec, [])
    with Containment(st) as contained:
        got = checks_in_worker(st, ["E1", "C9"], contained)
        assert [got[c]() for c in ("E1", "C9")] == [
            (None, BAD_CUDA_FORK),
            (None, "not run: an earlier check in its worker gave no result"),
        ]


def test_after_fork_runs_once_every_worker_has_started():
    spec = make_kernel("plain", order=None)
    st = _state(spec, _cases()[:4])
    seen = []

    def after_fork():  # every worker's child exists by now, and no case can be lost to it
        seen.append(len(multiprocessing.active_children()))

    assert evaluate_in_workers(st, 2, after_fork=after_fork) == 4
    assert len(seen) == 1 and seen[0] >= 2


def test_no_worker_is_forked_while_a_background_import_holds_the_gate(tmp_path):
    entered, release = threading.Event(), threading.Event()

    def slow_import():
        entered.set()
        release.wait(60)

    t = import_in_background(slow_import)
    assert entered.wait(30) and FORK_GATE.locked()
    iso = IsolatedKernel(make_kernel("plain", order=None), [], 60, tmp_path, device="cpu", method="fork")
    starter = threading.Thread(target=iso.start)
    starter.start()
    starter.join(0.5)
    assert starter.is_alive() and not iso.running  # waiting on the gate, not forked
    release.set()
    t.join(30)
    starter.join(30)
    assert iso.running and not FORK_GATE.locked()
    assert iso.request("ping").kind == OK
    iso.close()


@pytest.mark.parametrize("named", [False, True], ids=["in-memory kernel: forked", "registry kernel: forkserver"])
def test_serving_checks_run_in_a_worker_after_the_cases_and_give_the_in_process_results(monkeypatch, named):
    """On CUDA the suite starts C13-C15 (graph capture, torch.compile) in one worker once every fixed case is
    answered (beside the property test and the model checks: their GPU and CPU work would slow the cases' workers)
    and reads their results at their steps (a forkserver child for a kernel a fresh interpreter resolves, else a
    forked one); forced here on the CPU, their results are the in-process ones and no check is handed back."""
    from conformance.suite import run as suite_run

    spec = get_kernel("cpu") if named else make_kernel("serving-beside", order=None)
    cases = _cases()[:2]
    one = run_suite(_state(spec, cases), property_examples=0, model_checks=False, jobs=1)
    monkeypatch.setattr(suite_run, "cuda_device", lambda spec, device: "cuda")
    answered = []  # fixed cases answered when the serving checks' worker is started

    def spy(state, *a, **kw):
        answered.append(len(state.results))
        return checks_in_worker(state, *a, **kw)

    monkeypatch.setattr(suite_run, "checks_in_worker", spy)
    said: list = []
    two = run_suite(_state(spec, cases), property_examples=0, model_checks=False, jobs=2, progress=said.append)
    assert answered == [len(cases)]
    assert f"{spec.name}: C13, C14, C15 in a worker process beside the property test and the model checks" in said
    assert [
        f"{spec.name}: {c} {n} (its worker's result)" in said
        for c, n in (("C13", "graph_replay"), ("C14", "compile"), ("C15", "streams_devices"))
    ] == [True] * 3
    by = {c.check_id: _plain(c) for c in one.checks}
    assert {c.check_id: _plain(c) for c in two.checks if c.check_id in ("C13", "C14", "C15")} == {
        cid: by[cid] for cid in ("C13", "C14", "C15")
    }
    assert not [line for line in said if "gave no result" in line] and not [n for n in two.notes if "gave no" in n]


def test_serving_checks_of_a_named_kernel_run_in_a_forkserver_child_even_where_this_process_cannot_fork(monkeypatch):
    """C13-C15 of a kernel a fresh interpreter resolves (a registry name) run in a forkserver child, which inherits
    no CUDA or Triton state: started even where this process initialized CUDA, with the in-process results."""
    from conformance.runtime import pool
    from conformance.suite import workers

    spec = get_kernel("cpu")
    monkeypatch.setattr(workers, "start_method", lambda: "spawn")  # as after CUDA was initialized here
    methods = []
    real = pool.IsolatedKernel.__init__

    def spy(self, kernel, *a, **kw):
        methods.append((kernel, kw.get("method")))
        real(self, kernel, *a, **kw)

    monkeypatch.setattr(pool.IsolatedKernel, "__init__", spy)
    got = checks_in_worker(_state(spec, []), ["C13", "C15"])
    assert methods == [(KernelRef("cpu"), "forkserver")]
    want = {cid: _plain(run_kernel_check(cid, spec, [], "cpu")) for cid in ("C13", "C15")}
    assert {cid: (_plain(r), why) for cid, (r, why) in ((c, got[c]()) for c in ("C13", "C15"))} == {
        cid: (want[cid], None) for cid in ("C13", "C15")
    }
    assert checks_in_worker(_state(spec, []), ["E1"]) == {}  # E1 beside C7: a forked child only


def test_a_serving_check_s_worker_drops_to_serving_nice_and_a_c9_one_does_not():
    """The worker request ``check`` lowers its process to ``SERVING_NICE`` for C13-C15 (they run beside the suite),
    not for another check; read in forked children (niceness cannot be raised back)."""
    from conformance.suite import workers

    def nice_after(check_id: str) -> int:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: one request, its niceness to the pipe
            code = 1
            try:
                torch.set_num_threads(1)  # the parent's OpenMP pool deadlocks after fork (as runtime.pool does)
                workers.check(get_kernel("cpu"), check_id, Served(cases=[], device="cpu"))
                os.write(w, str(os.nice(0)).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r) as f:
            got = f.read()
        assert os.waitpid(pid, 0)[1] == 0
        return int(got)

    base = os.nice(0)
    assert (nice_after("C13"), nice_after("C9")) == (max(base, workers.SERVING_NICE), base)


def test_workers_that_cannot_use_cuda_say_the_cases_run_in_this_process(monkeypatch):
    """A worker whose child answers BAD_CUDA_FORK (forked after this process poisoned fork) hands its cases back,
    and the run says so on its progress line (it was silent: on a GPU every case ran in-process, uncontained)."""
    from conformance.runtime import pool

    monkeypatch.setattr(pool, "_in_bad_cuda_fork", lambda: True)  # read in the forked children
    st = _state(make_kernel("bad-fork", order=None), _cases()[:4])
    said: list = []
    assert evaluate_in_workers(st, 2, said.append) == 0 and not st.results
    assert said[-1] == f"bad-fork: 4 fixed cases run in this process: a worker gave no result ({BAD_CUDA_FORK})"


def test_importing_conformance_asks_torch_for_cuda_through_nvml_unless_told_otherwise():
    """``import conformance`` sets PYTORCH_NVML_BASED_CUDA_CHECK=1 (torch.cuda.is_available() then leaves fork
    usable for the workers) and keeps a value the user set."""
    code = "import os, conformance; print(os.environ['PYTORCH_NVML_BASED_CUDA_CHECK'])"
    for given, want in ((None, "1"), ("0", "0")):
        env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
        if given is not None:
            env["PYTORCH_NVML_BASED_CUDA_CHECK"] = given
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.stdout.strip() == want, r.stderr[-2000:]


def test_children_of_one_kernel_sharing_a_log_folder_write_their_own_logs(tmp_path):
    """The workers of one kernel share a log folder; their children's logs were named ``<label>.<n>.log``, so two
    children crashing at once wrote one file, their stacks interleaved (a CI run's segfault tail lost its frame)."""
    spec = make_kernel("shared-logs", order=None)
    isos = [IsolatedKernel(spec, [], 60, tmp_path, device="cpu", method="fork") for _ in range(2)]
    for iso in isos:
        iso.start()
    try:
        assert [iso.request("ping").kind for iso in isos] == [OK, OK]
        assert len(list(tmp_path.glob("*.log"))) == 2
    finally:
        for iso in isos:
            iso.close()
