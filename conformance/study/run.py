"""The power-of-two study end to end: settings, the parts in order, resumable part results, the report.

The reconstruction gate runs first (nothing else runs if no quantization rule reproduces the committed checkpoint),
then :data:`PARTS` in order, then the report and pictures. Each finished part is stored as ``<out>/.parts/<part>.json``
with the settings and input identity it was computed under; a rerun with the same key reuses it.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from conformance.kernels.spec import enter_conformance_run
from conformance.study import accuracy, e2e_agreement, flips, layer_agreement, reconstruction
from conformance.study.arms import StudyContext, kernel_record
from conformance.study.bootstrap import MIN_RESAMPLES
from conformance.study.e2e_agreement import prompt_token_ids
from conformance.study.interp import study_kernel
from conformance.study.layer_agreement import TOKENS_PER_WINDOW, WINDOW_LEN
from conformance.study.model_run import resolve_kernel_list
from conformance.study.report import write_report
from reference.errors import Int8confError, first_line
from reference.fileio import atomic_write_json
from reference.model.artifacts import build_code_digest, derived_checkpoint, load_parent, weight_files
from reference.model.forward import check_context

SCHEMA = "int8conf.study.pow2"
SCHEMA_VERSION = 1
#: Execution order: the gate first, the most expensive part (generation) last, so a time budget cuts the least.
PARTS = ("gate", "layer_agreement", "accuracy", "flips", "e2e_agreement")

#: Size defaults per kernel device (``int8conf study pow2``); both run 8 prompts x 64 new tokens.
DEFAULTS = {
    "cpu": dict(tokens=512, windows=32, window_len=128, flip_windows=4, prompts=8, new_tokens=64, fresh_process="a"),
    "cuda": dict(
        tokens=2048, windows=64, window_len=256, flip_windows=16, prompts=8, new_tokens=64, fresh_process="both"
    ),
}


@dataclass
class StudySettings:
    """Everything that determines the study's numbers. ``kernels``: the two names as given (``"cpu"``,
    ``"triton"``, ``pkg.mod:fn``); ``device``: where the kernels run; ``committed_dir`` None: the reference
    quantizer's checkpoint; ``tokens``: captured rows per layer; ``fresh_process``: ``"none"``, ``"a"`` or
    ``"both"``; ``batch_size``: windows per teacher-forced forward."""

    model_dir: str
    kernels: tuple
    device: str = "cpu"
    committed_dir: Optional[str] = None
    tokens: int = 512
    windows: int = 32
    window_len: int = 128
    flip_windows: int = 4
    prompts: int = 2
    new_tokens: int = 8
    resamples: int = 10_000
    seed: int = 0
    level: float = 0.9
    fresh_process: str = "a"
    batch_size: int = 8

    def part_key(self, part: str, identity: Optional[dict] = None) -> dict:
        """The cache key of one part: the settings it depends on and ``identity`` (:func:`input_identity`)."""
        common = {"model_dir": self.model_dir, "committed_dir": self.committed_dir, "identity": identity or {}}
        k = {"kernels": list(self.kernels), "device": self.device}
        on = {  # the settings each part depends on, in key order
            "gate": (),
            "layer_agreement": ("tokens",),
            "e2e_agreement": ("prompts", "new_tokens", "fresh_process"),
            "accuracy": ("windows", "window_len", "resamples", "seed", "level", "batch_size"),
            "flips": ("flip_windows", "window_len", "batch_size"),
        }[part]
        return dict(common, **(dict(k, **{n: getattr(self, n) for n in on}) if on else {}))


def input_identity(pdigest: str, committed_dir: Optional[str], kernels) -> dict:
    """What a study's inputs *are*, part of every part's key: ``{"model": pdigest (the parent's state digest),
    "committed": SHA-256 of a given checkpoint's weight files (contents, in name order) or else the quantizer's
    build-code digest, "kernels": the KernelSpecs' source digests, "study_code": SHA-256 of this package's
    modules}``."""
    committed = build_code_digest() if committed_dir is None else _files_sha256(Path(committed_dir))
    h = hashlib.sha256()
    for f in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return {
        "model": pdigest,
        "committed": committed,
        "kernels": [getattr(k, "source_digest", "") for k in kernels],
        "study_code": h.hexdigest(),
    }


def _files_sha256(d: Path) -> str:
    """SHA-256 over ``weight_files(d)``: each file's name, NUL, its bytes."""
    h = hashlib.sha256()
    for p in weight_files(d.resolve()):
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()


def check_settings(s: StudySettings, need_device: bool = True) -> None:
    """Reject bad settings with one line (Int8confError); ``need_device`` False (``--report-only``): a missing
    CUDA device is no error (the parts may come from another machine)."""
    if len(s.kernels) != 2 or not all(s.kernels):
        raise Int8confError(f"--kernels needs exactly two kernels A,B, got {','.join(s.kernels)!r}")
    if s.kernels[0] == s.kernels[1]:
        raise Int8confError(
            f"--kernels {','.join(s.kernels)}: A and B are the same kernel (the study "
            f"compares two; a kernel against itself is the fresh-process comparison)"
        )
    if s.device not in ("cpu", "cuda"):
        raise Int8confError(f"--device {s.device!r} is not 'cpu' or 'cuda'")
    if s.device == "cuda" and need_device and not torch.cuda.is_available():
        raise Int8confError("--device cuda: no CUDA device on this machine")
    if s.resamples < MIN_RESAMPLES:
        raise Int8confError(f"--resamples {s.resamples} is below the minimum {MIN_RESAMPLES}")
    if not 0.0 < s.level < 1.0:
        raise Int8confError(f"--level {s.level} is not in (0, 1)")
    for name in ("tokens", "windows", "flip_windows", "prompts", "batch_size"):
        if getattr(s, name) < 1:
            raise Int8confError(f"--{name.replace('_', '-')} {getattr(s, name)} must be >= 1")
    if s.windows < 2:
        raise Int8confError(f"--windows {s.windows}: a window bootstrap needs at least 2 windows")
    if s.window_len < 2:
        raise Int8confError(f"--window-len {s.window_len} must be >= 2")
    if s.fresh_process not in ("none", "a", "both"):
        raise Int8confError(f"--fresh-process {s.fresh_process!r} is not one of none, a, both")
    if s.new_tokens < 1:
        raise Int8confError(f"--new-tokens {s.new_tokens} must be >= 1")


def _preflight(ctx, s: StudySettings, config: dict) -> None:
    """Size checks that need the model (context, tokenizer, corpus), before the gate; raises Int8confError /
    OperandError naming the option."""
    check_context(s.window_len, config, f"--window-len {s.window_len}")
    longest = max(len(p) for p in prompt_token_ids(ctx, s.prompts))
    check_context(longest + s.new_tokens, config, f"longest prompt ({longest} tokens) + --new-tokens ({s.new_tokens})")
    cw = -(-s.tokens // TOKENS_PER_WINDOW)  # capture windows
    for what, n, length in (
        (f"--windows {s.windows} (--window-len {s.window_len})", s.windows, s.window_len),
        (f"--flip-windows {s.flip_windows} (--window-len {s.window_len})", s.flip_windows, s.window_len),
        (f"--tokens {s.tokens} ({cw} capture windows of {WINDOW_LEN} tokens)", cw, WINDOW_LEN),
    ):
        try:
            ctx.windows(n, length)
        except Int8confError as e:
            raise Int8confError(f"{what}: {first_line(e)}") from None


def _read_part(out: Path, part: str) -> Optional[dict]:
    try:
        return json.loads((out / ".parts" / f"{part}.json").read_text())
    except (OSError, ValueError):
        return None


def _load_part(out: Path, part: str, key: dict) -> Optional[dict]:
    rec = _read_part(out, part)
    return rec.get("result") if rec is not None and rec.get("key") == key else None


def _save_part(out: Path, part: str, key: dict, result: dict, seconds: float, device: str) -> None:
    atomic_write_json(
        out / ".parts" / f"{part}.json",
        {"key": key, "result": result, "seconds": seconds, "environment": _environment(device)},
        allow_nan=True,
    )


def _part_environments(out: Path, parts) -> dict:
    """``{part: environment}`` recorded with the stored parts (where they ran)."""
    recs = {name: _read_part(out, name) for name in parts}
    return {name: rec["environment"] for name, rec in recs.items() if rec is not None and rec.get("environment")}


def run_study(
    settings: StudySettings,
    out_dir,
    cache=None,
    progress: Optional[Callable[[str], None]] = None,
    time_budget_s: Optional[float] = None,
    report_only: bool = False,
) -> dict:
    """Run (or resume) the study, write ``study.json``, ``study.md`` and the PNGs into ``out_dir``, and return
    the report dict. ``time_budget_s``: start no new part after this many seconds (parts not run are listed as
    ``missing_parts``); ``report_only``: compute nothing beyond the gate, render from the stored parts. Raises
    Int8confError subclasses: bad settings, unknown kernels, a failed reconstruction gate, a bad model directory.
    """
    check_settings(settings, need_device=not report_only)
    enter_conformance_run()
    say = progress or (lambda s: None)
    out = Path(out_dir)
    if not report_only:  # --report-only computes nothing: no directory of its own
        out.mkdir(parents=True, exist_ok=True)
    # the built-in triton kernel under the interpreter runs with larger tiles (same bits); others as registered
    resolved = [resolve_kernel_list(k)[0] for k in settings.kernels]
    if resolved[0].scaled_mm is resolved[1].scaled_mm and resolved[0].contract == resolved[1].contract:
        raise Int8confError(
            f"--kernels {','.join(settings.kernels)}: A and B are the same function "
            f"under the same declared contract (the study compares two kernels)"
        )
    kernels = tuple(study_kernel(spec, settings.device) for spec in resolved)
    model_dir = Path(settings.model_dir)
    config, state, pdigest = load_parent(model_dir)
    if "quantization_config" in config or "compression_config" in config:
        raise Int8confError(
            f"{model_dir}: is a quantized checkpoint; --model takes the float parent "
            f"(pass the W8A8 checkpoint as --committed)"
        )
    identity = input_identity(pdigest, settings.committed_dir, kernels)
    # before any checkpoint is built into the cache
    if report_only and not any(_load_part(out, p, settings.part_key(p, identity)) is not None for p in PARTS[1:]):
        raise Int8confError(
            f"--report-only: no finished part under {out} matches these settings "
            f"(model, committed checkpoint, kernels, sizes, code); run without "
            f"--report-only to compute them"
        )
    committed_dir = Path(settings.committed_dir) if settings.committed_dir else None
    cache = Path(cache) if cache is not None else None
    ctx = StudyContext(model_dir, kernels, settings.device, committed_dir, cache)
    if not report_only:
        _preflight(ctx, settings, config)
    committed = committed_dir or derived_checkpoint(model_dir, "own", cache, ctx.work_device).dir
    results, seconds, missing = {}, {}, {}
    t_start = time.perf_counter()

    def part(name, fn):
        key = settings.part_key(name, identity)
        got = _load_part(out, name, key)
        if got is not None:
            say(f"{name}: reused from {out / '.parts' / (name + '.json')}")
            results[name], seconds[name] = got, _read_part(out, name)["seconds"]
            return
        over = time_budget_s is not None and time.perf_counter() - t_start > time_budget_s
        if name != "gate" and (report_only or over):
            missing[name] = "report only" if report_only else "time budget reached"
            say(f"{name}: not run ({missing[name]})")
            results[name] = None
            return
        t0 = time.perf_counter()
        results[name] = fn()
        seconds[name] = round(time.perf_counter() - t0, 1)
        _save_part(out, name, key, results[name], seconds[name], settings.device)
        say(f"{name}: done in {seconds[name]} s")

    s = settings
    part("gate", lambda: reconstruction.run_gate(model_dir, committed, (config, state)))
    if s.committed_dir is None and results["gate"]["which_rule"]["rule"] != "cpu":
        raise Int8confError("internal: the reference quantizer's checkpoint is not reproduced by the cpu rule")
    part("layer_agreement", lambda: layer_agreement.run_layer_agreement(ctx, s.tokens, say))
    part(
        "accuracy",
        lambda: accuracy.run_accuracy(ctx, s.windows, s.window_len, s.resamples, s.seed, s.level, s.batch_size, say),
    )
    part("flips", lambda: flips.run_flips(ctx, s.flip_windows, s.window_len, batch_size=s.batch_size, progress=say))
    part(
        "e2e_agreement",
        lambda: e2e_agreement.run_e2e_agreement(
            ctx,
            tuple(s.kernels),
            s.prompts,
            s.new_tokens,
            fresh=s.fresh_process,
            progress=say,
            resume_dir=out / ".parts" / "e2e_runs",
            resume_key=s.part_key("e2e_agreement", identity),
        ),
    )
    # the environment the numbers were computed in, recorded with the parts (--report-only may render elsewhere)
    envs = _part_environments(out, [p for p in PARTS if results.get(p) is not None])
    env = next((envs[p] for p in PARTS[1:] if p in envs), None)
    if env is None:
        env = (
            _environment(s.device)
            if not (report_only and s.device == "cuda")
            else {"device": s.device, "note": "not recorded with the stored parts"}
        )
    report = build_report(s, ctx, kernels, config, pdigest, committed, results, seconds, env)
    report.update(missing_parts=list(missing), missing_reasons=missing)
    write_report(report, out)
    say(f"report written to {out / 'study.md'}")
    return report


def _environment(device: str) -> dict:
    import torch

    from conformance.runtime.environment import environment

    env = {**environment(), "device": device, "cpu_threads": torch.get_num_threads()}
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


_CONFIG_KEYS = (
    "num_hidden_layers hidden_size intermediate_size num_attention_heads num_key_value_heads vocab_size".split()
)


def build_report(
    settings, ctx, kernels, config, pdigest, committed, results, seconds, environment: Optional[dict] = None
) -> dict:
    """The JSON report (schema :data:`SCHEMA` v:data:`SCHEMA_VERSION`)."""
    n_params = sum(p.numel() for p in ctx.base.parameters())
    la, e2e, acc, fl = (results[k] for k in ("layer_agreement", "e2e_agreement", "accuracy", "flips"))
    first = ((la or {}).get("layers", {}).get("own") or [{}])[0].get("paths") or [None, None]
    # the code path each kernel took on the study's device (first captured layer)
    paths = {spec.name: {"path": p, "device": settings.device} for spec, p in zip(kernels, first)}
    limits = {
        "model": f"{config.get('num_hidden_layers')} blocks, hidden {config.get('hidden_size')}, "
        f"{n_params / 1e6:.1f} M parameters ({settings.model_dir})",
        "corpus": "held-out works of the bundled Shakespeare corpus (reference.model.corpus eval_windows)",
        "accuracy_windows": f"{settings.windows} windows x {settings.window_len} tokens = "
        f"{settings.windows * (settings.window_len - 1)} predicted tokens (bootstrap unit: window)",
        "flip_windows": f"{settings.flip_windows} windows x {settings.window_len} tokens",
        "captured_tokens": (
            f"{la['capture']['tokens_per_layer']} rows per layer x {la['capture']['layers']} layers"
            if la
            else f"{settings.tokens} rows per layer"
        ),
        "e2e": f"{settings.prompts} of the 8 fixed prompts x {settings.new_tokens} new tokens",
        "device": settings.device,
        "scope": "every number describes this model on this corpus and these windows; a random-weight "
        "model's perplexities mean nothing about accuracy (its agreement counts still hold)",
    }
    if any((getattr(k, "description", "") or "").endswith("conformance.study.interp]") for k in kernels):
        limits["interpreter_tiles"] = (
            "built-in triton under the Triton interpreter with the study's larger tiles "
            "(conformance.study.interp; same bits as its default tiles)"
        )
    if acc:
        acc = dict(acc, scope=f"{limits['model']}; {limits['corpus']}; {limits['accuracy_windows']}")
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "settings": asdict(settings),
        "environment": environment if environment is not None else _environment(settings.device),
        "model": {
            "dir": settings.model_dir,
            "digest": pdigest,
            "parameters": n_params,
            "config": {k: config.get(k) for k in _CONFIG_KEYS},
            "committed_checkpoint": str(committed),
        },
        "kernels": [kernel_record(s, paths.get(s.name)) for s in kernels],
        "limits": limits,
        "seconds": seconds,
        "gate": results["gate"],
        "layer_agreement": la,
        "e2e_agreement": e2e,
        "accuracy": acc,
        "flips": fl,
    }
