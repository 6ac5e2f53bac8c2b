"""Run sweep cells and store what comes back: serially, in threads of this process (one CUDA
stream each), in a local process pool, or on a Dask distributed cluster (``--scheduler``,
extra ``int8conf[dist]``). Workers only compute (:func:`conformance.sweep.runner.run_unit`);
this process is the single writer and stores each unit in one transaction.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from conformance.kernels.runner import cuda_device
from conformance.kernels.spec import enter_conformance_run
from conformance.runtime.graceful_stop import exit_with_parent
from conformance.suite.warmup import warm_up_layouts
from conformance.sweep.runner import SweepTask, batches, kernel_spec, layer_layouts, run_unit
from conformance.sweep.store import SweepStore
from reference.errors import Int8confError


@dataclass
class RunStats:
    """What a run did: ``total`` cells requested, ``skipped`` already finished, ``computed``
    stored this run, ``duplicates`` returned but already stored, ``elapsed_s`` wall time
    of the compute phase, ``executor`` its description, ``warm_up`` what :func:`warm_up_sweep` did (None: not
    asked: no process pool)."""

    total: int = 0
    skipped: int = 0
    computed: int = 0
    duplicates: int = 0
    elapsed_s: float = 0.0
    executor: str = ""
    warm_up: Optional[dict] = None

    @property
    def cells_per_s(self) -> float:
        return self.computed / self.elapsed_s if self.elapsed_s > 0 else 0.0


class _Rate(TextColumn):
    def __init__(self):
        super().__init__("")

    def render(self, task):
        # rich's speed is over its recent samples, not the run's average (the summary
        # line after the run gives the average, model cells' set-up included)
        sp = task.finished_speed or task.speed
        return Text(f"{sp:6.1f} cells/s recent" if sp else "   -- cells/s recent")


def _progress(total: int, quiet: bool):
    cols = (TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), _Rate(), TimeElapsedColumn(), TextColumn("ETA"))
    return Progress(*cols, TimeRemainingColumn(), disable=quiet, refresh_per_second=4)


@contextlib.contextmanager
def _workers_ignore_ctrl_c():
    """While worker processes are spawned (main thread only): SIGINT ignored here, so the
    spawned interpreters start with it ignored. Ctrl-C reaches the whole process group;
    only the parent acts on it (stops the run, terminates the workers, says so in one line)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _init_worker(threads: int, gpu_queue=None) -> None:
    exit_with_parent()  # a parent killed with SIGKILL must not leave workers behind
    enter_conformance_run()  # the warm-up compiles the configurations the cells choose (no timing)
    os.environ["INT8CONF_SWEEP_THREADS"] = str(threads)
    if gpu_queue is not None:
        # one GPU per worker process: pinned before CUDA is initialised here
        try:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_queue.get(timeout=5))
        except queue.Empty:  # a replacement worker: no GPU left to pin, keep the default
            pass
    torch.set_num_threads(threads)


#: Worker processes sharing one GPU by default: a cell is host-bound, so processes overlap
#: their host work (reports/sweep/h200-paper-scale/NOTE.md has the measurements).
SHARED_GPU_WORKERS = 4


def default_workers(kernel, device: Optional[str] = None) -> tuple[int, tuple]:
    """``(workers, gpus)`` for ``--workers 0`` (the default). Kernel on CUDA (``device``:
    ``--device``, None = auto): one GPU or an explicit ``cuda:N``,
    ``(min(SHARED_GPU_WORKERS, cores), ())``; ``n`` > 1 GPUs, ``(n, (0, .., n-1))``, one
    pinned worker per GPU. Otherwise ``(os.cpu_count(), ())``."""
    dev = cuda_device(kernel, device)
    cores = os.cpu_count() or 1
    if dev is not None:
        n = torch.cuda.device_count()
        if torch.device(dev).index is not None or n <= 1:
            return min(SHARED_GPU_WORKERS, cores), ()
        return n, tuple(range(n))
    return cores, ()


