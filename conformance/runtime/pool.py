"""One kernel behind a replaceable child process, one request at a time, each with a timeout: a kernel that
crashes kills only its child, one that hangs is killed after the timeout, and the parent gets an
:class:`Outcome` (``ok`` / ``crash`` / ``timeout`` / ``error``) with exit status, signal and the tail of the
child's log (``faulthandler`` stacks); the next request starts a fresh child. Start methods: ``fork`` (even
an in-memory KernelSpec), ``forkserver`` (torch and the handlers' modules preloaded) or ``spawn`` (both need a
:class:`KernelRef`). Protocol (pickled :class:`Request` / :class:`Reply` on a pipe): kinds ``ping``, ``warm``
(case ``arg`` called, unscored), ``stop``, and every kind of the ``handlers`` the pool is given (the suite's:
``conformance.suite.workers.SUITE_REQUESTS``): the child calls ``handlers[kind](spec, arg, Served)`` and answers
``Reply(True, value)`` or ``Reply(False, line)`` (a harness error; kernel exceptions are already check failures). The pool
never imports what answers: the layer above hands it in, as xdist's worker controller is handed its events."""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing as mp
import os
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from conformance.runtime.forking import FORK_GATE, start_method
from conformance.runtime.graceful_stop import exit_with_parent, record_interrupts, restore_sigterm
from conformance.runtime.import_noise import silence_import_noise
from faults.inject import inject_injection
from faults.spec import FaultError, Injection, make_injection
from reference.errors import KernelLoadError, first_line

OK, CRASHED, TIMED_OUT, HARNESS_ERROR = "ok", "crash", "timeout", "error"
#: Error text after which a CUDA context is unusable: the child is replaced.
_STICKY_CUDA = (
    "CUDA error",
    "device-side assert",
    "illegal memory access",
    "CUBLAS_STATUS",
    "unspecified launch failure",
)
_PRELOAD = ["torch", "conformance.kernels.registry"]


@dataclass(frozen=True)
class Request:
    """One request to the child: ``kind`` (``ping`` / ``warm`` / ``stop`` / a handler's), ``arg`` its argument (a
    case index, operands, a check id), ``dump_after_s`` the seconds after which the child writes its threads' stacks
    to its log (a hang's evidence before the kill; None: never)."""

    kind: str
    arg: object = None
    dump_after_s: Optional[float] = None

    def label(self) -> str:
        """The request as its log line names it (operands by case name and shape, not their values)."""
        arg = self.arg
        if hasattr(arg, "digests"):
            arg = f"{arg.name} M={arg.m} K={arg.k} N={arg.n}"
        return self.kind if arg is None else f"{self.kind} {arg!r}"


@dataclass(frozen=True)
class Reply:
    """The child's answer: ``ok`` and the handler's ``value``, or not ``ok`` and a harness error line."""

    ok: bool
    value: object = None


@dataclass(frozen=True)
class Served:
    """What a child's request handler reads besides the kernel and the request's argument: the cases requests name
    by index, the device, the second kernel of a pairwise comparison (None: none)."""

    cases: Sequence
    device: Optional[str] = None
    against: object = None


#: a request handler: ``(spec, the request's argument or None, Served) -> a picklable value``
Handler = Callable[[object, object, Served], object]


