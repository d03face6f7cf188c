"""The generated agreement corpus: byte-for-byte regeneration, and the grammar's promises."""

from __future__ import annotations

from collections import Counter

import pytest

from attnlib.tasks import corpus


@pytest.fixture(scope="module")
def sentences():
    return corpus.load_corpus()


def test_committed_corpus_regenerates_byte_for_byte(tmp_path):
    out = corpus.write_corpus(tmp_path / "agreement_corpus.tsv")
    assert out.read_bytes() == corpus.CORPUS_PATH.read_bytes()


def test_command_line_regenerates_it(tmp_path, python):
    import subprocess

    target = tmp_path / "c.tsv"
    cmd = [python, "-m", "attnlib.tasks.corpus", str(target)]
    subprocess.run(cmd, check=True, capture_output=True)
    assert target.read_bytes() == corpus.CORPUS_PATH.read_bytes()


def test_another_seed_gives_another_corpus():
    assert corpus.to_tsv(corpus.generate(50, seed=1)) != corpus.to_tsv(corpus.generate(50))


def test_load_round_trips_generate(sentences):
    assert sentences == corpus.generate()


def test_header_and_columns():
    lines = corpus.CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    assert lines[0].split("\t") == list(corpus.COLUMNS)
    assert all(len(line.split("\t")) == len(corpus.COLUMNS) for line in lines[1:])


def test_every_verb_agrees_with_its_subject(sentences):
    for s in sentences:
        assert s.numbers[s.verb] == s.numbers[s.subject] == s.label
        pair = next(p for p in corpus.MAIN_VERBS if s.words[s.verb] in p)
        assert s.words[s.verb] == pair[s.label == "pl"], s.text()


def test_noun_forms_match_their_number_labels(sentences):
    singular = {sg for sg, _ in corpus.NOUNS}
    plural = {pl for _, pl in corpus.NOUNS}
    for s in sentences:
        for w, pos, role, num in zip(s.words, s.pos, s.roles, s.numbers, strict=True):
            if pos == "NOUN":
                assert role in corpus.NOUN_ROLES
                assert (w in singular and num == "sg") or (w in plural and num == "pl")
            else:
                assert role not in corpus.NOUN_ROLES


def test_relative_clause_verb_agrees_with_the_attractor(sentences):
    n = 0
    for s in sentences:
        if "rc_verb" in s.roles:
            n += 1
            assert s.numbers[s.index("rc_verb")] == s.numbers[s.attractor]
    assert n > 500


def test_one_subject_one_verb_and_roles_from_the_list(sentences):
    for s in sentences:
        assert s.roles.count("subject") == 1 and s.roles.count("verb") == 1
        assert s.subject < s.verb
        assert set(s.roles) <= set(corpus.ROLES)


def test_the_corpus_is_balanced_and_has_hard_cases(sentences):
    labels = Counter(s.label for s in sentences)
    assert 0.45 < labels["pl"] / len(sentences) < 0.55
    hard = [s for s in sentences if s.hard]
    assert 0.3 < len(hard) / len(sentences) < 0.5
    assert all(s.numbers[s.attractor] != s.label for s in hard)
    fronted = sum("fronted" in s.roles for s in sentences)
    assert 0.2 < fronted / len(sentences) < 0.4
    assert max(len(s) for s in sentences) <= 16


def test_vocabulary_covers_the_corpus(sentences):
    vocab = corpus.vocabulary()
    assert len(vocab) == len(set(vocab)) == 44
    assert {w for s in sentences for w in s.words} == set(vocab)


def test_swap_subject_number_changes_only_the_subject(sentences):
    for s in sentences[:200]:
        t = corpus.swap_subject_number(s)
        changed = [i for i in range(len(s)) if s.words[i] != t.words[i]]
        assert changed == [s.subject]
        assert t.label != s.label and t.roles == s.roles
        assert corpus.swap_subject_number(t) == s


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="n_sentences"):
        corpus.generate(0)
    with pytest.raises(FileNotFoundError, match="attnlib.tasks.corpus"):
        corpus.load_corpus(tmp_path / "missing.tsv")
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\n", encoding="utf-8")
    with pytest.raises(ValueError, match="header"):
        corpus.load_corpus(bad)
