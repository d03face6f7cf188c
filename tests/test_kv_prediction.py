"""Lesson 05's "predict, then check" (Exercise 5.2): graded by the grader only.

* the answer key is the grader's (staff/kvstaff/grader/answer_keys.py): the module the
  learner's kernel loads holds no answers, not even digests of them; a kernel without the
  key can record answers but not judge them; the sandbox hides the grader wing;
* the key is proven statement by statement (a construction, an argument checked
  numerically, or the wiring's definition), and the lesson prints no verdict;
* the lesson's own cells (``recorded``, the visible cases) check the format and judge
  nothing, so a wrong answer passes them exactly like a right one: no trial and error;
* the hidden cases, judged by the grader, judge every statement, and a flipped statement
  fails only the part that holds it (partial credit), naming that statement's misconception.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import NOTEBOOKS, ROOT
from named import grader_check_hidden

from attnlib import checks
from attnlib.checks import ex_keys_values as KV
from attnlib.checks import get_exercise
from attnlib.checks.grading import fresh_core
from attnlib.tasks import lookup as L
from kvstaff.grader import answer_keys, sandbox

# The grader's key, statement 1 first (the test process holds it, as the grader does).
TRUTH = tuple(answer_keys.KV_PREDICTION[s] for s in range(1, 9))
PARTS = ["kv_prediction", *KV.PARTS]


def _answers(values):
    return KV.answers(lambda: np.array(values))


# ---- the key, proven: each statement by a construction, an argument or a definition -------
#
# The statements can be worked out from lesson 05's sections 1-2 (the task and the three
# wirings); the lesson prints no verdict. So the key is proven here, without training:
# weights that do what a statement says can be done, a numerical check of the argument
# that no weights can, or the wiring's definition.

N_NAMES, N_NUMBERS, SEQ_K = 16, 8, 6


def _books(n=2000, seed=999):
    return L.sample_lookup(n, seq_k=SEQ_K, n_names=N_NAMES, n_numbers=N_NUMBERS,
                           generator=np.random.default_rng(seed))  # fmt: skip


def _circle(n, dims, radius=1.0):
    """(dims, n): n unit directions in the plane of the first two of ``dims`` dimensions."""
    angles = 2 * np.pi * np.arange(n) / n
    out = np.zeros((dims, n))
    out[0], out[1] = radius * np.cos(angles), radius * np.sin(angles)
    return torch.tensor(out, dtype=torch.float32)


def _head(mode, d_head, *, W_q, W_k=None, W_v, W_o, b_o=None):
    model = L.LookupAttention(N_NAMES + N_NUMBERS, d_head, N_NUMBERS, mode)
    with torch.no_grad():
        model.W_q.weight.copy_(W_q)
        model.W_v.weight.copy_(W_v)
        if W_k is not None:
            model.W_k.weight.copy_(W_k)
        model.W_o.weight.copy_(W_o)
        model.W_o.bias.copy_(torch.zeros(N_NUMBERS) if b_o is None else b_o)
    return model


def _separate_three():
    """A separate head of width 3: names on a circle in key space (numbers left out of
    W_K), numbers on a circle in value space (names left out of W_V)."""
    zeros_num, zeros_name = torch.zeros(3, N_NUMBERS), torch.zeros(3, N_NAMES)
    names, numbers = _circle(N_NAMES, 3), _circle(N_NUMBERS, 3)
    return _head(
        "separate", 3,
        W_q=torch.cat([40 * names, zeros_num], 1),
        W_k=torch.cat([40 * names, zeros_num], 1),
        W_v=torch.cat([zeros_name, numbers], 1),
        W_o=10 * numbers.T,
    )  # fmt: skip


def test_statement_1_the_control_can_beat_chance():
    # uniform weights: the read-out sees the mean of the six values; numbers on a circle,
    # read out by direction, favour the book's most frequent number
    numbers = _circle(N_NUMBERS, 3)
    W_v = torch.cat([torch.zeros(3, N_NAMES), numbers], 1)
    control = _head("uniform", 3, W_q=torch.zeros(3, 24), W_v=W_v, W_o=numbers.T)
    assert L.accuracy(control, _books()) > 1 / N_NUMBERS + 0.1
    assert TRUTH[0] is True


def test_statement_2_the_control_cannot_reach_95_percent():
    # its answer ignores the query (every weight is 1/6), so per book it has one answer;
    # the best one is the most frequent number, right for (its count)/6 of the queries
    books = _books(20000, seed=5)
    counts = torch.nn.functional.one_hot(books.numbers, N_NUMBERS).sum(1)  # (batch, n_numbers)
    best_query_blind = float(counts.max(1).values.double().mean() / SEQ_K)
    assert best_query_blind < 0.5
    control = L.make_lookup("uniform", d_head=3, n_names=N_NAMES, n_numbers=N_NUMBERS, seed=0)
    other_pos = (books.query_pos.numpy() + 1) % SEQ_K
    names, numbers = books.names.numpy(), books.numbers.numpy()
    other = L.lookup_batch(names, numbers, other_pos, N_NAMES, N_NUMBERS)[1]
    with torch.no_grad():
        a = control(books.query, books.tokens)[0]
        b = control(torch.from_numpy(other).float(), books.tokens)[0]
    assert torch.equal(a, b)
    assert TRUTH[1] is False


def test_statement_3_a_separate_head_of_width_3_can_split_the_jobs():
    head = _separate_three()
    assert torch.all(head.W_k.weight[:, N_NAMES:] == 0)  # no score depends on a number
    assert L.accuracy(head, _books()) == 1.0  # and the read-out tells all eight apart
    assert TRUTH[2] is True


def test_statement_4_with_all_weight_on_the_asked_token_the_others_do_not_count():
    head, books = _separate_three(), _books()
    names, numbers, asked = (t.numpy() for t in (books.names, books.numbers, books.query_pos))
    is_asked = np.arange(SEQ_K)[None, :] == asked[:, None]
    new = np.where(
        is_asked, numbers, np.random.default_rng(7).integers(0, N_NUMBERS, numbers.shape)
    )
    tokens = torch.from_numpy(L.lookup_batch(names, new, asked, N_NAMES, N_NUMBERS)[0]).float()
    with torch.no_grad():
        logits, weights = head(books.query, books.tokens)
        after = head(books.query, tokens)[0]
    assert float(weights.max(-1).values.min()) > 1 - 1e-6  # (all but) all the weight
    assert torch.equal(logits.argmax(-1), after.argmax(-1))
    assert TRUTH[3] is False


def test_statement_5_a_tied_key_is_the_value():
    tied = L.make_lookup("tied", d_head=3, n_names=N_NAMES, n_numbers=N_NUMBERS, seed=0)
    k, v = tied.keys_values(_books(10).tokens)
    assert torch.equal(k, v)
    assert TRUTH[4] is True


def test_statement_6_a_zero_number_block_in_the_query_does_not_hide_the_number():
    tied = L.make_lookup("tied", d_head=3, n_names=N_NAMES, n_numbers=N_NUMBERS, seed=0)
    scores = L.token_scores(tied, N_NAMES, N_NUMBERS)  # (128 tokens, 16 queries)
    _, names, numbers = L.all_tokens(N_NAMES, N_NUMBERS)
    same_name = scores[names == 3]  # name 3 with each of the 8 numbers: (8, 16)
    assert float((same_name - same_name[0]).abs().max()) > 1e-3
    assert TRUTH[5] is False


def test_statement_7_one_dimension_cannot_match_names():
    # score = q_asked * k_name: a positive query scores the largest key highest, a negative
    # one the smallest; so at most two names can beat every other name when asked.
    rng = np.random.default_rng(0)
    for _ in range(2000):
        q, k = rng.standard_normal(N_NAMES), rng.standard_normal(N_NAMES)
        s = q[:, None] * k[None, :]  # (asked, token)
        wins = sum(all(s[n, n] > s[n, m] for m in range(N_NAMES) if m != n) for n in range(N_NAMES))
        assert wins <= 2
    assert TRUTH[6] is False


def test_statement_8_a_wide_tied_head_can_answer_every_book():
    d = N_NAMES + N_NUMBERS  # 24: a dimension per feature
    eye = torch.eye(d)
    W_q = torch.zeros(d, d)
    W_q[:N_NAMES, :N_NAMES] = 200 * torch.eye(N_NAMES)  # the query looks at names only
    W_o = torch.zeros(N_NUMBERS, d)
    W_o[:, N_NAMES:] = torch.eye(N_NUMBERS)  # the read-out reads numbers only
    head = _head("tied", d, W_q=W_q, W_v=eye, W_o=W_o)
    assert head.W_k is head.W_v
    assert L.accuracy(head, _books()) == 1.0
    assert TRUTH[7] is True


def test_the_key_is_balanced_and_the_lesson_prints_no_verdict():
    assert sum(TRUTH) == 4  # as many true as false: guessing "all true" earns half
    nb = json.loads((NOTEBOOKS / "05_keys_vs_values.ipynb").read_text())
    shown = "\n".join(
        "".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
        for o in c["outputs"]
    )  # fmt: skip
    for s in KV.STATEMENTS:
        assert s not in shown  # no cell prints a statement (beside a verdict)


def test_the_kernel_side_holds_no_answers():
    source = inspect.getsource(KV)
    assert "TRUTH" not in source and "sha256" not in source and "_SALT" not in source
    for name, value in vars(KV).items():
        if name == "_ANSWER_KEY":  # where the grader installs its key (empty in a kernel)
            continue
        values = value.values() if isinstance(value, dict) else value
        if isinstance(value, tuple | list | dict) and len(value) == 8:
            assert not all(isinstance(v, bool | np.bool_) for v in values), name
    # a kernel loads the checks fresh, and a fresh copy has no key
    core = fresh_core()
    assert core.get_exercise("kv_prediction").key_installed() is False
    # the explanations (shipped with the module) do not say which answer is right
    for mid, *texts in KV._WHY.values():
        for text in texts:
            assert " is true" not in text and " is false" not in text, mid
            assert " true" not in text.lower() and " false" not in text.lower(), mid


def test_a_fresh_interpreter_that_imports_the_checks_has_no_key():
    code = (
        "from attnlib.checks import ex_keys_values as KV\n"
        "import attnlib.checks\n"
        "print(KV.has_answer_key(), KV._ANSWER_KEY)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "{}"]


def test_without_the_key_a_kernel_records_and_does_not_judge(capsys):
    wrong = _answers([not t for t in TRUTH])
    checks.check_hidden("kv_prediction_tied", wrong)  # a kernel's check_hidden: no verdict
    assert capsys.readouterr().out == (
        "kv_prediction_tied: your answers are judged by the grader when you hand the notebook in\n"
    )
    saved = dict(KV._ANSWER_KEY)
    KV._ANSWER_KEY.clear()
    try:
        with pytest.raises(LookupError, match="not in this kernel"):
            checks.run("kv_prediction_tied", wrong, hidden=True)
    finally:
        KV.install_answer_key(saved)


def test_the_key_must_name_every_statement_with_a_bool():
    with pytest.raises(ValueError, match="statements 1-8"):
        KV.install_answer_key({1: True})
    with pytest.raises(TypeError, match="bool"):
        KV.install_answer_key(dict.fromkeys(range(1, 9), 1))
    assert KV.has_answer_key()  # a refused key changed nothing


@pytest.mark.needs("bubblewrap")
def test_the_sandbox_hides_the_staff_package_and_its_keys():
    box = sandbox.Sandbox(slot=5)
    try:
        (box.work / "probe.py").write_text(
            "import json, os, importlib.util\n"
            f"wing = {str(ROOT / 'staff' / 'kvstaff')!r}\n"
            "try:\n"
            "    import kvstaff.grader.answer_keys\n"
            "    imported = True\n"
            "except ImportError:\n"
            "    imported = False\n"
            "try:\n"
            "    open(os.path.join(wing, 'planted.py'), 'w').close()\n"
            "    wrote = True\n"
            "except OSError:\n"
            "    wrote = False\n"
            "import attnlib.checks\n"
            "print(json.dumps([os.listdir(wing), imported, wrote]))\n"
        )
        box.hand_over(box.work)
        argv = box.command([sys.executable, "probe.py"], log=False)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-3000:]
        listed, imported, wrote = json.loads(done.stdout.strip().splitlines()[-1])
        assert (listed, imported, wrote) == ([], False, False)
    finally:
        box.cleanup()


def test_the_parts_cover_every_statement_once_two_each():
    covered = [s for part in KV.PARTS.values() for s in part]
    assert sorted(covered) == list(range(1, 9))
    for part, statements in KV.PARTS.items():
        assert len(get_exercise(part).cases()) == len(statements)
        assert get_exercise(part).blind


@pytest.mark.parametrize("part", PARTS)
def test_the_visible_check_cannot_tell_right_from_wrong(part, capsys):
    right, wrong = _answers(TRUTH), _answers([not t for t in TRUTH])
    checks.check(part, right)
    checks.check(part, wrong)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1]  # the same line: nothing revealed
    assert checks.run(part, wrong).ok and checks.run(part, wrong).misconceptions == []


@pytest.mark.parametrize("part", list(KV.PARTS))
def test_recorded_echoes_the_answers_and_judges_nothing(part, capsys):
    KV.recorded(part, lambda: np.array(TRUTH))
    right = capsys.readouterr().out
    KV.recorded(part, lambda: ~np.array(TRUTH))
    wrong = capsys.readouterr().out
    assert "graded when you hand the notebook in" in right
    strip = str.maketrans("", "", "truefals")
    assert right.translate(strip) == wrong.translate(strip)


def test_a_flipped_statement_fails_only_its_part_in_the_hidden_check():
    wrong = list(TRUTH)
    wrong[4] = not wrong[4]  # statement 5
    prediction = _answers(wrong)
    with pytest.raises(AssertionError, match="hidden tests failed") as err:
        grader_check_hidden("kv_prediction_tied", prediction)
    assert "tied-key-is-value" in str(err.value)
    for part in ("kv_prediction_control", "kv_prediction_separate", "kv_prediction_width"):
        grader_check_hidden(part, prediction)  # partial credit: the other parts still pass
    assert checks.run("kv_prediction", prediction, hidden=True).misconceptions == [
        "tied-key-is-value"
    ]


@pytest.mark.parametrize("s", range(1, 9))
def test_every_single_wrong_answer_is_named_by_the_grader(s):
    wrong = list(TRUTH)
    wrong[s - 1] = not wrong[s - 1]
    part = next(p for p, st in KV.PARTS.items() if s in st)
    report = checks.run(part, _answers(wrong), hidden=True)
    assert not report.ok and report.misconceptions == [KV._WHY[s][0]]


@pytest.mark.parametrize(
    "bad",
    [
        lambda: "True",
        lambda: np.array(TRUTH[:1]),
        lambda: None,
        lambda: np.array(TRUTH, dtype=float),  # numbers, not booleans
        lambda: TRUTH,  # a tuple, not an array
    ],
)
@pytest.mark.parametrize("part", PARTS)
def test_malformed_predictions_fail_visibly_with_a_clear_message(bad, part):
    report = checks.run(part, KV.answers(bad))
    assert not report.ok and "kv_prediction() must return" in report.first_failure
    if part in KV.PARTS:
        with pytest.raises(AssertionError, match="kv_prediction\\(\\) must return"):
            KV.recorded(part, bad)


def test_an_unwritten_prediction_reads_as_not_written(capsys):
    def stub():
        raise NotImplementedError()

    KV.recorded("kv_prediction_tied", stub)  # one line, no error: Run All goes on
    out = capsys.readouterr().err
    assert checks.read_results(out)["kv_prediction_tied"].status == "not written"
