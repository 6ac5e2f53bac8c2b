"""Where the suite's kernel calls run. :class:`Containment`: every call of one kernel's suite (its fixed cases, the
property test's examples, C9, C11, C7, E1) in a child process forked from this one
(:class:`conformance.runtime.pool.IsolatedKernel`), so a kernel that kills its process (SIGSEGV, abort) or hangs
costs only that case: it gets a ``crash`` / ``timeout`` CaseResult (``suite.evaluate.crashed_case``) with the
signal, the child's ``faulthandler`` stack and a reproducer (``runtime.repro.save_reproducer``), a fresh child
takes the next request, and the run goes on. :func:`evaluate_in_workers`: the fixed cases spread over ``jobs``
such children (``int8conf check --jobs``), threads handing case indices to idle ones; each answers with the
CaseResult the in-process plan computes. A case whose child erred in the harness (not the kernel) is left for
the in-process plan. :data:`SUITE_REQUESTS`: what a kernel's child answers (for the suite, the gate and the
scoreboard), the request handlers handed to the pool."""

from __future__ import annotations

import os
import queue
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, cast

from conformance.cases import case_id
from conformance.checks.fp8_accumulator import check_fp8_accumulator
from conformance.checks.result import CHECK_NAMES, CheckResult, Verdict
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import pick_device
from conformance.kernels.spec import KernelSpec
from conformance.runtime.forking import FORK_GATE, start_method
from conformance.runtime.pool import BAD_CUDA_FORK, CRASHED, OK, TIMED_OUT, IsolatedKernel, KernelRef, Outcome, Served
from conformance.runtime.repro import reproducer_dirname, save_reproducer
from conformance.runtime.threads import available_cores
from conformance.suite.evaluate import (
    CRASH,
    TIMEOUT,
    CaseResult,
    check_error,
    crash_line,
    crashed_case,
    evaluate_case,
    evaluate_fixed,
)
from conformance.suite.plan import SERVING_CHECKS, run_kernel_check, run_model_check
from faults.inject import injection_of, wrapped_kernel
from reference.errors import Int8confError, first_line
from reference.operands import GemmOperands

#: default seconds one kernel call step (a case, a property example, C9, C11, C13-C15) may take before its child is killed
CASE_TIMEOUT_S = 600.0
#: the hang budget: once a case hung, each later case or example may take min(timeout, max(HANG_FLOOR_S, HANG_FACTOR x
#: the slowest one answered)): a kernel hanging on many cases costs minutes, not --timeout each (its verdict is
#: FAIL from the first hang on, so a slow case cut short changes no verdict, only that case's evidence)
HANG_FLOOR_S, HANG_FACTOR = 60.0, 20.0
#: the kernel-level checks a step of :data:`CASE_TIMEOUT_S` (``--timeout``) bounds; the others (C7, E1: whole-model
#: replays) get at least :data:`MODEL_CHECK_TIMEOUT_S`
SHORT_CHECKS = ("C9", "C11", "C13", "C14", "C15")


def kernel_ref(spec) -> Optional[KernelRef]:
    """A name a fresh process resolves to ``spec`` (its import path, else its registry name), for a reproducer's
    ``command.sh``; a fault-injected kernel no name resolves to: its clean kernel's name with the injection; None
    when no name resolves to it here (an in-memory kernel)."""
    origin = str(getattr(spec, "origin", "") or "")
    if origin.startswith("module:"):
        return KernelRef(origin[len("module:") :])
    try:
        get_kernel(spec.name)
    except Int8confError:
        inner, injection = wrapped_kernel(spec), injection_of(spec)  # a fault-injected kernel by its clean name
        ref = None if inner is None or injection is None else kernel_ref(inner)
        return None if ref is None else KernelRef(ref.name, injection)
    return KernelRef(spec.name)


