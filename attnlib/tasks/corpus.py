"""A small generated corpus with labelled syntax, for lesson 09 (keys that find roles).

Every sentence comes from a tiny grammar::

    sentence  = [fronted PP] subject-NP [modifier] VERB (ADJ | object-NP)
    NP        = "the" [ADJ] NOUN
    fronted PP = PREP NP                      e.g. "near the doors"
    modifier  = PREP NP                       e.g. "to the cabinets"
              | "that" NP RC-VERB             e.g. "that the men see"

and every token carries three labels: its part of speech (``pos``), its syntactic role
(``role``: which noun is the subject, which is an *attractor* inside the subject's
modifier, ...), and its grammatical number (``number``: ``sg``, ``pl`` or ``-``). The
main verb agrees with the subject head noun only, however many nouns of the other number
stand between them ("the key to the cabinets **is** ...").

The corpus is written as a plain TSV file (one token per line, a header, sentences
numbered from 0) by :func:`write_corpus`; :func:`generate` reproduces it byte for byte
from its seed, and :func:`load_corpus` reads it back. Nothing is downloaded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from attnlib._validate import check_int
from attnlib.tasks.shipped import data_file

__all__ = [
    "DATA_DIR",
    "CORPUS_PATH",
    "COLUMNS",
    "ROLES",
    "NOUNS",
    "Sentence",
    "generate",
    "to_tsv",
    "write_corpus",
    "load_corpus",
    "swap_subject_number",
    "vocabulary",
]

CORPUS_PATH = data_file("agreement_corpus.tsv")
DATA_DIR = CORPUS_PATH.parent
SEED = 9
N_SENTENCES = 3000

COLUMNS = ("sent", "position", "word", "pos", "role", "number")

# (singular, plural) pairs
NOUNS = (
    ("key", "keys"),
    ("cabinet", "cabinets"),
    ("dog", "dogs"),
    ("man", "men"),
    ("child", "children"),
    ("table", "tables"),
    ("door", "doors"),
    ("teacher", "teachers"),
    ("letter", "letters"),
    ("box", "boxes"),
)
MAIN_VERBS = (("is", "are"), ("was", "were"), ("has", "have"), ("sees", "see"))
RC_VERBS = (("sees", "see"), ("likes", "like"), ("opens", "open"))
ADJECTIVES = ("old", "red", "small", "new", "tall")
PREPOSITIONS = ("to", "near", "behind", "with", "under")

# Syntactic roles, in a fixed order (their index is the class of the role probes).
ROLES = (
    "det",  # "the"
    "adj",  # adjective inside a noun phrase, or after the verb
    "prep",  # preposition
    "rel",  # "that", opening a relative clause
    "fronted",  # noun inside a sentence-initial prepositional phrase
    "subject",  # the head noun of the subject: the main verb agrees with it
    "attractor",  # noun inside the subject's modifier (PP or relative clause)
    "rc_verb",  # verb of the relative clause (agrees with the attractor)
    "verb",  # the main verb
    "object",  # noun after the main verb
)
NOUN_ROLES = ("fronted", "subject", "attractor", "object")


@dataclass(frozen=True)
class Sentence:
    """One labelled sentence; all tuples have one entry per token.

    Attributes
    ----------
    words, pos, roles, numbers : tuple of str
        The tokens and their labels (``numbers`` is ``"sg"``, ``"pl"`` or ``"-"``).
    """

    words: tuple[str, ...]
    pos: tuple[str, ...]
    roles: tuple[str, ...]
    numbers: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.words)

    def index(self, role: str) -> int:
        """Position of the first token with this role, or -1 when there is none."""
        return self.roles.index(role) if role in self.roles else -1

    @property
    def verb(self) -> int:
        """Position of the main verb."""
        return self.roles.index("verb")

    @property
    def subject(self) -> int:
        """Position of the subject head noun."""
        return self.roles.index("subject")

    @property
    def attractor(self) -> int:
        """Position of the attractor noun, or -1 when the subject has no modifier."""
        return self.index("attractor")

    @property
    def label(self) -> str:
        """The number the main verb must show: the subject's, ``"sg"`` or ``"pl"``."""
        return self.numbers[self.subject]

    @property
    def hard(self) -> bool:
        """True when an attractor of the *other* number stands in the sentence."""
        a = self.attractor
        return a >= 0 and self.numbers[a] != self.label

    def text(self) -> str:
        return " ".join(self.words)


def _np(rng: random.Random, role: str, number: str | None = None):
    """(words, pos, roles, numbers) of one noun phrase "the [ADJ] NOUN"."""
    number = number or rng.choice(("sg", "pl"))
    noun = rng.choice(NOUNS)[number == "pl"]
    words, pos, roles, nums = ["the"], ["DET"], ["det"], ["-"]
    if rng.random() < 0.4:
        words.append(rng.choice(ADJECTIVES))
        pos.append("ADJ")
        roles.append("adj")
        nums.append("-")
    words.append(noun)
    pos.append("NOUN")
    roles.append(role)
    nums.append(number)
    return words, pos, roles, nums


