"""Train the default model shipped in ``reference/model/assets/default_model/``.

:func:`train_tokenizer` (byte-level BPE on the train works), then :func:`train_model` (a small Qwen3,
:class:`ModelShape`; the best-validation checkpoint saved in bf16, reproducing the figures, not the bytes, on GPU).
``train_log.json`` records config, loss curve and held-out perplexity against a unigram baseline. Run
``python3 -m reference.model.train --out DIR --device cuda`` (``--tokenizer-only`` first)."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from reference.errors import CheckpointError
from reference.fileio import atomic_write_json
from reference.model.assets import default_model_dir, write_manifest
from reference.model.build_corpus import sha256_hex
from reference.model.corpus import load_corpus_split
from reference.model.tokenizer import EOT, token_stream

SEED = 1234
VOCAB_SIZE = 4096


@dataclass
class ModelShape:
    """Architecture of the default model (Qwen3Config fields)."""

    vocab_size: int = VOCAB_SIZE
    hidden_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 6
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    rope_theta: float = 1000000.0  # Qwen3's default: config reads the same in transformers 4.x and 5.x
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True


@dataclass
class TrainConfig:
    """Optimisation hyper-parameters (logged in train_log.json); the defaults produced the shipped model."""

    seed: int = SEED
    steps: int = 900
    batch_size: int = 32
    seq_len: int = 512
    lr: float = 1.5e-3
    min_lr: float = 1.5e-4
    warmup: int = 150
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    grad_clip: float = 1.0
    embed_dropout: float = 0.2
    attention_dropout: float = 0.1
    eval_every: int = 50
    time_limit_s: float = 300.0  # training-loop wall-clock cap (device budget)
    shape: ModelShape = field(default_factory=ModelShape)


def build_tokenizer(train_texts: list[str], vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE ``tokenizers.Tokenizer`` (GPT-2 regex, no prefix space, all 256 bytes, ``<|endoftext|>`` = id 0,
    min pair frequency 2) trained on ``train_texts``; deterministic."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    kw = dict(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT], show_progress=False)
    trainer = trainers.BpeTrainer(**kw, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_texts, trainer=trainer)
    return tok


def save_tokenizer(tok, out_dir: Path, model_max_length: int = 512) -> None:
    """Write ``tokenizer.json`` + ``tokenizer_config.json`` (``PreTrainedTokenizerFast``; eos = pad = EOT, no bos)."""
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOT, pad_token=EOT, model_max_length=model_max_length
    )
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        fast.save_pretrained(tmp)
        os.chmod(Path(tmp) / "tokenizer.json", 0o644)
        os.replace(Path(tmp) / "tokenizer.json", out_dir / "tokenizer.json")
    # Written by hand: transformers 5 would record "TokenizersBackend", which 4.x cannot load.
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOT, "pad_token": EOT, "bos_token": None}
    cfg |= {"unk_token": None, "model_max_length": model_max_length, "clean_up_tokenization_spaces": False}
    atomic_write_json(out_dir / "tokenizer_config.json", cfg)


def train_tokenizer(out_dir: Path) -> dict:
    """Build the tokenizer of the train works into ``out_dir``; returns ``{"vocab_size", "tokenizer_sha256"}``."""
    tok = build_tokenizer(list(load_corpus_split()["train"].values()))
    save_tokenizer(tok, out_dir)
    digest = sha256_hex((Path(out_dir) / "tokenizer.json").read_bytes())
    return {"vocab_size": tok.get_vocab_size(), "tokenizer_sha256": digest}


def make_config(shape: ModelShape, eos_id: int, attention_dropout: float = 0.0):
    """``transformers.Qwen3Config`` for ``shape`` (dtype recorded as bf16)."""
    from transformers import Qwen3Config

    d = asdict(shape)
    d["rope_parameters"] = {"rope_type": "default", "rope_theta": d.pop("rope_theta")}
    d |= dict(attention_dropout=attention_dropout, attention_bias=False, hidden_act="silu", bos_token_id=None)
    return Qwen3Config(**d, eos_token_id=eos_id, pad_token_id=eos_id, use_cache=True, dtype="bfloat16")


def unigram_nll(train_ids: torch.Tensor, targets: torch.Tensor, vocab: int) -> float:
    """Mean NLL (nats/token) of ``targets`` under the add-one-smoothed unigram of ``train_ids``."""
    counts = torch.bincount(train_ids.flatten(), minlength=vocab).double() + 1.0
    logp = counts.log() - counts.sum().log()
    return float(-logp[targets.flatten()].mean())


@torch.no_grad()
def model_nll(model, windows: torch.Tensor, batch: int = 16, autocast: bool = False) -> float:
    """Mean teacher-forced next-token NLL (nats/token) over ``windows`` [W, L] (targets: positions 1..L-1)."""
    model.eval()
    dev = next(model.parameters()).device
    total, count = 0.0, 0
    for i in range(0, windows.shape[0], batch):
        x = windows[i : i + batch].to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x[:, :-1]).logits.float()
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
        count += x[:, 1:].numel()
    return total / count


def all_windows(stream: torch.Tensor, length: int) -> torch.Tensor:
    """All consecutive non-overlapping windows ``[len // length, length]``."""
    w = stream.numel() // length
    return stream[: w * length].view(w, length)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup then cosine decay from ``lr`` to ``min_lr`` over ``steps``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * t))