def warm_up_sweep(tasks: Sequence[SweepTask], workers: int, executor=None, say=lambda s: None) -> dict:
    """Compile every variant of a JIT-compiled kernel (``KernelSpec.warm_up``) the layer cells of ``tasks`` will
    launch (``runner.layer_layouts``) once, before any cell runs, in ``executor`` (the sweep's process pool of
    ``workers`` processes) by ``conformance.suite.warmup.warm_up_layouts``, so that no two workers compile the same
    variant. Returns its record, or ``{"skipped": reason}`` where nothing is compiled ahead (a kernel not on CUDA,
    none declared, an e4m3 or block-scaled kernel, no layer cell). Never raises."""
    layer = [t for t in tasks if not (t.cell.is_model or t.cell.is_kernel)]
    if not layer:
        return {"skipped": "no layer cell to run"}
    kernel = kernel_spec(layer[0].spec.kernel)
    dev = cuda_device(kernel, layer[0].device)
    if dev is None:
        return {"skipped": f"kernel {kernel.name!r} does not run on CUDA here: nothing is compiled ahead"}
    if not kernel.warm_up:
        return {"skipped": f"kernel {kernel.name!r} declares no warm_up (no per-layout compiles)"}
    if kernel.operands != "int8" or kernel.is_block:
        what = "block-scaled" if kernel.is_block else "e4m3"
        return {"skipped": f"{what} layer cells: their quantized operands' layouts are not planned ahead"}
    try:
        layouts = layer_layouts(layer)
    except Exception as e:  # noqa: BLE001 -- an optimisation: the cells report what they must themselves
        return {"skipped": f"layouts not derived ({type(e).__name__}: {str(e).strip()[:160]})"}
    return warm_up_layouts(kernel, layouts, dev, workers=workers, say=say, executor=executor)


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
    """Compute every task not yet in ``store`` (this process is the single writer) and
    store the results; returns RunStats.

    ``workers``: local processes, 0 = one per core, 1 = serial in this process.
    ``scheduler`` (a Dask address) or ``cluster`` (a ``dask.distributed`` cluster object)
    override it. ``gpus``: one GPU index per worker process (``CUDA_VISIBLE_DEVICES``).
    ``threads``: serially, the layer batches in this many threads (:func:`_run_threaded`,
    :func:`threads_refusal`). ``on_stored(count)`` after each stored unit; ``on_start``
    with the executor's description before any cell is computed. Raises Int8confError:
    dask.distributed missing or unreachable, or a worker process died.
    """
    done = store.done()
    todo = [t for t in tasks if t.cell.key not in done]
    st = RunStats(total=len(tasks), skipped=len(tasks) - len(todo))
    # model cells (the slowest) first, in units for half the workers (each pays the model
    # set-up once); serially one unit per model cell
    nw_local = workers or os.cpu_count() or 1
    serial = cluster is None and not scheduler and nw_local <= 1
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
        elif nw_local <= 1 and threads > 1:
            st.executor = _run_threaded(units, store_one, threads, on_start)
        elif nw_local <= 1:
            st.executor = "serial (this process)"
            if on_start:
                on_start(st.executor)
            for u in units:
                store_one(run_unit(u))
        else:
            nw = min(nw_local, len(units))
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
                    st.warm_up = warm_up_sweep(todo, nw, ex)
                    futs = [ex.submit(run_unit, u) for u in units]
                try:
                    for f in as_completed(futs):
                        store_one(f.result())
                except BrokenProcessPool:  # what was stored stays; say so in one line
                    ex.shutdown(wait=False, cancel_futures=True)
                    raise Int8confError(
                        f"a sweep worker process died (killed, out of memory or a crash inside "
                        f"the kernel) after {st.computed} cells were stored; run the same "
                        f"command again to resume (or --workers 1 to see the crash)"
                    ) from None
                except BaseException:  # noqa: BLE001 -- cleanup then re-raise: Ctrl-C or any error stops the workers
                    # stop the workers now (their units are recomputed on resume): a worker hit by a
                    # second Ctrl-C could block its exit and hang the command (no public call < 3.14)
                    for proc in list((getattr(ex, "_processes", None) or {}).values()):
                        proc.terminate()
                    # queued units cancelled by the executor itself (futures cancelled from here
                    # made Python 3.11's broken pool print InvalidStateError)
                    ex.shutdown(wait=False, cancel_futures=True)
                    raise
    st.elapsed_s = time.perf_counter() - t0
    return st


#: kernels that run on the CPU and may be evaluated in threads (pure torch; Triton's
#: CPU interpreter is not thread-safe: a threaded run of ``triton`` stored other rows)
THREAD_SAFE_ON_CPU = frozenset({"cpu"})


def threads_refusal(kernel_name: str, kernel, device: Optional[str], threads: int) -> Optional[str]:
    """Why ``threads`` > 1 may not evaluate ``kernel`` (``kernel_name`` as given) on
    ``device`` (None: they may): threads are for a kernel on CUDA, or one of
    :data:`THREAD_SAFE_ON_CPU`."""
    if threads <= 1 or kernel_name in THREAD_SAFE_ON_CPU or cuda_device(kernel, device):
        return None
    return (
        f"--threads {threads}: kernel {kernel_name!r} does not run on CUDA here; threads are "
        f"for one GPU's host-bound cells, and on the CPU only the built-in 'cpu' kernel is "
        f"known to be thread-safe (Triton's CPU interpreter is not): use --workers N "
        f"(processes)"
    )


def _run_threaded(units, store_one, threads: int, on_start=None) -> str:
    """Run ``units`` in ``threads`` threads of this process, storing as they finish;
    returns the executor's description. Model units first, on the calling thread; then
    the layer batches, each thread on its own CUDA stream when the kernel runs on CUDA
    (memo scopes and pending read-backs are per thread)."""
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
    except (OSError, TimeoutError, ValueError) as e:  # ValueError: not an address (no port, unknown protocol)
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
