"""Locks of prediction matrices: ``predictions/LOCK`` (DESIGN.md section 7), one appended line
per matrix: ``<sha256 of its bytes>  <file name>  chain=<sha256>``, ``chain_i =
sha256(chain_{i-1} + " " + digest + " " + name)`` (``chain_0`` = 64 zeros). Refused with one
line (``PredictionError``): an edited or unlocked matrix, a broken chain, an amendment whose
parent changed or whose change list is not the difference, a git history that rewrote them.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from predictions.matrix import PredictionMatrix, check_amendment, parse_matrix
from reference.errors import PredictionError
from reference.fileio import atomic_write_text

LOCK_NAME = "LOCK"
_HEADER = (
    "# int8conf prediction-matrix locks (DESIGN.md section 7): append-only, one line per\n"
    "# matrix, written when the matrix is created: <sha256>  <file>  chain=<sha256>\n"
)
_ZERO = "0" * 64


def default_dir() -> Path:
    """The project's ``predictions/`` directory."""
    return Path(__file__).resolve().parent


@dataclass(frozen=True)
class LockEntry:
    """One LOCK line: ``sha256`` of ``file`` (a name in the LOCK's directory) and its ``chain``."""

    sha256: str
    file: str
    chain: str


def _chain(prev: str, digest: str, name: str) -> str:
    return hashlib.sha256(f"{prev} {digest} {name}".encode()).hexdigest()


def read_lock(directory=None) -> list[LockEntry]:
    """Entries of ``<directory>/LOCK`` in file order (empty without a LOCK).
    PredictionError: malformed line, duplicate file, or broken chain."""
    d = Path(directory) if directory is not None else default_dir()
    p = d / LOCK_NAME
    if not p.is_file():
        return []
    out: list[LockEntry] = []
    prev = _ZERO
    for no, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith("chain=") or len(parts[0]) != 64:
            raise PredictionError(f"{p}: line {no} is not '<sha256>  <file>  chain=<sha256>'")
        digest, name, chain = parts[0], parts[1], parts[2][len("chain=") :]
        if any(e.file == name for e in out):
            raise PredictionError(
                f"{p}: {name} is locked twice (line {no}); a locked matrix is never re-locked, add an amendment instead"
            )
        if chain != _chain(prev, digest, name):
            raise PredictionError(
                f"{p}: chain broken at line {no} ({name}): an earlier lock line was rewritten; the LOCK is append-only"
            )
        out.append(LockEntry(digest, name, chain))
        prev = chain
    return out


def lock_entry(path) -> Optional[LockEntry]:
    """The LOCK entry of matrix ``path`` (None when it has none)."""
    path = Path(path)
    for e in read_lock(path.parent):
        if e.file == path.name:
            return e
    return None


def verify_matrix(path, _seen: Optional[set] = None) -> PredictionMatrix:
    """The validated matrix at ``path``, proved to be the locked one, and so is every
    matrix it amends. PredictionError: see the module docstring."""
    return _verified_chain(Path(path), set() if _seen is None else _seen)[-1]


def _verified_chain(path: Path, seen: set) -> list[PredictionMatrix]:
    """:func:`verify_matrix` of ``path``, returning it and every matrix it amends, oldest first
    (each parsed and verified once)."""
    if not path.is_file():
        raise PredictionError(f"prediction matrix {path} does not exist")
    if path.resolve() in seen:
        raise PredictionError(f"{path.name}: amends itself (cycle)")
    seen.add(path.resolve())
    data = path.read_bytes()
    m = parse_matrix(path, data)
    entry = lock_entry(path)
    if entry is None:
        raise PredictionError(
            f"{path.name} is not locked: no line for it in {path.parent / LOCK_NAME} "
            f"(lock it when it is created: int8conf predictions lock {path})"
        )
    if entry.sha256 != m.sha256:
        raise PredictionError(
            f"{path.name}: SHA-256 {m.sha256[:16]}... does not match its lock {entry.sha256[:16]}... "
            f"in {path.parent / LOCK_NAME}: a locked matrix was edited (add an amendment instead)"
        )
    if m.amends is None:
        return [m]
    parent_path = path.parent / m.amends["file"]
    if not parent_path.is_file():
        raise PredictionError(f"{path.name} amends {m.amends['file']}, which does not exist")
    actual = hashlib.sha256(parent_path.read_bytes()).hexdigest()
    if actual != m.amends["sha256"]:
        raise PredictionError(
            f"{path.name} amends {m.amends['file']}@{m.amends['sha256'][:16]}..., but that file "
            f"is now {actual[:16]}...: an earlier matrix was edited instead of amended"
        )
    chain = _verified_chain(parent_path, seen)
    check_amendment(chain[-1], m)
    return chain + [m]