@dataclass(frozen=True)
class KernelRef:
    """A kernel as a registry name a fresh process can resolve, optionally wrapped with a fault injection
    (``faults.Injection``, validated by whoever built it)."""

    name: str
    injection: Optional[Injection] = None

    def label(self) -> str:
        """``cpu`` or ``cpu+F3[all,seed=0]``."""
        inj = self.injection
        return f"{self.name}+{inj.spelled}[{inj.coverage},seed={inj.seed}]" if inj else self.name

    def resolve(self, option: str = "--kernel"):
        """The KernelSpec, fault-wrapped if an injection is set. Raises KernelLoadError (one line, naming
        ``option``: the command-line option that gave the name)."""
        from conformance.kernels.registry import get_kernel

        spec = get_kernel(self.name, option)
        if self.injection is None:
            return spec
        try:
            return inject_injection(spec, self.injection)
        except FaultError as e:
            raise KernelLoadError(f"cannot inject {self.injection.spelled} into {self.name!r}: {e}") from None

    def to_dict(self) -> dict:
        """``name``, ``fault`` (as ``--inject`` spells it, or None), ``coverage``, ``seed``, ``label``."""
        inj = self.injection
        fault, coverage, seed = (inj.spelled, inj.coverage, inj.seed) if inj else (None, "all", 0)
        return {"name": self.name, "fault": fault, "coverage": coverage, "seed": seed, "label": self.label()}

    @classmethod
    def from_dict(cls, d: dict) -> "KernelRef":
        """The inverse of :meth:`to_dict`. Raises FaultError: a fault the catalogue does not know."""
        fault = d.get("fault")
        inj = make_injection(fault, d.get("coverage", "all"), int(d.get("seed", 0))) if fault else None
        return cls(d["name"], inj)


@dataclass
class Outcome:
    """One isolated request: ``kind`` ok | crash | timeout | error; ``value`` for ok, else an
    ``error`` line; ``exitcode`` (negative: killed by that signal), ``signal`` name, ``log_tail``
    (the child's last log lines), ``elapsed_s`` wall seconds."""

    kind: str
    value: object = None
    error: Optional[str] = None
    exitcode: Optional[int] = None
    signal: Optional[str] = None
    log_tail: list = field(default_factory=list)
    elapsed_s: float = 0.0


def _signal_name(code: Optional[int]) -> Optional[str]:
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _child_main(
    conn, kernel, cases, device, log_path, method="fork", die_with_parent=False, against=None, handlers=None
) -> None:
    """Child entry: output to ``log_path``, faulthandler on, then :func:`_serve`. ``die_with_parent``
    only for a child of the main thread (the death signal follows the starting thread)."""
    if die_with_parent:  # EOF is never read while a kernel hangs: SIGKILL with the parent
        exit_with_parent(forkserver=method == "forkserver")
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    logf = os.fdopen(os.dup(fd), "w", buffering=1)
    sys.stdout = sys.stderr = logf  # Python-level prints too (pytest may have replaced them)
    faulthandler.enable(file=logf, all_threads=True)
    restore_sigterm()  # a forked child dies on SIGTERM, not with the parent's orderly stop
    record_interrupts()  # a KeyboardInterrupt the kernel raises itself is its failure, a Ctrl-C a stop
    _serve(conn, kernel, cases, device, method, logf, against, handlers)


def _serve(conn, kernel, cases, device, method="fork", logf=None, against=None, handlers=None) -> None:
    """Answer requests until ``stop`` or EOF (module docstring)."""
    if method == "fork":
        # an OpenMP pool the parent used deadlocks after fork: a forked child computes on one thread
        import torch

        torch.set_num_threads(1)
    else:  # a fresh interpreter: third-party import notices off before the kernel loads
        silence_import_noise()
    try:
        spec, err = (kernel.resolve() if isinstance(kernel, KernelRef) else kernel), None
    except Exception as e:  # noqa: BLE001 -- reported per request
        spec, err = None, f"{type(e).__name__}: {first_line(e, None)}"
    import conformance.kernels.runner as runner

    handlers, served = handlers or {}, Served(cases, device, against)

    while True:
        try:
            req: Request = conn.recv()
        except EOFError:
            return
        if req.kind == "stop":
            return
        if spec is None:
            conn.send(Reply(False, f"kernel could not be resolved in the child: {err}"))
            continue
        if req.kind != "ping" and _in_bad_cuda_fork():
            conn.send(Reply(False, BAD_CUDA_FORK))
            continue
        print(f"--- request {req.label()}", flush=True)
        if req.dump_after_s and logf is not None:  # the stack of a hang lands in the log before the kill
            faulthandler.dump_traceback_later(req.dump_after_s, exit=False, file=logf)
        try:
            if req.kind == "ping":
                val = None
            elif req.kind == "warm":
                val = runner.run_kernel(spec, cases[req.arg], device=device).error
            elif req.kind in handlers:
                val = handlers[req.kind](spec, req.arg, served)
            else:
                raise ValueError(f"no handler for request {req.kind!r} in this pool")
            faulthandler.cancel_dump_traceback_later()
            conn.send(Reply(True, val))
        except BaseException as e:  # noqa: BLE001 -- a harness failure, reported, loop goes on
            faulthandler.cancel_dump_traceback_later()
            conn.send(Reply(False, f"{type(e).__name__}: {first_line(e, None)}"))