def outcome_record(oc: Outcome, timeout_s: float, where: str = "on this case") -> dict:
    """The crash / timeout record of a request's :class:`Outcome` (``CaseResult.crash``, ``crashed_case``'s
    ``record``): ``status`` (``crash`` / ``timeout``), ``signal``, ``exitcode``, ``timeout_s``, ``elapsed_s``, ``where``,
    ``error``, ``log_tail`` (the child's faulthandler stack) and ``line`` (``evaluate.crash_line``)."""
    rec: dict[str, Any] = {
        "status": CRASH if oc.kind == CRASHED else TIMEOUT,
        "signal": oc.signal,
        "exitcode": oc.exitcode,
        "timeout_s": timeout_s,
        "elapsed_s": round(oc.elapsed_s, 3),
        "where": where,
        "error": oc.error,
        "log_tail": list(oc.log_tail),
    }
    rec["line"] = crash_line(rec)
    return rec


def containment_ok() -> Optional[str]:
    """None when the suite's kernel calls can run in forked children here, else why not (one line)."""
    if start_method() != "fork":
        return "this process initialized CUDA (or has no fork): a child could not inherit the kernel"
    return None


class Containment:
    """One kernel's suite (``state``: a ``plan.SuiteState``) calling its kernel in forked children (module
    docstring). ``timeout_s``: seconds a case, a property example, C9 or C11 may take (C7 / E1: at least
    :data:`MODEL_CHECK_TIMEOUT_S`); ``repro_dir``: reproducers go to ``<repro_dir>/<case>/`` (None: none saved).
    ``records``: every crash / timeout so far (the record a CaseResult's ``crash`` or a check's
    ``evidence["crash"]`` holds). Close it (context manager) to stop the child."""

    def __init__(self, state, timeout_s: float = CASE_TIMEOUT_S, repro_dir=None):
        self.state, self.timeout_s = state, float(timeout_s)
        self.repro_dir = None if repro_dir is None else Path(repro_dir)
        self.ref = kernel_ref(state.spec)
        self.records: list = []
        self.hangs, self.slowest_s = 0, 0.0  # the hang budget's inputs (:meth:`case_timeout`)
        self._logs = tempfile.mkdtemp(prefix="int8conf-contained-")
        self._iso: Optional[IsolatedKernel] = None
        self._lock = threading.Lock()
        #: why a later call ran in this process (this process initialized CUDA since: a child could not use it)
        self.uncontained: Optional[str] = None
        if containment_ok() is None and (child := self._child()) is not None:
            child.start()  # forked now, before this process may initialize CUDA for the cases' references

    def isolated(self, logs: Optional[str] = None, cases=None) -> IsolatedKernel:
        """A new IsolatedKernel of this kernel (fork; pairwise with the state's ``against``)."""
        st = self.state
        cases = st.cases if cases is None else cases
        return IsolatedKernel(
            st.spec,
            cases,
            self.timeout_s,
            logs or self._logs,
            device=st.device,
            method="fork",
            against=st.against,
            handlers=SUITE_REQUESTS,
        )

    def _child(self) -> Optional[IsolatedKernel]:
        """The running child, else a new one; None when this process can no longer fork one that may use the
        kernel (:func:`containment_ok`: CUDA initialized here since): the call then runs here, named in
        ``uncontained``."""
        if self._iso is None or not self._iso.running:
            why = containment_ok()
            if why is not None:
                self.uncontained = why
                return None
            if self._iso is None:
                self._iso = self.isolated()
        return self._iso

    def case_timeout(self) -> float:
        """Seconds the next case or property example may take: ``timeout_s`` until one hung, then the hang budget
        (:data:`HANG_FLOOR_S`)."""
        with self._lock:
            if not self.hangs:
                return self.timeout_s
            return min(self.timeout_s, max(HANG_FLOOR_S, HANG_FACTOR * self.slowest_s))

    def observe(self, oc: Outcome) -> None:
        """Count a case's or example's outcome into the hang budget (a hang; the slowest answer)."""
        with self._lock:
            if oc.kind == TIMED_OUT:
                self.hangs += 1
            elif oc.kind == OK:
                self.slowest_s = max(self.slowest_s, oc.elapsed_s)

    def notes(self) -> list[str]:
        """The report's notes on how the calls were contained: those that ran in this process, the hang budget
        when it cut the later cases' time."""
        out = []
        if self.uncontained:
            out.append(f"after this process initialized CUDA the kernel ran in it (not contained): {self.uncontained}")
        t = self.case_timeout()
        if t < self.timeout_s:
            out.append(
                f"hang budget: after the first case that hung (--timeout {self.timeout_s:g} s) each later case had "
                f"{t:g} s (max({HANG_FLOOR_S:g} s, {HANG_FACTOR:g} x the slowest case answered, {self.slowest_s:.2f} s))"
            )
        return out

    def request_case(self, iso: IsolatedKernel, ops, kind: str, arg, source: Optional[str] = None):
        """``iso.request(kind, arg)`` under the hang budget; the CaseResult of ``ops`` (``case_result``)."""
        limit = self.case_timeout()
        oc = iso.request(kind, arg, limit)
        self.observe(oc)
        return self.case_result(ops, oc, source, limit)

    def record(self, oc: Outcome, ops=None, where: str = "on this case", timeout_s: Optional[float] = None) -> dict:
        """The crash / timeout record of ``oc``; with ``ops`` and a ``repro_dir``, the case's reproducer is saved
        and named in it (``repro``)."""
        rec = outcome_record(oc, self.timeout_s if timeout_s is None else timeout_s, where)
        if ops is not None:
            rec["case"] = case_id(ops)
            if self.repro_dir is not None:
                ref = None if self.ref is None else self.ref.to_dict()
                d = save_reproducer(self.repro_dir / reproducer_dirname(rec["case"]), ops, ref, rec["case"], rec)
                rec["repro"] = str(d)
        with self._lock:
            self.records.append(rec)
        return rec

    def case_result(
        self, ops, oc: Outcome, source: Optional[str] = None, timeout_s: Optional[float] = None
    ) -> Optional[CaseResult]:
        """The CaseResult of a request about ``ops`` (``timeout_s``: the limit it ran under): the child's answer, a
        crashed case (crash / timeout), or None when the child erred in the harness."""
        if oc.kind == OK:
            return cast(CaseResult, oc.value)  # the answer of a case request (suite.requests)
        if oc.kind not in (CRASHED, TIMED_OUT):
            if oc.error == BAD_CUDA_FORK:
                self.uncontained = BAD_CUDA_FORK
            return None
        return crashed_case(self.state.spec, ops, self.record(oc, ops, timeout_s=timeout_s), source)

    def evaluate(self, index: int) -> CaseResult:
        """Fixed case ``index`` (``evaluate.evaluate_fixed``) in the child."""
        st = self.state
        ops = st.cases[index]
        iso = self._child()
        cr = None if iso is None else self.request_case(iso, ops, "evaluate", index)
        return cr if cr is not None else evaluate_fixed(st.spec, ops, st.device, st.against, st.ref_device)

    def evaluate_operands(self, spec, ops, device=None, source=None) -> CaseResult:
        """``evaluate_case(spec, ops, ...)`` of operands sent to the child (a property example)."""
        iso = self._child()
        cr = None if iso is None else self.request_case(iso, ops, "operands", ops, source)
        return cr if cr is not None else evaluate_case(spec, ops, device=device, source=source)

    def check_timeout(self, check_id: str) -> float:
        """Seconds kernel-level check ``check_id`` may take (class docstring)."""
        return self.timeout_s if check_id in SHORT_CHECKS else max(self.timeout_s, MODEL_CHECK_TIMEOUT_S)

    def check_result(self, check_id: str, oc: Outcome) -> CheckResult:
        """The CheckResult of a kernel-level check's request: the child's answer, else a kernel failure naming
        the crash / timeout (evidence ``crash``, ``failure_kind`` its status), or a harness failure."""
        if oc.kind == OK:
            return cast(CheckResult, oc.value)  # the answer of a check request (suite.requests)
        if oc.kind not in (CRASHED, TIMED_OUT):
            return check_error(check_id, RuntimeError(oc.error))
        rec = self.record(oc, where=f"during {check_id}", timeout_s=self.check_timeout(check_id))
        ev = {"kernel_error": rec["line"], "problem_kind": rec["status"], "failure_kind": rec["status"], "crash": rec}
        return CheckResult(
            check_id, CHECK_NAMES[check_id], Verdict.FAIL, f"kernel failed ({rec['status']}): {rec['line']}", ev
        )

    def check(self, check_id: str) -> CheckResult:
        """Kernel-level check ``check_id`` (``plan.run_kernel_check``) in the child."""
        iso = self._child()
        oc = None if iso is None else iso.request("check", check_id, self.check_timeout(check_id))
        if oc is not None and oc.error == BAD_CUDA_FORK:
            self.uncontained, oc = BAD_CUDA_FORK, None
        if oc is None:
            st = self.state
            return run_kernel_check(check_id, st.spec, st.cases, st.device)
        return self.check_result(check_id, oc)

    def close(self) -> None:
        """Stop the child; remove its logs."""
        if self._iso is not None:
            self._iso.close()
            self._iso = None
        shutil.rmtree(self._logs, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def default_jobs(device: Optional[str]) -> int:
    """Workers when ``--jobs`` is not given: one per core, at most 8 (CPU), 6 on a GPU (the cases' CPU side)."""
    return max(1, min(available_cores(), 6 if (device or "").startswith("cuda") else 8))


def parallel_ok(state) -> Optional[str]:
    """None when ``state``'s fixed cases can run in forked workers, else why not (one line)."""
    if state.against is not None:
        return "pairwise comparisons (--against) run in-process"
    if start_method() != "fork":
        return "this process initialized CUDA (or has no fork): workers could not inherit the kernel"
    return None


def evaluate_in_workers(
    state,
    jobs: int,
    say: Callable[[str], None] = lambda s: None,
    after_fork: Optional[Callable[[], object]] = None,
    contained: Optional[Containment] = None,
    running: Optional[set] = None,
) -> int:
    """Fill ``state.results`` for the fixed cases not yet evaluated, ``jobs`` workers at a time; returns how many
    cases the workers answered (the rest stay for the in-process plan). ``contained``: a crashed or hung case is
    recorded by it (a ``crash`` / ``timeout`` CaseResult; the worker's next case gets a fresh child), else such a
    case and that worker's next ones are left for the in-process plan. ``after_fork``: called once every worker
    has started, while they work (this process is idle then). ``running``: holds the ids of the cases in flight
    (a stopped run names them)."""
    running = set() if running is None else running
    todo = [i for i in range(len(state.cases)) if i not in state.results]
    jobs = min(jobs, len(todo))
    if jobs < 2:
        return 0
    say(f"{state.spec.name}: {len(todo)} fixed cases in {jobs} worker processes")
    work: queue.SimpleQueue = queue.SimpleQueue()
    for i in todo:
        work.put(i)
    answered = [0] * jobs
    lock = threading.Lock()
    started = threading.Semaphore(0)
    stop = threading.Event()
    handed_back: list = []  # why a worker left its cases to the in-process plan (its request's one line)
    isolated: list = []
    timeout_s = contained.timeout_s if contained is not None else CASE_TIMEOUT_S

    def serve(w: int, logs: str) -> None:
        iso = IsolatedKernel(
            state.spec, state.cases, timeout_s, logs, device=state.device, method="fork", handlers=SUITE_REQUESTS
        )
        with iso:
            with lock:
                isolated.append(iso)
            try:
                iso.start()
            finally:
                started.release()
            while not stop.is_set():
                try:
                    i = work.get_nowait()
                except queue.Empty:
                    return
                cid = case_id(state.cases[i])
                running.add(cid)
                limit = timeout_s if contained is None else contained.case_timeout()
                oc = iso.request("evaluate", i, limit)
                running.discard(cid)
                if stop.is_set():
                    return  # killed by an interrupt: not this case's crash
                cr = cast(CaseResult, oc.value) if oc.kind == OK else None
                if contained is not None:
                    contained.observe(oc)
                    cr = cr if cr is not None else contained.case_result(state.cases[i], oc, timeout_s=limit)
                if cr is None:  # this case and this worker's next ones fall back to the in-process plan
                    handed_back.append(outcome_line(oc))
                    return
                with lock:
                    state.results[i] = cr
                    answered[w] += 1
                    say(f"[{len(state.results)}/{len(state.cases)}] {cr.case}: {cr.verdict}")

    with tempfile.TemporaryDirectory(prefix="int8conf-workers-") as logs:
        threads = [threading.Thread(target=serve, args=(w, logs), daemon=True) for w in range(jobs)]
        for t in threads:
            t.start()
        for _ in threads:
            started.acquire()
        try:
            if after_fork is not None:
                after_fork()
            for t in threads:
                t.join()
        except BaseException:  # noqa: BLE001 -- cleanup then re-raise: no serving thread may outlive this call inside a torch unpickle
            stop.set()
            with lock:
                for iso in isolated:
                    iso.kill()
            for t in threads:
                t.join()
            raise
    if handed_back:  # said: on a GPU this was silent while every case ran here, uncontained
        left = len(todo) - sum(answered)
        say(f"{state.spec.name}: {left} fixed cases run in this process: a worker gave no result ({handed_back[0]})")
    return sum(answered)


#: the interpreter's thread switch interval (seconds) while a background import runs (Python's default: 0.005)
IMPORT_SWITCH_INTERVAL_S = 0.0005


def import_in_background(import_fn: Callable[[], object]) -> threading.Thread:
    """Run ``import_fn`` (an import of a heavy library a later step needs) on a daemon thread now, holding
    ``runtime.forking.FORK_GATE`` so that no worker is forked from this process meanwhile; the later step's own import then
    finds the module loaded (or waits on Python's import lock for it). An error is left for that step to raise."""

    def run() -> None:
        with FORK_GATE:
            switch = sys.getswitchinterval()
            # the threads that serve the workers wait for the GIL after every pipe read: hand it over sooner
            sys.setswitchinterval(min(switch, IMPORT_SWITCH_INTERVAL_S))
            try:
                import_fn()
            except Exception:  # noqa: BLE001 -- the step that needs the module reports it
                pass
            finally:
                sys.setswitchinterval(switch)

    t = threading.Thread(target=run, daemon=True, name="int8conf-import")
    t.start()
    return t


#: the CPU priority (``os.nice``) a serving checks' worker takes: below the suite's steps it runs beside
SERVING_NICE = 10
#: seconds a model-level check may take in a worker before the in-process plan runs it instead
MODEL_CHECK_TIMEOUT_S = 1800.0


def checks_in_worker(
    state, check_ids: Sequence[str], contained: Optional[Containment] = None
) -> dict[str, Callable[[], tuple[Optional[object], Optional[str]]]]:
    """Start the kernel-level checks ``check_ids`` (``plan.run_kernel_check``: E1 beside C7, C13-C15 beside the
    property test and the model checks) for ``state``'s kernel in one worker (a forked one started now, in the
    calling thread; a forkserver one by its first request, in the serving thread), then run one after the other
    there, beside the in-process plan; returns check id -> a callable that waits for ``(CheckResult or None, why
    None)``: with ``contained``, a crash or hang is that check's failure (``Containment.check_result``; the checks
    after it give None); else None when the worker crashed, hung or erred, or the child cannot use CUDA (forked from
    a process that had initialized it: ``BAD_CUDA_FORK``), ``why`` the worker's one line. The serving checks
    (``plan.SERVING_CHECKS``) of a kernel a fresh interpreter resolves (:func:`kernel_ref`) run in a forkserver child
    (no CUDA or Triton state inherited); the others in a forked one. Returns {} (nothing started) where this process
    cannot fork a CUDA-capable child (``runtime.forking.start_method``: CUDA already initialized here). On None or
    {} the caller runs the check in-process."""
    ref = kernel_ref(state.spec) if set(check_ids) <= set(SERVING_CHECKS) else None
    if ref is None and start_method() != "fork":
        return {}
    box: dict = {}
    why: dict = {}
    done = {cid: threading.Event() for cid in check_ids}

    def timeout(cid: str) -> float:
        """Seconds check ``cid`` may take in the worker (``Containment.check_timeout``, else MODEL_CHECK_TIMEOUT_S)."""
        return contained.check_timeout(cid) if contained is not None else MODEL_CHECK_TIMEOUT_S

    logs = tempfile.TemporaryDirectory(prefix="int8conf-workers-")
    limit = max(timeout(c) for c in check_ids)
    kernel, method = (ref, "forkserver") if ref is not None else (state.spec, "fork")
    iso = IsolatedKernel(kernel, [], limit, logs.name, device=state.device, method=method, handlers=SUITE_REQUESTS)
    if method == "fork":  # here, before the caller's next step can initialize CUDA in this process
        iso.start()
    # a forkserver child inherits nothing of this process: its first request starts it in the serving thread (the
    # server's start, torch preloaded, cost the cases' start 4.4 s on an H100 when it ran here)

    def serve() -> None:
        try:
            with logs, iso:
                for cid in check_ids:
                    oc = iso.request("check", cid, timeout(cid))
                    if oc.kind != OK:
                        why[cid] = outcome_line(oc)
                    if oc.error == BAD_CUDA_FORK:
                        break
                    box[cid] = (
                        contained.check_result(cid, oc)
                        if contained is not None
                        else (oc.value if oc.kind == OK else None)
                    )
                    done[cid].set()
                    if oc.kind != OK:
                        break
        except Exception as e:  # noqa: BLE001 -- a harness failure: the checks not answered run in-process
            for cid in check_ids:
                why.setdefault(cid, f"its worker's thread raised {type(e).__name__}: {first_line(e, None)}")
        finally:
            for cid, ev in done.items():
                if box.get(cid) is None and cid not in why:
                    why[cid] = "not run: an earlier check in its worker gave no result"
                ev.set()

    threading.Thread(target=serve, daemon=True).start()

    def waiter(cid: str) -> Callable[[], tuple[Optional[object], Optional[str]]]:
        def wait() -> tuple[Optional[object], Optional[str]]:
            done[cid].wait()
            return box.get(cid), why.get(cid)

        return wait

    return {cid: waiter(cid) for cid in check_ids}


def outcome_line(oc: Outcome) -> str:
    """One line for a request that gave no result: its error, else its kind and exit (signal)."""
    if oc.error:
        return oc.error.splitlines()[0][:300]
    return f"{oc.kind}" + (f" ({oc.signal or f'exit {oc.exitcode}'})" if oc.exitcode is not None else "")


# --- the child's side: the request handlers handed to runtime.pool.IsolatedKernel (SUITE_REQUESTS); each takes
# (spec, arg, served) (served: the pool's cases, device and pairwise kernel) and returns a picklable value


def case(spec: KernelSpec, index: int, served: Served) -> CaseResult:
    """Case ``index`` evaluated with its outputs kept (the gate, the scoreboard)."""
    return evaluate_case(spec, served.cases[index], device=served.device, keep_output=True)


def evaluate(spec: KernelSpec, index: int, served: Served) -> CaseResult:
    """The suite's own evaluation of fixed case ``index`` (pairwise with ``served.against``; outputs not kept)."""
    return evaluate_fixed(spec, served.cases[index], served.device, served.against)


def operands(spec: KernelSpec, ops: GemmOperands, served: Served) -> CaseResult:
    """A property example: its operands come with the request."""
    return evaluate_case(spec, ops, device=served.device, source="property")


def check(spec: KernelSpec, check_id: str, served: Served) -> CheckResult:
    """A kernel-level check over the pool's cases (``plan.run_kernel_check``: C9, ...); a serving check's worker
    first drops to :data:`SERVING_NICE` (it runs beside the suite's own steps, which keep the CPUs first)."""
    if check_id in SERVING_CHECKS and os.nice(0) < SERVING_NICE:
        os.nice(SERVING_NICE - os.nice(0))
    return run_kernel_check(check_id, spec, served.cases, served.device)


def accumulator(spec: KernelSpec, _arg: object, served: Served) -> CheckResult:
    """C11: an FP8 kernel's measured accumulator."""
    return check_fp8_accumulator(spec, device=served.device)


def model(spec: KernelSpec, check_id: str, served: Served) -> CheckResult:
    """A model-level check (C7, E1) on the device the kernel runs on."""
    return run_model_check(check_id, spec, device=pick_device(spec, served.device)[0])


#: request kind -> handler (``runtime.pool`` module docstring)
SUITE_REQUESTS: dict[str, Callable[..., object]] = {
    f.__name__: f for f in (case, evaluate, operands, check, accumulator, model)
}
