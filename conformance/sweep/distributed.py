"""Run sweep cells and store what comes back: serially, on every local core,
or on a Dask distributed cluster.

Workers only compute (:func:`conformance.sweep.runner.run_unit`: a model cell,
or the layer cells of one (layer, scale mode) as a batch that shares the
operands, their device copy, the clean run and the memoized references; its
cells' rows out); the calling process is the single writer and stores the
cells of each unit as it arrives, one transaction per unit
(:meth:`conformance.sweep.store.SweepStore.put_many`). Local
parallelism is the standard library's ``concurrent.futures.ProcessPoolExecutor``,
or its ``ThreadPoolExecutor`` inside this process (``threads``: one batch per
thread, one CUDA stream per thread when the kernel runs on CUDA -- for a
single GPU, whose cells are host-bound: threads overlap one cell's waits on
the device and torch's GIL-free operator calls with another cell's Python,
in one CUDA context, where processes would time-slice several);
beyond one machine, ``dask.distributed`` (``--scheduler tcp://HOST:8786``,
optional extra ``int8conf[dist]``), with one worker per GPU where GPUs are
present (start them with ``dask worker tcp://HOST:8786 --nworkers 1
--nthreads 1`` per GPU and ``CUDA_VISIBLE_DEVICES`` set). No hand-written
scheduler or queue.

Progress: a rich progress bar with cells/s and ETA.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from conformance.sweep.runner import SweepTask, batches, run_unit
from conformance.sweep.store import SweepStore
from reference.errors import Int8confError


@dataclass
class RunStats:
    """What a run did.

    Attributes:
        total: cells requested; skipped: already finished (resume);
        computed: stored this run; duplicates: returned but already stored;
        elapsed_s: wall time of the compute phase; executor: description.
    """

    total: int = 0
    skipped: int = 0
    computed: int = 0
    duplicates: int = 0
    elapsed_s: float = 0.0
    executor: str = ""
    layer_cells_per_s: Optional[float] = None
    notes: list = field(default_factory=list)

    @property
    def cells_per_s(self) -> float:
        """Stored cells per second of compute wall time."""
        return self.computed / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict:
        """JSON-able dict."""
        return {
            "total": self.total,
            "skipped": self.skipped,
            "computed": self.computed,
            "duplicates": self.duplicates,
            "elapsed_s": round(self.elapsed_s, 3),
            "cells_per_s": round(self.cells_per_s, 3),
            "executor": self.executor,
            "notes": list(self.notes),
        }


def _progress(total: int, quiet: bool):
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    class Rate(TextColumn):
        def __init__(self):
            super().__init__("")

        def render(self, task):
            from rich.text import Text

            # rich's speed is over its recent samples, not the run's average (the summary
            # line after the run gives the average, model cells' set-up included)
            sp = task.finished_speed or task.speed
            return Text(f"{sp:6.1f} cells/s recent" if sp else "   -- cells/s recent")

    return Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        Rate(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        disable=quiet,
        refresh_per_second=4,
    )


@contextlib.contextmanager
def _workers_ignore_ctrl_c():
    """While worker processes are spawned: SIGINT ignored in this process, so the
    spawned interpreters start with it ignored (an ignored signal stays ignored
    across exec, and Python then installs no KeyboardInterrupt handler). Ctrl-C
    reaches the whole process group; only the parent should act on it: it stops
    the run, terminates the workers and says so in one line, where a worker
    still importing torch printed a traceback. Main thread only (elsewhere
    nothing changes)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _init_worker(threads: int, gpu_queue=None) -> None:
    from conformance.runtime.graceful_stop import exit_with_parent

    exit_with_parent()  # a parent killed with SIGKILL must not leave workers behind
    os.environ["INT8CONF_SWEEP_THREADS"] = str(threads)
    if gpu_queue is not None:
        # one GPU per worker process: pinned before CUDA is initialised here
        import queue

        try:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_queue.get(timeout=5))
        except queue.Empty:  # a replacement worker: no GPU left to pin, keep the default
            pass
    import torch

    torch.set_num_threads(threads)


#: worker processes sharing one GPU by default. A cell is host-bound (~6.6 ms of host
#: work against ~0.6 ms on the device, reports/sweep/h200-paper-scale/profiles-2026-12-01e),
#: so processes overlap their host work. Measured on the H200 (16 cores, `triton`, the
#: paper-scale model, run_workers.sh, 2026-12-01g): 28 layers (1,512 cells) at 95 cells/s
#: serial, 101 with 2 processes, 121 with 4 (worker start-up included), 101-106 with
#: --threads 2-4; the full 10,584-cell grid at 251 cells/s with 4 processes (42.1 s)
#: against 104 serial (102 s, 2026-12-01e). 16 processes were 30x slower per cell.
SHARED_GPU_WORKERS = 4


