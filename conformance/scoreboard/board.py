"""``int8conf scoreboard``: every available kernel -- built-in and adapted --
on the same cases, bit for bit.

For each kernel and device: the overall verdict against the kernel's own
declared epilogue (C8 and the other per-case checks of
``conformance.suite.evaluate``), per-check verdicts, the maximum spacing (ulp) of
its outputs from each of the six standard contracts
(``reference.epilogue_steps.NAMED``), and a kernel x kernel
bit-interchangeability matrix (on how many shared cases two rows give
identical output bits). Every failing (kernel, device, check) links a saved
reproducer: the operands as safetensors (shrunk to the single worst output
element when that still fails the same check, else the whole case) and the
command ``int8conf scoreboard --repro FILE`` that re-runs it alone.

Isolation and time: each (kernel, device) row runs in its own worker
process (``multiprocessing`` forkserver with torch preloaded, else spawn); every case has a wall-clock timeout
(the worker is killed and restarted, the case recorded as ``timeout``);
the first call of a row is a warm-up (JIT compilation, autotuning) with
its own, longer timeout and is not scored. Progress is shown with rich.

Outputs (``reports/scoreboard/``, written atomically): ``scoreboard.json``
(schema ``int8conf.scoreboard`` v1), ``scoreboard.md``, ``scoreboard.png``
(matplotlib: verdict strip and interchangeability heat map), ``repro/``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import torch

from reference.errors import Int8confError, first_line

SCHEMA, SCHEMA_VERSION = "int8conf.scoreboard", 1
STANDARD = (
    "a_then_w/fp32_before_round",
    "a_then_w/after_round",
    "w_then_a/fp32_before_round",
    "w_then_a/after_round",
    "fused/fp32_before_round",
    "fused/after_round",
)
_DTYPES = {"torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16, "torch.float32": torch.float32}


# ------------------------------------------------------------------ cases


def scoreboard_cases(quick: bool = False, captures: int = 2) -> list:
    """The shared case set.

    Every synthetic kind (``conformance.cases.SYNTHETIC_KINDS``, seed 0);
    unless ``quick``: two shape-path cases (M = 16 and M = 17, K = 2048,
    int8 extremes: libraries switch GEMM paths at M <= 16 and on K / N
    divisibility) and the first ``captures`` captured layers of the default
    model in both scale modes (own, pow2). ``quick``: four synthetic kinds.

    Returns:
        list of GemmOperands (CPU).
    """
    from conformance.cases import SYNTHETIC_KINDS, capture_cases, make_case

    if quick:
        return [make_case(k, 0) for k in ("ordinary", "bias", "tails", "fp16_out")]
    cases = [make_case(k, 0) for k in SYNTHETIC_KINDS]
    for m in (16, 17):
        cases.append(make_case("extreme", 0, m=m, k=2048, n=64, name=f"synthetic/extreme-m{m}-k2048"))
    if captures:
        try:
            cases += list(capture_cases(("own", "pow2"), max_layers=captures).cases)
        except Exception:  # noqa: BLE001 -- no captures here: synthetic only
            pass
    return cases


# ------------------------------------------------------------------ worker


def _worker(kernel: str, device: str, conn) -> None:
    """Worker process: receive ``(index, ops)``, reply with the evaluated case
    (dict) and the output tensor; ``None`` ends it. Third-party import notices
    are silenced first (``conformance.runtime.import_noise``)."""
    import warnings

    warnings.filterwarnings("ignore")
    from conformance.runtime.import_noise import silence_import_noise

    silence_import_noise()
    import conformance.kernels.runner as runner
    from conformance.kernels.registry import get_kernel
    from conformance.suite.evaluate import evaluate_case

    try:
        spec = get_kernel(kernel)
    except Exception as e:  # noqa: BLE001
        conn.send(("load_error", first_line(e, None) or repr(e)))
        return
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        idx, ops, warm = msg
        if warm:
            runner.run_kernel(spec, ops, device=device)
            conn.send((idx, None, None))
            continue
        # the case's own run's output (on the CPU), kept by evaluate_case
        res = evaluate_case(spec, ops, device=device, keep_output=True)
        conn.send((idx, res.to_dict(), res.output))


@dataclass
class Row:
    """One (kernel, device) row of the scoreboard.

    Attributes:
        kernel, device: identity.
        spec: manifest (``KernelSpec.manifest()``) or {} when it did not load.
        cases: case id -> CaseResult dict (``evaluate.CaseResult.to_dict``)
            or ``{"verdict": "timeout"}``.
        outputs: case id -> output tensor (CPU) for the cases it produced.
        error: load error line.
    """

    kernel: str
    device: str
    spec: dict = field(default_factory=dict)
    cases: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    error: Optional[str] = None
    elapsed_s: float = 0.0
    warmup_s: float = 0.0


_CTX = None


def _context():
    """The multiprocessing context for workers: ``forkserver`` with torch and
    the checks preloaded (a worker then starts in a fraction of a second, and
    no worker inherits a CUDA context or the parent's threads), ``spawn``
    where forkserver is unavailable."""
    global _CTX
    if _CTX is None:
        if "forkserver" in mp.get_all_start_methods():
            _CTX = mp.get_context("forkserver")
            _CTX.set_forkserver_preload(["torch", "conformance.suite.evaluate", "conformance.kernels.registry"])
        else:
            _CTX = mp.get_context("spawn")
    return _CTX


class _Pool:
    """One worker for a row; restarted after a timeout."""

    def __init__(self, kernel: str, device: str):
        self.kernel, self.device = kernel, device
        self.ctx = _context()
        self.proc = None
        self.conn = None

    def start(self, timeout: float) -> Optional[str]:
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(self.kernel, self.device, child), daemon=True)
        self.proc.start()
        self.conn = parent
        state = self._wait(timeout)
        if state != "ready":
            self.stop()
            return f"worker did not start within {timeout:.0f} s" if state == "timeout" else state
        try:
            kind, why = parent.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            msg = f"worker process died at start (exit code {self.proc.exitcode})"
            self.stop()
            return msg
        return why if kind == "load_error" else None

    def _wait(self, timeout: float) -> str:
        """``ready`` when a reply is waiting, ``timeout``, or a line saying the
        worker died (a crashing library must not cost the whole timeout)."""
        end = time.monotonic() + timeout
        while True:
            if self.conn.poll(min(0.2, max(0.0, end - time.monotonic()))):
                return "ready"
            if not self.proc.is_alive():
                return f"worker process died (exit code {self.proc.exitcode})"
            if time.monotonic() >= end:
                return "timeout"

    def call(self, msg, timeout: float):
        """Send one request; the reply, ``None`` on timeout, or the death line (str)."""
        self.conn.send(msg)
        state = self._wait(timeout)
        if state == "ready":
            try:
                return self.conn.recv()
            except (EOFError, OSError):  # the pipe closed: the worker died mid-call
                self.proc.join(5)
                state = f"worker process died (exit code {self.proc.exitcode})"
        self.stop()
        return None if state == "timeout" else state

    def stop(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(2)
            except Exception:  # noqa: BLE001
                pass
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        self.proc = None


def run_row(
    kernel: str,
    device: str,
    cases: Sequence,
    case_timeout: float,
    warmup_timeout: float,
    progress=None,
    task=None,
    give_up_after: int = 2,
) -> Row:
    """Run one kernel on one device over ``cases`` in a worker process.

    A case that exceeds ``case_timeout`` seconds kills the worker (restarted
    for the next case); after ``give_up_after`` consecutive timeouts the rest
    of the row is recorded as not attempted (a shape-autotuning kernel would
    otherwise spend minutes per case).

    Returns:
        Row (timeouts recorded per case, never raised).
    """
    from conformance.cases import case_id
    from conformance.kernels.registry import get_kernel

    row = Row(kernel, device)
    try:
        row.spec = get_kernel(kernel).manifest()
    except Exception as e:  # noqa: BLE001
        row.error = str(e).splitlines()[0]
        return row
    pool = _Pool(kernel, device)
    t0 = time.perf_counter()
    err = pool.start(warmup_timeout)
    if err:
        row.error = err
        return row
    # warm-up: the first case's shape, not scored (JIT / autotuning)
    tw = time.perf_counter()
    got = pool.call((-1, cases[0], True), warmup_timeout)
    if got is None or isinstance(got, str):
        row.warmup_s = time.perf_counter() - tw
        row.error = f"warm-up call exceeded {warmup_timeout:.0f} s" if got is None else f"warm-up call: {got}"
        for ops in cases:
            row.cases[case_id(ops)] = {
                "verdict": "timeout" if got is None else "fail",
                "checks": {},
                "error": row.error,
            }
        return row
    row.warmup_s = time.perf_counter() - tw
    streak = 0
    for i, ops in enumerate(cases):
        cid = case_id(ops)
        if streak >= give_up_after:
            row.cases[cid] = {
                "verdict": "timeout",
                "checks": {},
                "error": f"not attempted: {streak} consecutive timeouts",
            }
            if progress is not None:
                progress.advance(task)
            continue
        if pool.proc is None:
            why = pool.start(warmup_timeout)
            if why:
                row.cases[cid] = {"verdict": "timeout", "checks": {}, "error": why}
                continue
        got = pool.call((i, ops, False), case_timeout)
        if isinstance(got, str):  # the worker died inside the kernel: a kernel failure
            row.cases[cid] = {"verdict": "fail", "checks": {}, "error": got}
            streak = 0
        elif got is None:
            row.cases[cid] = {
                "verdict": "timeout",
                "checks": {},
                "error": f"case exceeded {case_timeout:.0f} s (worker restarted)",
            }
            streak += 1
        else:
            streak = 0
            _idx, res, out = got
            row.cases[cid] = res
            if out is not None:
                row.outputs[cid] = out
        if progress is not None:
            progress.advance(task)
    pool.stop()
    row.elapsed_s = time.perf_counter() - t0
    return row


# ------------------------------------------------------------------ analysis


def _max_spacing_from_standard(cases, rows) -> dict:
    from conformance.cases import case_id
    from reference.accumulate import exact_int_mm
    from reference.bits import NAN_DISTANCE, spacing_distance
    from reference.epilogue_steps import NAMED, apply_steps

    refs = {}
    for ops in cases:
        exact = exact_int_mm(ops.a, ops.b)
        refs[case_id(ops)] = {
            name: apply_steps(exact, ops.scale_a, ops.scale_b, NAMED[name], bias=ops.bias, out_dtype=ops.out_dtype)
            for name in STANDARD
        }
    out = {}
    for r in rows:
        d = {}
        for name in STANDARD:
            worst = None
            for cid, o in r.outputs.items():
                dist = spacing_distance(o, refs[cid][name])
                v = int(dist.max()) if dist.numel() else 0
                worst = v if worst is None else max(worst, v)
            d[name] = None if worst is None else (worst if worst < NAN_DISTANCE else "nan")
        out[f"{r.kernel}@{r.device}"] = d
    return out


def _interchangeability(rows) -> dict:
    from reference.bits import bits_of

    keys = [f"{r.kernel}@{r.device}" for r in rows]
    mat = {}
    for ra, ka in zip(rows, keys):
        mat[ka] = {}
        for rb, kb in zip(rows, keys):
            shared = sorted(set(ra.outputs) & set(rb.outputs))
            same = sum(1 for c in shared if torch.equal(bits_of(ra.outputs[c]), bits_of(rb.outputs[c])))
            mat[ka][kb] = {"identical": same, "shared": len(shared)}
    return mat


def _check_verdicts(row: Row) -> dict:
    agg = {}
    for res in row.cases.values():
        for cid, c in (res.get("checks") or {}).items():
            v = c.get("verdict")
            cur = agg.get(cid, "n/a")
            if v == "fail":
                pre = (c.get("evidence") or {}).get("failure_kind") == "precondition" or cid in ("C3", "C4")
                agg[cid] = "fail" if not pre else ("fail" if cur == "fail" else "pre")
            elif v == "pass" and cur in ("n/a",):
                agg[cid] = "pass"
            else:
                agg.setdefault(cid, cur)
    return dict(sorted(agg.items()))


def overall(row: Row) -> str:
    """``conformant`` / ``not conformant`` / ``not run`` for a row."""
    if row.error and not row.cases:
        return "not run"
    vs = [c.get("verdict") for c in row.cases.values()]
    if any(v == "fail" for v in vs):
        return "not conformant"
    if any(v == "timeout" for v in vs):
        return "timeout"
    return "conformant" if any(v == "pass" for v in vs) else "not run"


# ------------------------------------------------------------------ reproducers


def _slice_ops(ops, i: int, j: int):
    from reference.operands import GemmOperands

    def pick(s, idx, rows):
        if s.dim() == 0 or s.numel() == 1:
            return s.clone()
        return s.reshape(rows, -1)[idx : idx + 1].reshape((1,) + tuple(s.shape[1:])).clone()

    return GemmOperands(
        a=ops.a[i : i + 1].clone(),
        b=ops.b[j : j + 1].clone(),
        scale_a=pick(ops.scale_a, i, ops.m),
        scale_b=pick(ops.scale_b, j, ops.n),
        bias=None if ops.bias is None else ops.bias[j : j + 1].clone(),
        out_dtype=ops.out_dtype,
        name=f"{ops.name}[{i},{j}]",
        scale_mode=ops.scale_mode,
        meta=dict(ops.meta),
    )


def save_repro(path: Path, ops, kernel: str, device: str, check: str, summary: str) -> None:
    """Write operands + metadata (safetensors) for ``int8conf scoreboard --repro``."""
    from safetensors.torch import save

    from reference.fileio import atomic_write_bytes

    tensors = {
        "a": ops.a.contiguous(),
        "b": ops.b.contiguous(),
        "scale_a": ops.scale_a.contiguous(),
        "scale_b": ops.scale_b.contiguous(),
    }
    if ops.bias is not None:
        tensors["bias"] = ops.bias.contiguous()
    meta = {
        "kernel": kernel,
        "device": device,
        "check": check,
        "out_dtype": str(ops.out_dtype),
        "scale_mode": ops.scale_mode,
        "case": ops.name or "",
        "summary": summary[:500],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, save(tensors, metadata=meta))


def load_repro(path) -> tuple:
    """``(ops, meta)`` from a reproducer file.

    Raises:
        Int8confError: missing / unreadable file.
    """
    from safetensors import safe_open

    from reference.operands import GemmOperands

    p = Path(path)
    if not p.is_file():
        raise Int8confError(f"--repro {str(path)!r}: no such file")
    try:
        with safe_open(str(p), "pt") as f:
            meta = dict(f.metadata() or {})
            t = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001
        raise Int8confError(f"--repro {str(path)!r}: not a reproducer file ({type(e).__name__})") from None
    if not {"a", "b", "scale_a", "scale_b"} <= set(t) or "kernel" not in meta:
        raise Int8confError(f"--repro {str(path)!r}: missing operands or kernel metadata")
    ops = GemmOperands(
        a=t["a"],
        b=t["b"],
        scale_a=t["scale_a"],
        scale_b=t["scale_b"],
        bias=t.get("bias"),
        out_dtype=_DTYPES[meta["out_dtype"]],
        name=meta.get("case", ""),
        scale_mode=meta.get("scale_mode", "synthetic"),
        meta={"source": "repro"},
    )
    return ops, meta


def rerun_repro(path) -> tuple[bool, str]:
    """Re-run a reproducer alone: ``(reproduced, line)`` -- reproduced when
    the recorded check fails again on the recorded kernel and device."""
    from conformance.kernels.registry import get_kernel
    from conformance.suite.evaluate import evaluate_case

    ops, meta = load_repro(path)
    spec = get_kernel(meta["kernel"])
    res = evaluate_case(spec, ops, device=meta["device"])
    c = res.checks.get(meta["check"])
    ok = c is not None and c.verdict == "fail"
    line = (
        f"{meta['kernel']}@{meta['device']} {meta['check']}: "
        f"{c.verdict if c else 'missing'} -- {c.summary if c else ''}"
    )
    return ok, line


def _write_repros(out_dir: Path, rows, cases, root: Optional[Path] = None) -> dict:
    """Save a reproducer per failing (row, check); returns
    ``{row_key: {check: {"file", "command", "minimal", "case"}}}``."""
    from conformance.cases import case_id
    from conformance.kernels.registry import get_kernel
    from conformance.suite.evaluate import evaluate_case
    from conformance.suite.report import kernel_dirname

    by_id = {case_id(o): o for o in cases}
    links: dict = {}
    for r in rows:
        key = f"{r.kernel}@{r.device}"
        for cid_case, res in r.cases.items():
            for chk, c in (res.get("checks") or {}).items():
                if (
                    c.get("verdict") != "fail"
                    or chk in ("C3", "C4")
                    or chk in links.get(key, {})
                    or cid_case not in by_id
                ):
                    continue
                ops = by_id[cid_case]
                w = (c.get("evidence") or {}).get("worst") or {}
                idx = w.get("index")
                target, minimal = ops, False
                if isinstance(idx, (list, tuple)) and len(idx) == 2:
                    small = _slice_ops(ops, int(idx[0]), int(idx[1]))
                    try:
                        again = evaluate_case(get_kernel(r.kernel), small, device=r.device)
                        if again.checks.get(chk) and again.checks[chk].verdict == "fail":
                            target, minimal = small, True
                    except Exception:  # noqa: BLE001 -- keep the full case
                        pass
                fname = f"{kernel_dirname(r.kernel)}-{r.device}-{chk}.safetensors"
                path = out_dir / "repro" / fname
                save_repro(path, target, r.kernel, r.device, chk, c.get("summary", ""))
                links.setdefault(key, {})[chk] = {
                    "file": f"repro/{fname}",
                    "case": cid_case,
                    "minimal": minimal,
                    "shape": [target.m, target.k, target.n],
                    "command": f"int8conf scoreboard --repro {(root or out_dir) / 'repro' / fname}",
                    "summary": c.get("summary", ""),
                }
    return links


# ------------------------------------------------------------------ raw rows (merge)


def save_raw(out_dir: Path, rows) -> None:
    """Write ``raw.json`` (per-case results of every row) and
    ``outputs.safetensors`` (every output, key ``<kernel>@<device>|<case>``)
    so a scoreboard from another machine can be merged (``--merge``)."""
    from safetensors.torch import save

    from reference.fileio import atomic_write_bytes, atomic_write_json

    raw = [
        {
            "kernel": r.kernel,
            "device": r.device,
            "spec": r.spec,
            "cases": r.cases,
            "error": r.error,
            "elapsed_s": r.elapsed_s,
            "warmup_s": r.warmup_s,
        }
        for r in rows
    ]
    atomic_write_json(out_dir / "raw.json", raw)
    tensors = {f"{r.kernel}@{r.device}|{cid}": o.contiguous() for r in rows for cid, o in r.outputs.items()}
    atomic_write_bytes(out_dir / "outputs.safetensors", save(tensors))


def load_raw(src: Path) -> list:
    """Rows saved by :func:`save_raw` in directory ``src``.

    Raises:
        Int8confError: missing or unreadable files.
    """
    from safetensors.torch import load_file

    src = Path(src)
    if not (src / "raw.json").is_file() or not (src / "outputs.safetensors").is_file():
        raise Int8confError(
            f"--merge {str(src)!r}: needs raw.json and outputs.safetensors "
            f"(written by 'int8conf scoreboard --save-outputs')"
        )
    try:
        raw = json.loads((src / "raw.json").read_text())
        outs = load_file(str(src / "outputs.safetensors"))
    except Exception as e:  # noqa: BLE001
        raise Int8confError(f"--merge {str(src)!r}: unreadable ({type(e).__name__})") from None
    rows = []
    for d in raw:
        r = Row(
            d["kernel"],
            d["device"],
            d.get("spec") or {},
            d.get("cases") or {},
            error=d.get("error"),
            elapsed_s=d.get("elapsed_s", 0.0),
            warmup_s=d.get("warmup_s", 0.0),
        )
        key = f"{r.kernel}@{r.device}|"
        r.outputs = {k[len(key) :]: v for k, v in outs.items() if k.startswith(key)}
        rows.append(r)
    return rows


# ------------------------------------------------------------------ report


def build(rows, cases, links, env: dict) -> dict:
    """The scoreboard document (JSON-able)."""
    from conformance.cases import case_id

    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "environment": env,
        "cases": [
            {
                "case": case_id(o),
                "shape": [o.m, o.k, o.n],
                "out_dtype": str(o.out_dtype),
                "bias": o.bias is not None,
                "scale_mode": o.scale_mode,
            }
            for o in cases
        ],
        "rows": [
            {
                "kernel": r.kernel,
                "device": r.device,
                "overall": overall(r),
                "declared": {"contract": (r.spec.get("contract") or {}), "steps": r.spec.get("steps")},
                "version": r.spec.get("version"),
                "error": r.error,
                "checks": _check_verdicts(r),
                "cases_run": sum(1 for c in r.cases.values() if c.get("produced_output")),
                "cases_failed": sorted(k for k, c in r.cases.items() if c.get("verdict") == "fail"),
                "cases_timeout": sorted(k for k, c in r.cases.items() if c.get("verdict") == "timeout"),
                "paths": sorted({c.get("path") for c in r.cases.values() if c.get("path")}),
                "elapsed_s": round(r.elapsed_s, 2),
                "warmup_s": round(r.warmup_s, 2),
                "repro": links.get(f"{r.kernel}@{r.device}", {}),
            }
            for r in rows
        ],
        "max_spacing_from_standard": _max_spacing_from_standard(cases, rows),
        "interchangeability": _interchangeability(rows),
    }


def _anchor(kernel: str, device: str, check: str) -> str:
    """Heading text and its GitHub anchor for a failure section."""
    import re

    text = re.sub(r"[^A-Za-z0-9_-]", "_", f"{kernel}-{device}-{check}")
    return text, text.lower()


def render_markdown(doc: dict) -> str:
    """Markdown scoreboard."""
    env = doc["environment"]
    L = [
        "# int8conf scoreboard",
        "",
        f"torch {env.get('torch')}, devices {env.get('devices')}, {len(doc['cases'])} cases, "
        f"libraries: " + ", ".join(f"{k} {v}" for k, v in env.get("libraries", {}).items()),
        "",
        *[
            f"Merged rows from {e.get('cuda_device') or e.get('machine')}: torch {e.get('torch')}, "
            f"devices {e.get('devices')}, libraries: "
            + ", ".join(f"{k} {v}" for k, v in e.get("libraries", {}).items())
            + "\n"
            for e in env.get("merged_environments", [])
        ],
        "Verdicts are against each kernel's **own declared epilogue** (C8: 0 ulp) plus the "
        "other per-case checks (C1, C2, C5 pow2 bit identity, C6 within 1 spacing of the "
        "a_then_w reference at the declared bias point).",
        "",
        "## Verdicts",
        "",
    ]
    checks = sorted({c for r in doc["rows"] for c in r["checks"]})
    L.append("| kernel | device | overall | " + " | ".join(checks) + " | cases | paths |")
    L.append("|---|---|---|" + "---|" * len(checks) + "---|---|")
    for r in doc["rows"]:
        cells = [r["checks"].get(c, "-") for c in checks]
        cells = [
            f"[{v}](#{_anchor(r['kernel'], r['device'], c)[1]})" if v == "fail" and c in r["repro"] else v
            for v, c in zip(cells, checks)
        ]
        L.append(
            f"| {r['kernel']} | {r['device']} | **{r['overall']}** | "
            + " | ".join(cells)
            + f" | {r['cases_run']} | {', '.join(r['paths'])} |"
        )
    L += [
        "",
        "## Maximum spacing (ulp) from each standard contract",
        "",
        "| row | " + " | ".join(STANDARD) + " |",
        "|---|" + "---|" * len(STANDARD),
    ]
    for key, d in doc["max_spacing_from_standard"].items():
        L.append(f"| {key} | " + " | ".join("-" if d[s] is None else str(d[s]) for s in STANDARD) + " |")
    keys = list(doc["interchangeability"])
    L += [
        "",
        "## Bit interchangeability (cases with identical output bits / shared cases)",
        "",
        "| | " + " | ".join(keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for ka in keys:
        L.append(
            f"| {ka} | "
            + " | ".join(f"{v['identical']}/{v['shared']}" for v in doc["interchangeability"][ka].values())
            + " |"
        )
    L += ["", "## Declared epilogues", ""]
    for r in doc["rows"]:
        st = r["declared"]["steps"]
        if st and "steps" in st:
            what = "; ".join(st["steps"])
        elif st:
            what = " / ".join(f"{k}: {'; '.join(v['steps'])}" for k, v in st.items())
        else:
            c = r["declared"]["contract"]
            what = f"{c.get('scale_order')}/{c.get('bias_point')}" if c else "-"
        L.append(f"- **{r['kernel']}@{r['device']}** ({r.get('version')}): `{what}`")
    L += ["", "## Failures and reproducers", ""]
    any_f = False
    for r in doc["rows"]:
        for chk, lk in r["repro"].items():
            any_f = True
            L += [
                f"### {_anchor(r['kernel'], r['device'], chk)[0]}",
                "",
                f"{r['kernel']} on {r['device']}, {chk}: {lk['summary']}",
                "",
                f"reproducer: [`{lk['file']}`]({lk['file']}) "
                f"({'single element' if lk['minimal'] else 'whole case'} "
                f"{lk['shape'][0]}x{lk['shape'][1]}x{lk['shape'][2]} of `{lk['case']}`)",
                "",
                f"```\n{lk['command']}\n```",
                "",
            ]
        if r["cases_timeout"]:
            any_f = True
            L.append(f"- {r['kernel']}@{r['device']}: timeouts on {', '.join(r['cases_timeout'])}")
        if r["error"]:
            L.append(f"- {r['kernel']}@{r['device']}: {r['error']}")
    if not any_f:
        L.append("none")
    return "\n".join(L) + "\n"


def render_png(doc: dict, path: Path) -> None:
    """Verdict strip + interchangeability heat map (matplotlib, Agg)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from reference.fileio import atomic_write_bytes

    keys = list(doc["interchangeability"])
    n = len(keys)
    frac = [
        [(v["identical"] / v["shared"]) if v["shared"] else float("nan") for v in doc["interchangeability"][k].values()]
        for k in keys
    ]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(6 + 0.7 * n, 1.5 + 0.5 * n), gridspec_kw={"width_ratios": [1, 3]})
    colors = {"conformant": "#2e7d32", "not conformant": "#c62828", "timeout": "#ef6c00", "not run": "#9e9e9e"}
    ov = {f"{r['kernel']}@{r['device']}": r["overall"] for r in doc["rows"]}
    for i, k in enumerate(keys):
        ax0.barh(i, 1, color=colors.get(ov.get(k), "#9e9e9e"))
        ax0.text(0.5, i, ov.get(k, ""), ha="center", va="center", color="white", fontsize=8)
    ax0.set_yticks(range(n), keys, fontsize=8)
    ax0.invert_yaxis()
    ax0.set_xticks([])
    ax0.set_title("overall verdict (C1-C8; C8 = own declared epilogue)", fontsize=9)
    im = ax1.imshow(frac, vmin=0, vmax=1, cmap="viridis")
    ax1.set_xticks(range(n), keys, rotation=60, ha="right", fontsize=8)
    ax1.set_yticks(range(n), keys, fontsize=8)
    for i in range(n):
        for j in range(n):
            v = list(doc["interchangeability"][keys[i]].values())[j]
            ax1.text(
                j,
                i,
                f"{v['identical']}/{v['shared']}",
                ha="center",
                va="center",
                fontsize=6,
                color="white" if (frac[i][j] or 0) < 0.6 else "black",
            )
    ax1.set_title("bit-identical cases / shared cases", fontsize=9)
    fig.colorbar(im, ax=ax1, fraction=0.03)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def environment(devices) -> dict:
    """Versions and devices."""
    import importlib.metadata
    import platform

    libs = {}
    for d in ("torchao", "bitsandbytes", "triton", "vllm", "sgl-kernel"):
        try:
            libs[d] = importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            pass
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "devices": list(devices),
        "libraries": libs,
    }
    if torch.cuda.is_available():
        env["cuda_device"] = torch.cuda.get_device_name(0)
    return env