def _sentence(rng: random.Random) -> Sentence:
    parts = []  # list of (words, pos, roles, numbers)
    if rng.random() < 0.3:  # fronted PP: "near the doors ..."
        parts.append(([rng.choice(PREPOSITIONS)], ["ADP"], ["prep"], ["-"]))
        parts.append(_np(rng, "fronted"))
    subject_number = rng.choice(("sg", "pl"))
    parts.append(_np(rng, "subject", subject_number))
    kind = rng.random()
    if kind < 0.45:  # PP modifier: "to the cabinets"
        parts.append(([rng.choice(PREPOSITIONS)], ["ADP"], ["prep"], ["-"]))
        parts.append(_np(rng, "attractor"))
    elif kind < 0.8:  # object relative clause: "that the men see"
        parts.append((["that"], ["PRON"], ["rel"], ["-"]))
        w, p, r, n = _np(rng, "attractor")
        parts.append((w, p, r, n))
        parts.append(([rng.choice(RC_VERBS)[n[-1] == "pl"]], ["VERB"], ["rc_verb"], [n[-1]]))
    verb = rng.choice(MAIN_VERBS)[subject_number == "pl"]
    parts.append(([verb], ["VERB"], ["verb"], [subject_number]))
    if rng.random() < 0.5:
        parts.append(([rng.choice(ADJECTIVES)], ["ADJ"], ["adj"], ["-"]))
    else:
        parts.append(_np(rng, "object"))
    words, pos, roles, nums = ([x for part in parts for x in part[i]] for i in range(4))
    return Sentence(tuple(words), tuple(pos), tuple(roles), tuple(nums))


def generate(n_sentences: int = N_SENTENCES, seed: int = SEED) -> list[Sentence]:
    """Draw ``n_sentences`` labelled sentences from the grammar, reproducibly from ``seed``."""
    check_int("generate", "n_sentences", n_sentences, minimum=1)
    rng = random.Random(seed)
    return [_sentence(rng) for _ in range(n_sentences)]


def to_tsv(sentences: list[Sentence]) -> str:
    """The TSV text of a corpus: a header, then one line per token (columns ``COLUMNS``)."""
    lines = ["\t".join(COLUMNS)]
    for i, s in enumerate(sentences):
        for j in range(len(s)):
            lines.append(f"{i}\t{j}\t{s.words[j]}\t{s.pos[j]}\t{s.roles[j]}\t{s.numbers[j]}")
    return "\n".join(lines) + "\n"


def write_corpus(
    path: str | Path = CORPUS_PATH, n_sentences: int = N_SENTENCES, seed: int = SEED
) -> Path:
    """Generate the corpus and write it to ``path`` (UTF-8, ``\\n`` line ends)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(to_tsv(generate(n_sentences, seed)).encode("utf-8"))
    return path


def load_corpus(path: str | Path = CORPUS_PATH) -> list[Sentence]:
    """Read a corpus TSV written by :func:`write_corpus` back into sentences."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"load_corpus: {path} does not exist; regenerate it with "
            "`python -m attnlib.tasks.corpus` (see data/README.md)"
        )
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or tuple(lines[0].split("\t")) != COLUMNS:
        raise ValueError(f"load_corpus: {path} must start with the header {COLUMNS}")
    rows: dict[int, list[list[str]]] = {}
    for k, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != len(COLUMNS):
            raise ValueError(f"load_corpus: line {k} of {path} has {len(fields)} fields")
        rows.setdefault(int(fields[0]), []).append(fields)
    out = []
    for i in range(len(rows)):
        toks = rows[i]
        if [int(t[1]) for t in toks] != list(range(len(toks))):
            raise ValueError(f"load_corpus: sentence {i} of {path} has positions out of order")
        out.append(Sentence(*(tuple(t[c] for t in toks) for c in range(2, 6))))
    return out


def swap_subject_number(sentence: Sentence) -> Sentence:
    """The same sentence with the subject noun in the other number ("key" <-> "keys").

    The subject word and the number labels of the subject and the main verb change; the
    verb's word keeps its old form (the model never sees it, ``[V]`` stands in its place).
    """
    i = sentence.subject
    words, numbers = list(sentence.words), list(sentence.numbers)
    pair = next(p for p in NOUNS if words[i] in p)
    plural = words[i] == pair[0]
    words[i] = pair[plural]
    numbers[i] = numbers[sentence.verb] = "pl" if plural else "sg"
    return Sentence(tuple(words), sentence.pos, sentence.roles, tuple(numbers))


def vocabulary() -> tuple[str, ...]:
    """Every word the grammar can produce, in a fixed order (no special tokens)."""
    words = ["the", "that", *ADJECTIVES, *PREPOSITIONS]
    for pair in NOUNS + MAIN_VERBS + RC_VERBS:
        words.extend(w for w in pair if w not in words)
    return tuple(words)


if __name__ == "__main__":  # python -m attnlib.tasks.corpus [PATH]
    import sys

    target = write_corpus(sys.argv[1] if len(sys.argv) > 1 else CORPUS_PATH)
    print(f"wrote {target}")