def latest_locked(operands: str = "int8", directory=None) -> Path:
    """The newest matrix in ``<directory>/LOCK`` (default: the package's) that predicts for
    ``operands`` kernels (``PredictionMatrix.operands``; verified later, by :func:`matrix_chain`).
    PredictionError: none is locked, or a locked file is missing or invalid."""
    d = Path(directory) if directory is not None else default_dir()
    for e in reversed(read_lock(d)):
        p = d / e.file
        if not p.is_file():
            raise PredictionError(f"{d / LOCK_NAME} locks {e.file}, which does not exist")
        if parse_matrix(p, p.read_bytes()).operands == operands:
            return p
    raise PredictionError(f"no locked prediction matrix for {operands} kernels in {d}")


def matrix_chain(path) -> list[PredictionMatrix]:
    """The verified matrix at ``path`` and every matrix it amends, oldest first."""
    return _verified_chain(Path(path), set())


def lock_matrix(path) -> LockEntry:
    """Append the lock line of a new, validated matrix (an amendment: after verifying
    what it amends). PredictionError: invalid matrix or amendment, or already locked."""
    path = Path(path)
    entries = read_lock(path.parent)
    if any(e.file == path.name for e in entries):
        raise PredictionError(
            f"{path.name} is already locked; a locked matrix is never edited or "
            f"re-locked, add an amendment file instead"
        )
    data = path.read_bytes()
    m = parse_matrix(path, data)
    if m.amends is not None:
        parent_path = path.parent / m.amends["file"]
        parent = verify_matrix(parent_path)
        if parent.sha256 != m.amends["sha256"]:
            raise PredictionError(
                f"{path.name} amends {m.amends['file']}@{m.amends['sha256'][:16]}..., "
                f"but that file is now {parent.sha256[:16]}...: an earlier matrix was edited "
                f"instead of amended"
            )
        check_amendment(parent, m)
    prev = entries[-1].chain if entries else _ZERO
    e = LockEntry(m.sha256, path.name, _chain(prev, m.sha256, path.name))
    lock = path.parent / LOCK_NAME
    old = lock.read_text(encoding="utf-8") if lock.is_file() else _HEADER
    if old and not old.endswith("\n"):
        old += "\n"
    atomic_write_text(lock, old + f"{e.sha256}  {e.file}  chain={e.chain}\n")
    return e


def _git(repo: Path, *args: str) -> Optional[str]:
    try:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def verify_git_history(directory=None) -> Optional[dict]:
    """Prove from committed history that the LOCK only grew by appended lines and that no locked matrix's
    committed bytes changed from the commit that locked it on (the first commit whose LOCK names it; drafts
    committed before it were no prediction yet: the sweep scores locked matrices only): ``{"lock_commits": n,
    "matrices": {file: its locking commit}}``, None outside a git work tree. PredictionError names the commit."""
    d = Path(directory).resolve() if directory is not None else default_dir()
    top = _git(d, "rev-parse", "--show-toplevel")
    if top is None:
        return None
    repo = Path(top.strip())
    rel = d.relative_to(repo).as_posix()
    lock_rel = f"{rel}/{LOCK_NAME}"
    commits = (_git(repo, "log", "--reverse", "--format=%H", "--", lock_rel) or "").split()
    prev = ""
    locked_at: dict = {}
    for c in commits:
        cur = _git(repo, "show", f"{c}:{lock_rel}")
        if cur is None:
            raise PredictionError(f"commit {c[:10]} deleted {lock_rel}; the LOCK is append-only")
        if not cur.startswith(prev):
            raise PredictionError(
                f"commit {c[:10]} rewrote lines of {lock_rel} instead of appending; the LOCK is append-only"
            )
        for line in cur[len(prev) :].splitlines():
            parts = line.split()
            if len(parts) == 3 and not line.startswith("#"):
                locked_at.setdefault(parts[1], c)
        prev = cur
    first: dict = {}
    for e in read_lock(d):
        f_rel = f"{rel}/{e.file}"
        since = locked_at.get(e.file)
        if since is None:  # locked in the work tree only: nothing committed to compare yet
            continue
        after = (_git(repo, "log", "--reverse", "--format=%H", f"{since}..", "--", f_rel) or "").split()
        blobs = set()
        for c in [since, *after]:
            b = _git(repo, "rev-parse", "--verify", "-q", f"{c}:{f_rel}")
            if b is None:
                why = "locked it without committing it" if c == since else "deleted locked matrix"
                raise PredictionError(f"commit {c[:10]} {why} {f_rel}")
            blobs.add(b.strip())
        if len(blobs) > 1:
            raise PredictionError(
                f"{f_rel} changed after the commit that locked it ({since[:10]}; {len(blobs)} "
                f"versions since): a locked matrix is never edited"
            )
        first[e.file] = since
    return {"lock_commits": len(commits), "matrices": first}
