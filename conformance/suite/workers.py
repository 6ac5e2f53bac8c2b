"""The suite's fixed cases spread over worker processes (``run_suite(jobs=N)``, ``int8conf check --jobs``): each
worker is a :class:`conformance.runtime.pool.IsolatedKernel` forked from this process (it inherits the kernel,
fault wrappers included, and the cases), and threads hand case indices to idle workers. A worker answers with
the same :class:`CaseResult` the in-process plan computes; a case whose worker crashed, hung or erred is left
for the in-process plan, which then reports it as a sequential run would. Speed only: no verdict is decided here."""

from __future__ import annotations

import queue
import sys
import tempfile
import threading
from typing import Callable, Optional

from conformance.runtime.forking import FORK_GATE, start_method
from conformance.runtime.pool import OK, IsolatedKernel
from conformance.runtime.threads import available_cores

#: seconds one case may take in a worker before it is handed back to the in-process plan
CASE_TIMEOUT_S = 600.0


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
    state, jobs: int, say: Callable[[str], None] = lambda s: None, after_fork: Optional[Callable[[], object]] = None
) -> int:
    """Fill ``state.results`` for the fixed cases not yet evaluated, ``jobs`` workers at a time; returns how many
    cases the workers answered (the rest stay for the in-process plan). ``after_fork``: called once every worker
    has started, while they work (this process is idle then)."""
    todo = [i for i in range(len(state.cases)) if i not in state.results]
    jobs = min(jobs, len(todo))
    if jobs < 2:
        return 0
    say(f"{state.spec.name}: {len(todo)} cases in {jobs} worker processes")
    work: queue.SimpleQueue = queue.SimpleQueue()
    for i in todo:
        work.put(i)
    answered = [0] * jobs
    lock = threading.Lock()
    started = threading.Semaphore(0)
    stop = threading.Event()
    isolated: list = []

    def serve(w: int, logs: str) -> None:
        with IsolatedKernel(state.spec, state.cases, CASE_TIMEOUT_S, logs, device=state.device, method="fork") as iso:
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
                oc = iso.request(("evaluate", i))
                if oc.kind != OK:
                    return  # this case and this worker's next ones fall back to the in-process plan
                with lock:
                    state.results[i] = oc.value
                    answered[w] += 1
                    say(f"[{len(state.results)}/{len(state.cases)}] {oc.value.case}: {oc.value.verdict}")

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
        except BaseException:  # interrupted: no serving thread may outlive this call inside a torch unpickle
            stop.set()
            with lock:
                for iso in isolated:
                    iso.kill()
            for t in threads:
                t.join()
            raise
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


#: seconds a model-level check may take in a worker before the in-process plan runs it instead
MODEL_CHECK_TIMEOUT_S = 1800.0


def model_check_in_worker(state, check_id: str) -> Callable[[], Optional[object]]:
    """Start the model-level check ``check_id`` (E1, C7) for ``state``'s kernel in a forked worker now, so it runs
    beside the in-process plan's next step; returns a callable that waits for its CheckResult, or None when the
    worker crashed, hung or erred (the caller then runs the check in-process). Speed only, as above."""
    box: dict = {}

    def serve() -> None:
        with tempfile.TemporaryDirectory(prefix="int8conf-workers-") as logs:
            with IsolatedKernel(state.spec, [], MODEL_CHECK_TIMEOUT_S, logs, device=state.device, method="fork") as iso:
                oc = iso.run_model(check_id)
                box["result"] = oc.value if oc.kind == OK else None

    t = threading.Thread(target=serve, daemon=True)
    t.start()

    def wait() -> Optional[object]:
        t.join()
        return box.get("result")

    return wait
