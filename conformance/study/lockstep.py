"""Lockstep batching of per-prompt model runs: one kernel call per layer for all prompts.

Each prompt still runs on its own (batch 1, own KV cache, attention, lm_head, argmax), in one of ``n`` threads;
every W8A8 linear call waits at a barrier and one kernel call on the concatenated rows serves all threads. Valid
for row-independent kernels (required of any correct kernel, DESIGN.md section 3). Threads must make the same
sequence of linear calls; one that calls another layer, or fails, stops all with one error instead of a hang.
"""

from __future__ import annotations

import threading
from typing import Callable, Mapping, Optional

import torch

from reference.errors import Int8confError


class LockstepError(Int8confError):
    """Threads run in lockstep left it (different layers at one barrier)."""


class Lockstep:
    """Barrier-synchronised batching of ``n`` threads' ``scaled_mm`` calls: build the model with
    ``wrap_all({layer: scaled_mm})``, then ``run(fn)`` returns ``[fn(0), ..., fn(n-1)]`` run in lockstep threads.
    With ``n == 1`` everything runs in the caller's thread."""

    def __init__(self, n: int):
        if n < 1:
            raise Int8confError(f"lockstep needs at least one participant, got {n}")
        self.n = n
        self._slots: list = [None] * n
        self._out: list = [None] * n
        self._err: Optional[BaseException] = None
        self._local = threading.local()
        self._cond = threading.Condition()
        self._arrived = 0  # threads waiting in this round
        self._round = 0  # rounds completed
        self._stopped: Optional[str] = None  # why no further round can complete (a thread finished or failed)
        self.calls = self.rows = 0  # kernel calls made and rows they carried

    def _batch(self) -> None:  # runs in the last thread to arrive
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
                self._out[i], lo = y[lo : lo + int(s[1].shape[0])], lo + int(s[1].shape[0])
        except BaseException as exc:  # noqa: BLE001 -- the batch runs a user's kernel: its error is handed to every thread
            self._err = exc

    def wrap(self, name: str, fn: Callable) -> Callable:
        """``fn`` as a lockstep ``scaled_mm`` for layer ``name``."""
        if self.n == 1:
            return fn

        def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
            i = self._local.index
            with self._cond:
                if self._stopped is not None:
                    raise LockstepError(f"{name}: {self._stopped}")
                self._slots[i] = (name, a, scale_a, fn, b, scale_b, out_dtype, bias)
                self._arrived += 1
                mine = self._round
                if self._arrived == self.n:  # the last to arrive makes the batched call
                    self._batch()
                    self._arrived, self._round = 0, self._round + 1
                    self._cond.notify_all()
                else:
                    self._cond.wait_for(lambda: self._round != mine or self._stopped is not None)
                if self._round == mine:  # stopped before this round completed
                    raise LockstepError(f"{name}: {self._stopped}")
                if self._err is not None:
                    raise self._err
                return self._out[i]

        return scaled_mm

    def wrap_all(self, fns: Mapping[str, Callable]) -> dict:
        return {k: self.wrap(k, f) for k, f in fns.items()}

    def run(self, fn: Callable[[int], object]) -> list:
        """``[fn(0), ..., fn(n-1)]`` from lockstep threads; raises the first participant's exception."""
        if self.n == 1:
            return [fn(0)]
        results: list = [None] * self.n
        errors: list = [None] * self.n
        self._stopped, self._arrived = None, 0

        def body(i):
            self._local.index = i
            try:
                results[i] = fn(i)
                why = "called after another lockstep thread had finished (threads made different numbers of calls)"
            except BaseException as exc:  # noqa: BLE001 -- a thread's error, re-raised below after every thread stopped
                errors[i] = exc
                why = "a lockstep thread failed"
            # no further round can complete without thread i: whoever waits for one (or comes) is stopped
            with self._cond:
                self._stopped = self._stopped or why
                self._cond.notify_all()

        threads = [threading.Thread(target=body, args=(i,), name=f"lockstep-{i}") for i in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._stopped, self._arrived = None, 0
        if self._err is not None:
            err, self._err = self._err, None
            raise err
        first = next((e for e in errors if e is not None and not isinstance(e, LockstepError)), None) or next(
            (e for e in errors if e is not None), None
        )
        if first is not None:
            raise first
        return results
