"""Lockstep batching of per-prompt model runs: one kernel call per layer for
all prompts, every other op exactly as in a one-prompt run.

End-to-end generation runs each fixed prompt on its own (batch 1, no
padding), so nothing but the kernel could make two prompts' runs interact.
Run one prompt at a time, though, and a decode step is 28 GEMMs of M = 1 per
prompt -- under the Triton interpreter that is ~1 s of per-call overhead per
step and prompt. :class:`Lockstep` runs the prompts in ``n`` threads that
advance together: each W8A8 linear call deposits its operands and waits at
a barrier; when all ``n`` threads have arrived at the same layer, one
kernel call on the concatenated activation rows (``M = sum of the prompts'
rows``: 8 rows per decode step for 8 prompts) serves them all, and each
thread takes back its own rows.

What this keeps: embedding, norms, attention, KV caches, the lm_head and the
argmax stay per prompt, exactly the ops of a batch-1 run. What it assumes:
the kernel is row-independent (row ``i`` of ``scaled_mm(a, ...)`` depends
only on row ``i`` of ``a`` and ``scale_a``); true for every built-in (exact
integer accumulation, element-wise epilogue) and required of any correct
kernel by the contract (DESIGN.md section 3). The study test
``test_lockstep_generation_equals_one_prompt_at_a_time`` checks that lockstep
and one-prompt-at-a-time generation give identical tokens and logits.

Threads must make the same sequence of linear calls (same model, same
number of forward passes); a thread that calls a different layer, or fails,
stops all of them with one error instead of a hang.
"""

from __future__ import annotations

import threading
from typing import Callable, Mapping, Optional

import torch

from reference.errors import Int8confError


class LockstepError(Int8confError):
    """Threads run in lockstep left it (different layers at one barrier)."""


class Lockstep:
    """Barrier-synchronised batching of ``n`` threads' ``scaled_mm`` calls.

    Usage: ``ls = Lockstep(n)``; build the model with
    ``ls.wrap_all({layer: scaled_mm})``; then ``ls.run(fn)`` calls
    ``fn(i)`` for ``i in range(n)`` in ``n`` threads and returns the list
    of results (in order). With ``n == 1`` everything runs in the caller's
    thread without a barrier.
    """

    def __init__(self, n: int):
        if n < 1:
            raise Int8confError(f"lockstep needs at least one participant, got {n}")
        self.n = n
        self._slots: list = [None] * n
        self._out: list = [None] * n
        self._err: Optional[BaseException] = None
        self._local = threading.local()
        self._done = False
        self._barrier = threading.Barrier(n, action=self._batch)
        #: kernel calls made and rows they carried (for the report)
        self.calls = 0
        self.rows = 0

    # -- the batched call (runs in the last thread to arrive) --------------
    def _batch(self) -> None:
        try:
            names = {s[0] for s in self._slots}
            if len(names) != 1:
                raise LockstepError(f"lockstep threads reached different layers: {sorted(names)}")
            fn, b, sb, out_dtype, bias = self._slots[0][3:]
            a = torch.cat([s[1] for s in self._slots], dim=0)
            sa = torch.cat([s[2].reshape(-1) for s in self._slots], dim=0)
            y = fn(a, b, sa, sb, out_dtype, bias)
            self.calls += 1
            self.rows += int(a.shape[0])
            lo = 0
            for i, s in enumerate(self._slots):
                m = int(s[1].shape[0])
                self._out[i] = y[lo : lo + m]
                lo += m
        except BaseException as exc:  # noqa: BLE001 - handed to every thread
            self._err = exc

    def wrap(self, name: str, fn: Callable) -> Callable:
        """``fn`` as a lockstep ``scaled_mm`` for layer ``name``."""
        if self.n == 1:
            return fn

        def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
            i = self._local.index
            if self._done:
                raise LockstepError(
                    f"{name}: called after another lockstep thread had finished "
                    f"(threads made different numbers of calls)"
                )
            self._slots[i] = (name, a, scale_a, fn, b, scale_b, out_dtype, bias)
            try:
                self._barrier.wait()
            except threading.BrokenBarrierError:
                raise LockstepError("a lockstep thread failed") from None
            if self._err is not None:
                raise self._err
            return self._out[i]

        return scaled_mm

    def wrap_all(self, fns: Mapping[str, Callable]) -> dict:
        """``{layer: wrap(layer, fn)}``."""
        return {k: self.wrap(k, f) for k, f in fns.items()}

    def run(self, fn: Callable[[int], object]) -> list:
        """``[fn(0), ..., fn(n-1)]``, the calls made in lockstep threads.

        Raises:
            the first participant's exception (the others are stopped).
        """
        if self.n == 1:
            return [fn(0)]
        results: list = [None] * self.n
        errors: list = [None] * self.n
        self._done = False

        def body(i):
            self._local.index = i
            try:
                results[i] = fn(i)
            except BaseException as exc:  # noqa: BLE001
                errors[i] = exc
                self._barrier.abort()
                return
            # a finished thread joins no further round: if others wait for it
            # (unequal call counts) stop them rather than hang
            self._done = True
            if self._barrier.n_waiting > 0:
                self._barrier.abort()

        threads = [threading.Thread(target=body, args=(i,), name=f"lockstep-{i}") for i in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._barrier.reset()
        self._done = False
        if self._err is not None:
            err, self._err = self._err, None
            raise err
        first = next((e for e in errors if e is not None and not isinstance(e, LockstepError)), None) or next(
            (e for e in errors if e is not None), None
        )
        if first is not None:
            raise first
        return results