def default_workers(kernel, device: Optional[str] = None) -> tuple[int, tuple]:
    """``(workers, gpus)`` for ``--workers 0`` (the default).

    When the kernel runs on CUDA (``conformance.kernels.runner.pick_device``
    with ``device``): on a single-GPU machine, or for an explicit ``cuda:N``,
    ``(min(SHARED_GPU_WORKERS, cores), ())``: processes sharing that GPU
    (:data:`SHARED_GPU_WORKERS` gives the measurement); with ``n`` > 1 visible
    GPUs, ``(n, (0, .., n-1))``: one worker per GPU, each pinned to its own
    (several per GPU there is not measured). Otherwise ``(os.cpu_count(), ())``:
    one process per core.

    Args:
        kernel: the KernelSpec; device: ``--device`` (None = auto).
    """
    import torch

    from conformance.kernels.runner import cuda_device

    dev = cuda_device(kernel, device)
    cores = os.cpu_count() or 1
    if dev is not None:
        n = torch.cuda.device_count()
        if torch.device(dev).index is not None or n <= 1:
            return min(SHARED_GPU_WORKERS, cores), ()
        return n, tuple(range(n))
    return cores, ()


def run_cells(
    tasks: Sequence[SweepTask],
    store: SweepStore,
    workers: int = 0,
    scheduler: Optional[str] = None,
    quiet: bool = False,
    on_stored: Optional[Callable[[int], None]] = None,
    cluster=None,
    gpus: Sequence[int] = (),
    threads: int = 1,
    on_start: Optional[Callable[[str], None]] = None,
) -> RunStats:
    """Compute every task not yet in ``store`` and store the results.

    Args:
        tasks: cells of one sweep.
        store: the open store (single writer: this process).
        workers: local processes; 0 = one per core (``os.cpu_count()``);
            1 = serial in this process (:func:`default_workers` gives the
            command's default: one per GPU when the kernel runs on CUDA).
        scheduler: Dask scheduler address (``tcp://HOST:8786``); overrides ``workers``.
        quiet: no progress bar.
        on_stored: called with the running count after each stored cell.
        cluster: an existing ``dask.distributed`` cluster object (tests:
            ``LocalCluster``); overrides ``scheduler`` and ``workers``.
        gpus: GPU indices, one per local worker process (``workers`` must
            equal their number): worker ``i`` sees only its GPU
            (``CUDA_VISIBLE_DEVICES``); empty: no pinning.
        threads: with ``workers`` <= 1 (serial), evaluate the layer batches
            in this many threads of this process (:func:`_run_threaded`);
            model cells still run one after another on this thread. Refused
            (:func:`threads_refusal`) unless the kernel runs on CUDA or is one
            of :data:`THREAD_SAFE_ON_CPU`.
        on_start: called with the executor's description once it is chosen,
            before any cell is computed (the record of runs keeps it even
            when the run is interrupted).

    Returns:
        RunStats.

    Raises:
        Int8confError: ``--scheduler`` given but dask.distributed is not
            installed (one line naming the extra), or unreachable.
    """
    done = store.done()
    todo = [t for t in tasks if t.cell.key not in done]
    st = RunStats(total=len(tasks), skipped=len(tasks) - len(todo))
    # model cells are the slowest: start them first so they do not form the tail;
    # half the workers take them (each pays the model set-up once), the rest start on layers
    nw_local = workers or os.cpu_count() or 1
    serial = cluster is None and not scheduler and nw_local <= 1
    # serial: one unit per model cell (one process pays the set-up anyway)
    units = batches(todo, model_units=0 if serial else max(1, nw_local // 2))

    def store_one(crs):
        new = store.put_many(crs)
        st.computed += new
        st.duplicates += len(crs) - new
        prog.advance(bar, len(crs))
        if on_stored:
            on_stored(st.computed)

    t0 = time.perf_counter()
    with _progress(len(todo), quiet) as prog:
        bar = prog.add_task("cells", total=len(todo))
        if not todo:
            pass
        elif cluster is not None or scheduler:
            st.executor = _run_dask(units, store_one, scheduler, cluster, on_start)
        elif (workers or os.cpu_count() or 1) <= 1 and threads > 1:
            st.executor = _run_threaded(units, store_one, threads, on_start)
        elif (workers or os.cpu_count() or 1) <= 1:
            st.executor = "serial (this process)"
            if on_start:
                on_start(st.executor)
            for u in units:
                store_one(run_unit(u))
        else:
            nw = min(nw_local, len(units))
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor, as_completed
            from concurrent.futures.process import BrokenProcessPool

            ctx = mp.get_context("spawn")  # fork after torch init is unsafe
            gpu_queue = None
            if gpus:
                gpu_queue = ctx.Queue()
                for g in list(gpus)[:nw]:
                    gpu_queue.put(int(g))
            st.executor = f"local process pool, {nw} workers x 1 thread" + (
                f", one per GPU {list(gpus)[:nw]}" if gpus else ""
            )
            if on_start:
                on_start(st.executor)
            with ProcessPoolExecutor(
                max_workers=nw, mp_context=ctx, initializer=_init_worker, initargs=(1, gpu_queue)
            ) as ex:
                with _workers_ignore_ctrl_c():  # the submits spawn the workers
                    futs = [ex.submit(run_unit, u) for u in units]
                try:
                    for f in as_completed(futs):
                        store_one(f.result())
                except BrokenProcessPool:
                    # a worker died (killed, out of memory, a kernel that crashed the
                    # process): what was stored stays; say so in one line
                    ex.shutdown(wait=False, cancel_futures=True)
                    raise Int8confError(
                        f"a sweep worker process died (killed, out of memory or a crash inside "
                        f"the kernel) after {st.computed} cells were stored; run the same "
                        f"command again to resume (or --workers 1 to see the crash)"
                    ) from None
                except BaseException:
                    # stop the workers now: their units in flight are not stored anyway
                    # (a resume recomputes them), and a worker hit by a second Ctrl-C
                    # could block its own exit on a result nobody reads any more, which
                    # hung the command at exit (multiprocessing joins its children).
                    # ProcessPoolExecutor has no public call for it before Python 3.14.
                    for proc in list((getattr(ex, "_processes", None) or {}).values()):
                        proc.terminate()
                    # the queued units are cancelled by the executor itself: futures
                    # cancelled from here stayed in its table, and Python 3.11's pool,
                    # broken by the stopped workers, then failed to mark them
                    # (InvalidStateError printed from its manager thread)
                    ex.shutdown(wait=False, cancel_futures=True)
                    raise
    st.elapsed_s = time.perf_counter() - t0
    return st


#: kernels that run on the CPU and may be evaluated in threads (pure torch; Triton's
#: CPU interpreter is not thread-safe: a threaded run of ``triton`` stored other rows)
THREAD_SAFE_ON_CPU = frozenset({"cpu"})


def threads_refusal(kernel_name: str, kernel, device: Optional[str], threads: int) -> Optional[str]:
    """Why ``threads`` > 1 may not evaluate ``kernel`` here (None: they may):
    threads are for a kernel that runs on CUDA (one GPU's host-bound cells), or
    for one of :data:`THREAD_SAFE_ON_CPU`.

    Args:
        kernel_name: the name as given (``--kernel``); kernel: its KernelSpec;
        device: ``--device`` (None = auto); threads: the requested count.
    """
    from conformance.kernels.runner import cuda_device

    if threads <= 1 or kernel_name in THREAD_SAFE_ON_CPU or cuda_device(kernel, device):
        return None
    return (
        f"--threads {threads}: kernel {kernel_name!r} does not run on CUDA here; threads are "
        f"for one GPU's host-bound cells, and on the CPU only the built-in 'cpu' kernel is "
        f"known to be thread-safe (Triton's CPU interpreter is not): use --workers N "
        f"(processes)"
    )


def _run_threaded(units, store_one, threads: int, on_start=None) -> str:
    """Run ``units`` in ``threads`` threads of this process; store as they finish.

    Model units run first, one after another on the calling thread (their
    set-up and caches are process-wide); then the layer batches, one per
    thread at a time, each thread on its own CUDA stream when the kernel runs
    on CUDA (a stream's read-backs then wait for that thread's work only).
    Memo scopes (``reference.memo``) and pending read-backs
    (``reference.readback``) are per thread; the kernel's process-wide
    caches are keyed by stream where they hold device memory. Returns the
    executor's description.
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor, as_completed

    import torch

    from conformance.kernels.runner import cuda_device
    from conformance.sweep.runner import kernel_spec

    model = [u for u in units if u and u[0].cell.is_model]
    layer = [u for u in units if u and not u[0].cell.is_model]
    cuda = None
    if layer:
        t = layer[0][0]
        spec = kernel_spec(t.spec.kernel)
        why = threads_refusal(t.spec.kernel, spec, t.device, threads)
        if why:
            raise Int8confError(why)
        cuda = cuda_device(spec, t.device)
    described = f"threads of this process: {threads}" + (f", one CUDA stream each on {cuda}" if cuda else "")
    if on_start:
        on_start(described)
    for u in model:
        store_one(run_unit(u))
    local = threading.local()

    def run(unit):
        if cuda is None:
            return run_unit(unit)
        stream = getattr(local, "stream", None)
        if stream is None:
            stream = local.stream = torch.cuda.Stream(device=cuda)
        with torch.cuda.stream(stream):
            return run_unit(unit)

    ex = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="int8conf-sweep")
    try:
        futs = [ex.submit(run, u) for u in layer]
        for f in as_completed(futs):
            store_one(f.result())
    finally:
        # on an error or Ctrl-C: queued batches are dropped, running ones finish
        ex.shutdown(wait=True, cancel_futures=True)
    return described


def _run_dask(todo, store_one, scheduler, cluster, on_start=None) -> str:
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise Int8confError("--scheduler needs dask.distributed: pip install 'int8conf[dist]'") from None
    try:
        client = Client(cluster if cluster is not None else scheduler, timeout="30s")
    except (OSError, TimeoutError) as e:
        raise Int8confError(f"cannot reach Dask scheduler {scheduler}: {e}") from None
    try:
        nw = len(client.scheduler_info().get("workers", {}))
        described = f"dask.distributed at {client.scheduler.address} ({nw} workers)"
        if on_start:
            on_start(described)
        # pure=False: a retried cell is recomputed, never served from another key
        futs = client.map(run_unit, todo, pure=False)
        for f in as_completed(futs):
            store_one(f.result())
        return described
    finally:
        client.close()
