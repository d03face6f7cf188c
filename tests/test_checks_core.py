"""The checks machinery: messages, outputs it refuses, and what the hidden check distrusts.

Every tamper here is one a learner's notebook can do in its own kernel. ``check`` must keep
its verdict when numpy's helpers are replaced (it captured them at import);
``check_hidden`` must refuse to grade when the machinery was replaced, load a fresh copy
of the checks, and fail solutions that call the reference or return objects that are not
arrays.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import numpy.testing
import pytest
import torch
import torch.testing

import attnlib
from attnlib import checks
from attnlib.checks import _core, grading
from attnlib.checks.grading import REFERENCE_TAG, TAMPER_TAG

# what a diagnosis says, as the grader gives it (the learner's steps: test_feedback_steps.py)
pytestmark = pytest.mark.usefixtures("graders_feedback")


def good_attend(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., seq_q, seq_k)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    w = e / np.where(total > 0, total, 1.0)
    return w @ v, w


def no_scaling_attend(q, k, v, mask=None):
    return good_attend(q * np.sqrt(q.shape[-1]), k, v, mask)


def good_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture(autouse=True)
def _no_snapshot():
    grading._SNAPSHOT.clear()
    yield
    grading._SNAPSHOT.clear()


# ----------------------------------------------------------------------------------------
# check(): what the learner sees
# ----------------------------------------------------------------------------------------


def test_a_correct_function_gets_one_line(capsys):
    checks.check("attend", good_attend)
    n = len(checks.get_exercise("attend").cases())
    assert capsys.readouterr().out == f"✔ attend: correct on all {n} cases\n"
    checks.check_hidden("attend", good_attend)  # silent
    assert capsys.readouterr().out == ""


def test_the_failure_names_the_case_the_difference_and_the_mistake():
    with pytest.raises(AssertionError) as err:
        checks.check("attend", no_scaling_attend)
    msg = str(err.value)
    assert msg.startswith("✘ attend: on case '")
    assert "entries differ" in msg and "largest difference" in msg
    assert "[no-scaling]" in msg and checks.explanation("attend", "no-scaling") in msg


def test_an_unknown_mistake_is_reported_without_a_guess():
    with pytest.raises(AssertionError, match="No mistake the check knows explains this") as err:
        checks.check("softmax", lambda x: np.zeros_like(x))
    assert "Probable mistake" not in str(err.value)
    assert str(err.value).endswith("Diagnosis for softmax: unrecognised")


def test_a_function_that_raises_is_reported_with_its_error():
    def broken(x):
        raise ValueError("boom")

    with pytest.raises(AssertionError, match="raised ValueError: boom"):
        checks.check("softmax", broken)


def test_bad_arguments_get_clear_errors():
    with pytest.raises(KeyError, match="unknown exercise 'atend'; known exercises: .*attend"):
        checks.check("atend", good_attend)
    with pytest.raises(TypeError, match="fn must be a function, got int"):
        checks.check("attend", 3)
    with pytest.raises(TypeError, match="exercise must be an exercise name"):
        checks.check(good_attend, "attend")


def test_torch_outputs_are_accepted():
    def torch_softmax(x):
        t = torch.as_tensor(x)
        e = torch.exp(t - t.max(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True)

    checks.check("softmax", torch_softmax)
    checks.check_hidden("softmax", torch_softmax)


@pytest.mark.parametrize(
    "solution",
    [
        lambda x: torch.softmax(torch.as_tensor(x), dim=-1),
        lambda x: torch.as_tensor(x).softmax(-1),
        lambda x: torch.nn.functional.softmax(torch.as_tensor(x), dim=-1),
        lambda x: torch.exp(torch.log_softmax(torch.as_tensor(x), -1)),
    ],
    ids=["torch.softmax", "Tensor.softmax", "F.softmax", "log_softmax"],
)
def test_a_library_equivalent_of_the_exercise_earns_nothing(solution):
    # The grading policy (attnlib.checks.grading.LIBRARY_EQUIVALENTS): refused where the
    # course's own softmax is refused, seen by what runs, and named as what it is.
    with pytest.raises(AssertionError, match="a library function that computes") as err:
        checks.check("softmax", solution)
    assert "course's reference" not in str(err.value)
    with pytest.raises(AssertionError, match=r"\[calls-reference\].*library function") as err:
        checks.check_hidden("softmax", solution)
    assert "course's reference" not in str(err.value)


def test_a_library_softmax_inside_attend_is_allowed_but_sdpa_is_not():
    import torch.nn.functional as F

    def attend_with_torch_softmax(q, k, v, mask=None):
        q, k, v = (torch.as_tensor(a) for a in (q, k, v))
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if mask is not None:
            s = s.masked_fill(~torch.as_tensor(mask), -torch.inf)
        w = torch.nan_to_num(torch.softmax(s, dim=-1))
        return w @ v, w

    checks.check_hidden("attend", attend_with_torch_softmax)

    def attend_with_sdpa(q, k, v, mask=None):
        out, w = attend_with_torch_softmax(q, k, v, mask)
        q, k, v = (torch.as_tensor(a) for a in (q, k, v))
        m = None if mask is None else torch.as_tensor(mask)
        return torch.nan_to_num(F.scaled_dot_product_attention(q, k, v, attn_mask=m)), w

    with pytest.raises(AssertionError, match="scaled_dot_product_attention"):
        checks.check_hidden("attend", attend_with_sdpa)


def test_warnings_and_stderr_of_a_correct_function_do_not_reach_the_cell(capsys):
    def noisy(x):
        warnings.warn("a library warning", UserWarning, stacklevel=1)
        print("debug line", file=sys.stderr)
        return good_softmax(x)

    checks.check("softmax", noisy)
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines()[0].startswith("✔ softmax: correct")
    assert "wrote to stderr" in out and "debug line" in out
    checks.check_hidden("softmax", noisy)
    assert capsys.readouterr() == ("", "")


def test_hidden_cases_catch_a_function_tuned_to_the_visible_ones():
    visible = {c.args[0].shape for c in checks.get_exercise("attend").cases()}

    def memorised(q, k, v, mask=None):
        if q.shape in visible:
            return good_attend(q, k, v, mask)
        return np.zeros((*q.shape[:-1], v.shape[-1])), np.zeros((*q.shape[:-1], k.shape[-2]))

    checks.check("attend", memorised)
    with pytest.raises(AssertionError, match="hidden tests failed on case 'hidden: "):
        checks.check_hidden("attend", memorised)


# ----------------------------------------------------------------------------------------
# Outputs that are not honest arrays
# ----------------------------------------------------------------------------------------


class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __float__(self):
        return 0.0


class LyingArray(np.ndarray):
    def __eq__(self, other):
        return np.ones(np.broadcast_shapes(self.shape, np.shape(other)), dtype=bool)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda x: AlwaysEqual(), id="eq-always-true"),
        pytest.param(lambda x: np.zeros_like(x).view(LyingArray), id="ndarray-subclass"),
        pytest.param(lambda x: np.array([AlwaysEqual()] * x.size).reshape(x.shape), id="object"),
        pytest.param(lambda x: good_softmax(x).tolist(), id="nested-list"),
    ],
)
def test_objects_that_are_not_real_arrays_are_refused(make):
    with pytest.raises(AssertionError, match="expected a numpy.ndarray|dtype object"):
        checks.check("softmax", make)
    with pytest.raises(AssertionError, match="hidden tests failed"):
        checks.check_hidden("softmax", make)


# ----------------------------------------------------------------------------------------
# Calling the reference
# ----------------------------------------------------------------------------------------


def test_calling_the_reference_is_refused_even_through_an_alias():
    from attnlib import attend as my_attend

    def cheat(q, k, v, mask=None):
        return my_attend(q, k, v, mask=mask)

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("attend", cheat)
    with pytest.raises(AssertionError) as err:
        checks.check_hidden("attend", cheat)
    assert REFERENCE_TAG in str(err.value)


def test_removing_the_profiling_hook_is_tampering():
    def unhook(q, k, v, mask=None):
        sys.setprofile(None)
        return attnlib.attend(q, k, v, mask=mask)

    with pytest.raises(AssertionError, match="profiling hook"):
        checks.check("attend", unhook)
    with pytest.raises(AssertionError) as err:
        checks.check_hidden("attend", unhook)
    assert TAMPER_TAG in str(err.value)


# ----------------------------------------------------------------------------------------
# Monkeypatching the machinery
# ----------------------------------------------------------------------------------------


def _ok_report(exercise, fn, **kwargs):
    return _core.Report(exercise=exercise, ok=True, n_cases=1)


@pytest.mark.parametrize(
    ("target", "value"),
    [
        pytest.param(numpy.testing, ("assert_allclose", lambda *a, **k: None), id="np.testing"),
        pytest.param(torch.testing, ("assert_close", lambda *a, **k: None), id="torch.testing"),
        pytest.param(np, ("isclose", lambda a, b, **k: np.ones(np.shape(a), bool)), id="isclose"),
        pytest.param(np, ("allclose", lambda *a, **k: True), id="allclose"),
        pytest.param(_core, ("run", _ok_report), id="checks-core-run"),
        pytest.param(_core, ("_same", lambda *a: (True, "")), id="checks-core-same"),
        pytest.param(attnlib.core, ("attend", no_scaling_attend), id="the-reference"),
    ],
)
def test_hidden_check_refuses_a_patched_kernel(monkeypatch, target, value):
    name, replacement = value
    monkeypatch.setattr(target, name, replacement)
    with pytest.raises(AssertionError) as err:
        checks.check_hidden("attend", no_scaling_attend)
    assert TAMPER_TAG in str(err.value)
    assert name in str(err.value)


def test_check_keeps_its_verdict_when_numpy_helpers_are_patched(monkeypatch):
    monkeypatch.setattr(np, "isclose", lambda a, b, **k: np.ones(np.shape(a), bool))
    monkeypatch.setattr(np, "array_equal", lambda *a, **k: True)
    monkeypatch.setattr(numpy.testing, "assert_allclose", lambda *a, **k: None)
    with pytest.raises(AssertionError, match=r"\[no-scaling\]"):
        checks.check("attend", no_scaling_attend)


def test_rebinding_to_another_installed_function_is_seen_after_a_snapshot(monkeypatch):
    assert grading.snapshot() > 1000
    assert grading.tampering() == []
    monkeypatch.setattr(np, "isclose", np.equal)  # a ufunc: installed, but not the original
    assert grading.tampering() == ["numpy.isclose was rebound after the kernel started"]


def test_a_patched_registry_does_not_reach_the_hidden_check(monkeypatch):
    ex = checks.get_exercise("attend")
    monkeypatch.setattr(ex, "reference", no_scaling_attend)  # an attribute, not a function
    checks.check("attend", no_scaling_attend)  # the live check is fooled...
    with pytest.raises(AssertionError, match=r"hidden tests failed.*no-scaling"):
        checks.check_hidden("attend", no_scaling_attend)  # ...the fresh copy is not


def test_fresh_core_leaves_the_session_modules_alone():
    before = {n: m for n, m in sys.modules.items() if n.startswith("attnlib")}
    core = grading.fresh_core()
    after = {n: m for n, m in sys.modules.items() if n.startswith("attnlib")}
    assert after == before
    assert core is not _core
    assert core.get_exercise("attend") is not checks.get_exercise("attend")
    assert set(core.exercises()) == set(checks.exercises())


def test_an_unwritten_stub_is_told_in_one_line_and_the_lesson_goes_on(capsys):
    def stub(x):
        raise NotImplementedError()

    checks.check("softmax", stub)  # no error: Run All goes on past an unwritten exercise
    printed = capsys.readouterr()
    out = printed.err  # on stderr: nbgrader's Validate counts the cell as not passed
    assert printed.out == ""
    assert out.startswith("✘ softmax: not written yet") and out.count("\n") == 1
    assert checks.read_results(out)["softmax"].status == "not written"


def test_nan_outputs_are_counted_and_no_meaningless_difference_is_quoted():
    def unstable(x):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)

    with pytest.raises(AssertionError) as err:
        checks.check("softmax", unstable)
    msg = str(err.value)
    assert "of them NaN or inf" in msg
    assert "largest difference 0\n" not in msg and "[unstable-softmax]" in msg