@torch.no_grad()
def sample(model, tok, prompt: str, max_new_tokens: int = 60, greedy: bool = True, seed: int = SEED) -> str:
    """Prompt + continuation from ``model.generate`` (greedy, or seeded temperature 0.8 / top-k 40)."""
    dev = next(model.parameters()).device
    ids = torch.tensor([tok.encode(prompt).ids], device=dev)
    torch.manual_seed(seed)
    kw = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=0.8, top_k=40)
    kw |= dict(attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, pad_token_id=tok.token_to_id(EOT))
    out = model.generate(ids, **kw)
    return tok.decode(out[0].tolist())


def save_model(model, out_dir: Path, eos_id: int) -> None:
    """Save ``model`` in bf16 (safetensors, config, generation config) into ``out_dir``, each file atomically."""
    from transformers import GenerationConfig

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.config.attention_dropout = 0.0  # training-only regulariser
    gen = GenerationConfig(eos_token_id=eos_id, pad_token_id=eos_id, do_sample=False, max_new_tokens=64)
    model.generation_config = gen
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        model.to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
        for name in ("config.json", "generation_config.json", "model.safetensors"):
            os.chmod(Path(tmp) / name, 0o644)
            os.replace(Path(tmp) / name, out_dir / name)


def train_model(out_dir: Path, cfg: TrainConfig, device: str, state_path: Path | None = None) -> dict:
    """Train the default model into ``out_dir`` (holding the tokenizer); returns the log written to ``train_log.json``.
    ``state_path``: training state saved there at every evaluation and resumed from if present."""
    from transformers import Qwen3ForCausalLM

    out_dir = Path(out_dir)
    tok_path = out_dir / "tokenizer.json"
    if not tok_path.is_file():
        raise CheckpointError(f"{tok_path}: missing; run with --tokenizer-only first")
    tok = Tokenizer.from_file(str(tok_path))
    eos = tok.token_to_id(EOT)
    t0 = time.time()
    split = load_corpus_split()
    streams = {
        k: torch.tensor(token_stream(tok, split[k]), dtype=torch.long) for k in ("train", "validation", "heldout")
    }
    counts = ", ".join(f"{k}={v.numel()}" for k, v in streams.items())
    print(f"tokens: {counts} ({time.time() - t0:.1f}s)", flush=True)

    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    torch.cuda.manual_seed_all(cfg.seed)
    dev = torch.device(device)
    config = make_config(cfg.shape, eos, cfg.attention_dropout)
    model = Qwen3ForCausalLM(config).to(dev).float()
    n_params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())  # tied embedding once
    print(f"params: {n_params}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=dev.type == "cuda")
    gen = torch.Generator().manual_seed(cfg.seed)
    train = streams["train"].to(dev)
    val_windows = all_windows(streams["validation"], cfg.seq_len)
    step, best, curve, best_state = 0, float("inf"), [], None
    if state_path is not None and Path(state_path).is_file():
        st = torch.load(state_path, map_location=dev, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        gen.set_state(st["gen"])
        step, best, curve, best_state = st["step"], st["best"], st["curve"], st["best_state"]
        print(f"resumed at step {step}", flush=True)

    offsets_hi = train.numel() - cfg.seq_len - 1
    t_train = time.time()
    stopped_early = False
    while step < cfg.steps:
        model.train()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        off = torch.randint(0, offsets_hi, (cfg.batch_size,), generator=gen).to(dev)
        idx = off[:, None] + torch.arange(cfg.seq_len + 1, device=dev)[None, :]
        xy = train[idx]
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            emb = F.dropout(model.model.embed_tokens(xy[:, :-1]), cfg.embed_dropout, training=True)
            logits = model(inputs_embeds=emb).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        step += 1
        out_of_time = time.time() - t_train > cfg.time_limit_s
        if step % cfg.eval_every == 0 or step == cfg.steps or out_of_time:
            val = model_nll(model, val_windows, autocast=True)
            point = {"step": step, "train_loss": loss.item(), "val_loss": val, "lr": lr_at(step - 1, cfg)}
            curve.append(point | {"elapsed_s": round(time.time() - t_train, 1)})
            if val < best:
                best = val
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            msg = f"step {step:5d} loss {loss.item():.3f} val {val:.3f} (ppl {math.exp(val):.1f}) best {best:.3f}"
            print(f"{msg} {time.time() - t_train:.0f}s", flush=True)
            if state_path is not None:
                fd, tmp = tempfile.mkstemp(dir=Path(state_path).parent, suffix=".tmp")
                os.close(fd)
                st = {"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "step": step}
                torch.save(st | {"best": best, "curve": curve, "best_state": best_state}, tmp)
                os.replace(tmp, state_path)
        if out_of_time:
            stopped_early = True
            print(f"time limit {cfg.time_limit_s}s reached at step {step}", flush=True)
            break
    train_s = time.time() - t_train

    model.load_state_dict(best_state)
    model = model.to(torch.bfloat16).eval()
    ho = all_windows(streams["heldout"], cfg.seq_len)
    ho_nll = model_nll(model, ho)
    uni_nll = unigram_nll(streams["train"], ho[:, 1:], cfg.shape.vocab_size)
    prompt = "Shall I compare thee to a summer's day?"
    samples = {"greedy": sample(model, tok, prompt), "sampled_t0.8_k40": sample(model, tok, prompt, greedy=False)}
    print(f"held-out ppl (bf16) {math.exp(ho_nll):.2f} vs unigram {math.exp(uni_nll):.2f}", flush=True)
    print(samples["greedy"], flush=True)
    save_model(model, out_dir, eos)
    env = {"torch": torch.__version__, "python": platform.python_version()}
    env |= {"transformers": __import__("transformers").__version__, "tokenizers": __import__("tokenizers").__version__}
    env["device"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    heldout_eval = {"windows": int(ho.shape[0]), "window_len": cfg.seq_len, "target_tokens": int(ho[:, 1:].numel())}
    heldout_eval |= {"model_dtype": "bfloat16", "model_nll": ho_nll, "model_ppl": math.exp(ho_nll)}
    heldout_eval |= {"unigram_nll": uni_nll, "unigram_ppl": math.exp(uni_nll)}
    heldout_eval["unigram"] = "add-one smoothed counts over train tokens"
    log = {"model_shape": asdict(cfg.shape), "train_config": {k: v for k, v in asdict(cfg).items() if k != "shape"}}
    log |= {"parameters": n_params, "steps_done": step, "stopped_by_time_limit": stopped_early}
    log |= {"train_seconds": round(train_s, 1), "best_val_loss": best, "best_val_ppl": math.exp(best), "curve": curve}
    log |= {"tokens": {k: int(v.numel()) for k, v in streams.items()}, "heldout_eval": heldout_eval, "samples": samples}
    log |= {"tokenizer_sha256": sha256_hex(tok_path.read_bytes()), "corpus_sha256": split["meta"]["corpus_sha256"]}
    log["env"] = env
    atomic_write_json(out_dir / "train_log.json", log)
    return log


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None, help="model dir (default: reference/model/assets/default_model)")
    p.add_argument("--tokenizer-only", action="store_true", help="only (re)build tokenizer.json")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    for flag, typ, what in (
        ("--steps", int, "optimizer steps"),
        ("--batch-size", int, "training sequences per step"),
        ("--eval-every", int, "steps between held-out evaluations"),
        ("--lr", float, "peak learning rate"),
        ("--embed-dropout", float, "dropout on the embeddings"),
        ("--attention-dropout", float, "dropout on the attention weights"),
    ):
        default = getattr(TrainConfig, flag[2:].replace("-", "_"))
        p.add_argument(flag, type=typ, default=default, help=f"{what} (default {default:g})")
    p.add_argument(
        "--time-limit", type=float, default=TrainConfig.time_limit_s, help="stop after this many seconds of training"
    )
    p.add_argument("--state", type=Path, default=None, help="resumable training-state file")


def run(args: argparse.Namespace) -> int:
    """Build the tokenizer (if ``--tokenizer-only`` or missing) and train; refresh the asset manifest for the shipped
    dir. Returns the exit code."""
    out = Path(args.out) if args.out else default_model_dir()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.tokenizer_only or not (out / "tokenizer.json").is_file():
        print(json.dumps(train_tokenizer(out)), flush=True)
    if not args.tokenizer_only:
        kw = dict(
            steps=args.steps, batch_size=args.batch_size, eval_every=args.eval_every, time_limit_s=args.time_limit
        )
        kw |= dict(lr=args.lr, min_lr=args.lr / 10, embed_dropout=args.embed_dropout)
        log = train_model(out, TrainConfig(**kw, attention_dropout=args.attention_dropout), device, args.state)
        ho = log["heldout_eval"]
        summary = {k: log[k] for k in ("parameters", "steps_done", "train_seconds")}
        print(json.dumps(summary | {"heldout_ppl": ho["model_ppl"], "unigram_ppl": ho["unigram_ppl"]}), flush=True)
    if out.resolve() == default_model_dir().resolve():
        write_manifest()
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m reference.model.train [--tokenizer-only] [--out DIR] ...``."""
    p = argparse.ArgumentParser(description="train the default Qwen3 model (see reference/model/train.py)")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