def default_kernels() -> list[str]:
    """Every kernel available here: built-ins, then adapters."""
    from conformance.kernels import adapters
    from conformance.kernels.registry import BUILTINS, builtin_available

    return [b for b in BUILTINS if builtin_available(b)[0]] + adapters.available_adapters()


def run_scoreboard(
    out_dir="reports/scoreboard",
    kernels: Optional[Sequence[str]] = None,
    devices: Optional[Sequence[str]] = None,
    cases: Optional[Sequence] = None,
    case_timeout: float = 60.0,
    warmup_timeout: float = 300.0,
    quiet: bool = False,
    jobs: int = 1,
    merge: Sequence = (),
    save_outputs: bool = False,
    report_root: Optional[str] = None,
) -> dict:
    """Run the scoreboard and write its files.

    Args:
        out_dir: output directory (created).
        kernels: kernel names (None: :func:`default_kernels`; ``[]``: none,
            e.g. to only merge saved rows).
        devices: device types (default ``cpu`` plus ``cuda`` when present); a
            kernel gets one row per listed device it declares.
        cases: GemmOperands (default :func:`scoreboard_cases`).
        case_timeout, warmup_timeout: seconds.
        quiet: no progress bar.
        jobs: rows run concurrently (each in its own worker process).
        merge: directories of scoreboards saved with ``save_outputs`` on
            other machines (same case set): their rows (and reproducers) are
            added, the spacing and interchangeability tables span all rows;
            a row of this run wins over a merged one, and a later directory's
            row over an earlier one's (re-running one row elsewhere).
        save_outputs: also write ``raw.json`` + ``outputs.safetensors``.
        report_root: directory named in the reproducer commands (default
            ``out_dir``), e.g. ``reports/scoreboard`` when writing elsewhere.

    Returns:
        the scoreboard document (also written as JSON / Markdown / PNG).

    Raises:
        KernelLoadError: an unknown kernel name.
    """
    from rich.progress import Progress

    from conformance.kernels.registry import get_kernel
    from reference.fileio import atomic_write_json, atomic_write_text, portable_paths

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = list(kernels) if kernels is not None else default_kernels()
    devs = list(devices) if devices else (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    cases = list(cases) if cases is not None else scoreboard_cases()
    plan = []
    for nm in names:
        spec = get_kernel(nm)
        for d in devs:
            if d in spec.devices:
                plan.append((nm, d))
    from concurrent.futures import ThreadPoolExecutor

    with Progress(disable=quiet, transient=False) as prog:
        tasks = [prog.add_task(f"{nm}@{d}", total=len(cases)) for nm, d in plan]
        with ThreadPoolExecutor(max_workers=max(1, int(jobs))) as ex:
            futs = [
                ex.submit(run_row, nm, d, cases, case_timeout, warmup_timeout, prog, t)
                for (nm, d), t in zip(plan, tasks)
            ]
            rows = [f.result() for f in futs]
    if save_outputs:
        save_raw(out, rows)
    own = {f"{r.kernel}@{r.device}" for r in rows}
    source = {}  # kernel@device -> (row, merge dir): a later --merge replaces an earlier one's row
    for src in merge:
        for r in load_raw(Path(src)):
            if f"{r.kernel}@{r.device}" not in own:
                source[f"{r.kernel}@{r.device}"] = (r, str(src))
    merged = [r for r, _ in source.values()]
    if (out / "repro").exists():
        keep = {f"{r.kernel}-{r.device}-" for r in merged}
        for f in (out / "repro").glob("*.safetensors"):
            if not any(f.name.startswith(k) for k in keep):
                f.unlink()
    root = Path(report_root) if report_root else out
    links = _write_repros(out, rows, cases, root)
    for src in merge:  # bring the merged rows' reproducers and links along
        import shutil

        sdoc = (
            json.loads((Path(src) / "scoreboard.json").read_text())
            if (Path(src) / "scoreboard.json").is_file()
            else {"rows": []}
        )
        for r in sdoc["rows"]:
            key = f"{r['kernel']}@{r['device']}"
            if key not in source or source[key][1] != str(src) or not r.get("repro"):
                continue
            for chk, lk in r["repro"].items():
                (out / "repro").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(src) / lk["file"], out / lk["file"])
                lk["command"] = f"int8conf scoreboard --repro {root / lk['file']}"
                links.setdefault(key, {})[chk] = lk
    rows = rows + merged
    env = environment(devs)
    if merged:
        env["merged_from"] = [str(m) for m in merge]
        env["devices"] = sorted({r.device for r in rows})
        env["merged_environments"] = []
        for src in merge:
            p = Path(src) / "scoreboard.json"
            if p.is_file():
                env["merged_environments"].append(json.loads(p.read_text()).get("environment", {}))
    doc = portable_paths(build(rows, cases, links, env))  # no machine paths in the files
    atomic_write_json(out / "scoreboard.json", doc)
    atomic_write_text(out / "scoreboard.md", render_markdown(doc))
    render_png(doc, out / "scoreboard.png")
    return doc