#: a child's answer when it was forked from a process that had initialized CUDA (torch cannot use CUDA there)
BAD_CUDA_FORK = "forked from a process that had initialized CUDA: this child cannot use CUDA"


def _in_bad_cuda_fork() -> bool:
    import torch

    return bool(getattr(torch._C, "_cuda_isInBadFork", lambda: False)())


def _context(method: str, handlers: Mapping[str, Handler]):
    if method == "forkserver":
        if "forkserver" not in mp.get_all_start_methods():
            return mp.get_context("spawn")
        ctx = mp.get_context("forkserver")
        preload = _PRELOAD + sorted({h.__module__ for h in handlers.values()})
        ctx.set_forkserver_preload(preload)  # no effect once the server runs
        return ctx
    return mp.get_context(method)


class IsolatedKernel:
    """One kernel behind a (replaceable) child process.

    ``kernel``: KernelRef (any start method) or KernelSpec (``fork`` only); ``cases``: the
    GemmOperands requests name by index; ``timeout_s``: seconds per request before the child is
    killed; ``log_dir`` receives ``<label>.<n>.log`` per child; ``method``: fork | forkserver |
    spawn | None (:func:`start_method`); ``against``: the second kernel of a pairwise comparison (None: none);
    ``handlers``: request kind -> :data:`Handler` (module docstring; module-level functions, so that a spawned
    child unpickles them by name). Raises KernelLoadError for a KernelSpec without fork.
    """

    def __init__(
        self,
        kernel: Union[KernelRef, object],
        cases: Sequence,
        timeout_s: float,
        log_dir: Union[str, Path],
        device: Optional[str] = None,
        method: Optional[str] = None,
        against=None,
        handlers: Optional[Mapping[str, Handler]] = None,
    ):
        self.kernel, self.cases, self.timeout_s, self.device = kernel, list(cases), timeout_s, device
        self.against, self.handlers = against, dict(handlers or {})
        self.method = method or start_method()
        if self.method != "fork" and not isinstance(kernel, KernelRef):
            msg = "an in-memory KernelSpec can only be isolated with the fork start method; pass a KernelRef"
            raise KernelLoadError(msg + " (a kernel name)")
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.label = kernel.label() if isinstance(kernel, KernelRef) else getattr(kernel, "name", "kernel")
        self._proc = self._conn = self._log = None
        self.children_started = 0

    @property
    def running(self) -> bool:
        return self._proc is not None

    def start(self) -> None:
        """Start the child now if none runs (else the first request starts it)."""
        if self._proc is None:
            self._start()

    def _start(self) -> None:
        with FORK_GATE if self.method == "fork" else contextlib.nullcontext():
            self._start_child()

    def _start_child(self) -> None:
        ctx = _context(self.method, self.handlers)
        parent, child = ctx.Pipe()
        self.children_started += 1
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", self.label)
        # a name of its own: the workers of one kernel share a log folder, and two children that crash at once
        # wrote their stacks into one file, interleaved
        fd, path = tempfile.mkstemp(prefix=f"{slug}.{self.children_started}.", suffix=".log", dir=self.log_dir)
        os.close(fd)
        self._log = Path(path)
        # the death signal follows the thread that forked: a forkserver child's is the forkserver's own main thread
        main = threading.current_thread() is threading.main_thread() or self.method == "forkserver"
        args = (child, self.kernel, self.cases, self.device, str(self._log), self.method, main, self.against)
        args += (self.handlers,)
        self._proc = ctx.Process(target=_child_main, daemon=True, name=f"int8conf-gate-{slug}", args=args)
        self._proc.start()
        child.close()
        self._conn = parent

    def _tail(self, n: int = 60) -> list:
        """The child's log from its last faulthandler report on (else the last ``n`` lines), lines cut at 300."""
        try:
            lines = self._log.read_text(errors="replace").splitlines() if self._log else []
        except OSError:
            return []
        starts = [i for i, ln in enumerate(lines) if ln.startswith("Fatal Python error") or ln.startswith("Timeout (")]
        keep = lines[starts[-1] :] if starts else lines[-n:]
        return [ln[:300] for ln in keep if not ln.startswith("Extension modules:")][:n]

    def _reap(self, kill: bool) -> Optional[int]:
        proc, self._proc = self._proc, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if proc is None:
            return None
        if kill and proc.is_alive():
            proc.kill()
        proc.join(10)
        return proc.exitcode

    def request(self, kind: str, arg: object = None, timeout_s: Optional[float] = None) -> Outcome:
        """Send one :class:`Request` (starting a child if none runs); never raises for what the kernel does."""
        if self._proc is None:
            self._start()
        limit = self.timeout_s if timeout_s is None else timeout_s
        t0 = time.perf_counter()
        # ask the child to dump its stack shortly before the deadline (evidence of a hang)
        msg = Request(kind, arg, max(limit * 0.9, limit - 1.0))
        try:
            self._conn.send(msg)
            ready = self._conn.poll(limit)
            reply = self._conn.recv() if ready else None
        except (EOFError, OSError, BrokenPipeError):
            ready, reply = True, None
        dt = time.perf_counter() - t0
        if not ready:
            time.sleep(0.2)  # let the child's stack dump reach the log
            code = self._reap(kill=True)
            error = f"no result within {limit:g} s: child process killed"
            return Outcome(TIMED_OUT, None, error, code, _signal_name(code), self._tail(), dt)
        if reply is None:
            code = self._reap(kill=False)
            sig = _signal_name(code)
            why = f"killed by {sig}" if sig else f"exited with status {code}"
            error = f"the kernel's process died during the request: {why}"
            return Outcome(CRASHED, None, error, code, sig, self._tail(), dt)
        val = reply.value
        if not reply.ok:
            return Outcome(HARNESS_ERROR, error=str(val), log_tail=self._tail(), elapsed_s=dt)
        err = getattr(val, "error", None) or ""
        if any(s in err for s in _STICKY_CUDA):  # the context is poisoned: fresh child next time
            self._reap(kill=True)
        return Outcome(OK, value=val, elapsed_s=dt)

    def run_case(self, index: int) -> Outcome:
        return self.request("case", index)

    def run_model(self, check_id: str, timeout_s: Optional[float] = None) -> Outcome:
        return self.request("model", check_id, timeout_s)

    def kill(self) -> None:
        """Kill the child now (from any thread): a request waiting on it returns CRASHED."""
        proc = self._proc
        if proc is not None and proc.is_alive():
            proc.kill()

    def close(self) -> None:
        """Stop the child (politely, then by force)."""
        if self._proc is None:
            return
        try:
            if self._conn is not None:
                self._conn.send(Request("stop"))
        except (OSError, BrokenPipeError):
            pass
        if self._proc.pid is not None:
            self._proc.join(5)
        self._reap(kill=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
