"""Partial credit: a two-point exercise with two parts earns one point per part.

Each part is an exercise of its own (``attnlib.checks.part``), checked on the learner's one
function in its own locked one-point cell, and judged like any exercise: outside the
kernel, from the outputs the kernel wrote (``judging.write_inputs`` -> ``record`` ->
``judge``). Here, for every exercise of lessons 09-12 that has parts:

* the solution passes every part, the untouched stub none;
* a function with one part right passes exactly that part — in the visible check, in the
  hidden check, and in the grader's verdict — and the failing part's message names the
  part and the mistake;
* the lessons grade each part in its own cell, one point each, in the order of the parts.

The whole flow through nbgrader (a fixture lesson with decode_step in two parts: 2, 0 and
exactly 1 point) is in tests/test_grading.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import numpy as np
import pytest

from attnlib import checks
from attnlib.checks import ex_blockwise as exb
from attnlib.checks import ex_decoding as exd
from attnlib.checks import ex_positions as exr
from attnlib.checks import ex_syntax as exs
from attnlib.checks import get_exercise, grading, protocol
from kvstaff.grader import judging

ROOT = Path(__file__).resolve().parents[1]


def _stub(*args, **kwargs):
    raise NotImplementedError()


# exercise -> (its parts in order, the lesson and the grade_ids of the part cells,
#              a function with only the first part right, one with only the second right
#              (None: no single mistake leaves only the second part right))
SPLIT = {
    "decode_step": (
        ["decode_step_cache", "decode_step_output"],
        ("10_kv_cache", ["l10-decode-step-check", "l10-decode-step-output-check"]),
        exd._decode_variant(mask="top_left"),  # the cache right, the mask wrong
        exd._decode_variant(append=False),  # the output right, the old cache returned
    ),
    "online_softmax_update": (
        ["online_softmax_update_blocks", "online_softmax_update_masked_rows"],
        ("11_blockwise", ["l11-online-update-check", "l11-online-update-masked-rows-check"]),
        exb._online_variant(guard_empty=False),  # NaN for a row masked so far
        None,
    ),
    "rotary_attend": (
        ["rotary_attend_weights", "rotary_attend_output"],
        ("12_positions", ["l12-rotary-check", "l12-rotary-output-check"]),
        exr._rotary_variant(rotate_v=True),  # rotation right, values rotated too
        None,
    ),
    "probe_accuracy": (
        ["probe_accuracy_heldout", "probe_accuracy_bias"],
        ("09_syntactic_roles", ["l09-probe-check", "l09-probe-bias-check"]),
        exs._probe_no_bias,  # the protocol right, no bias column
        None,
    ),
}


def _judged(part: str, fn, tmp_path) -> protocol.Verdict:
    """The grader's verdict on ``fn`` for ``part``, through the exchange folder."""
    exchange = tmp_path / part
    (exchange / "in").mkdir(parents=True)
    (exchange / "out").mkdir()
    judging.write_inputs(part, exchange)
    assert grading.record(part, fn, exchange)
    judging.clear_inputs(exchange)
    return judging.judge(part, exchange)


def _passes(part: str, fn) -> bool:
    try:
        checks.check(part, fn)
    except AssertionError:
        return False
    return True


def test_the_parts_are_registered_in_order_and_are_exercises_of_their_own():
    for whole, (parts, *_rest) in SPLIT.items():
        assert checks.parts(whole) == parts
        for name in parts:
            ex = get_exercise(name)
            assert ex.part_of == whole
            assert ex.reference is get_exercise(whole).reference
            assert set(ex.forbidden) == set(get_exercise(whole).forbidden)


@pytest.mark.parametrize("whole", SPLIT)
def test_the_solution_earns_every_part_and_the_stub_none(whole, tmp_path, capsys):
    parts = SPLIT[whole][0]
    solution = {
        "decode_step": exd._decode_variant(),
        "online_softmax_update": exb._online_variant(),
        "rotary_attend": exr._rotary_variant(),
        "probe_accuracy": exs._probe_reference,
    }[whole]
    for name in parts:
        checks.check(name, solution)
        assert capsys.readouterr().out.startswith(f"✔ {name}: correct on all ")
        checks.check_hidden(name, solution)
        assert _judged(name, solution, tmp_path).ok
        checks.check(name, _stub)  # one line, no error: Run All goes on
        assert capsys.readouterr().err.startswith(f"✘ {name}: not written yet")
        verdict = _judged(name, _stub, tmp_path / "stub")
        assert not verdict.ok and "hidden tests failed" in verdict.message


@pytest.mark.parametrize("whole", SPLIT)
def test_one_part_right_earns_exactly_that_part(whole, tmp_path):
    parts, _cells, first_only, second_only = SPLIT[whole]
    for i, (fn, right) in enumerate(((first_only, parts[0]), (second_only, parts[1]))):
        if fn is None:
            continue
        where = tmp_path / str(i)
        wrong = parts[1] if right == parts[0] else parts[0]
        assert _passes(right, fn) and not _passes(wrong, fn)
        checks.check_hidden(right, fn)
        with pytest.raises(AssertionError, match="hidden tests failed"):
            checks.check_hidden(wrong, fn)
        assert _judged(right, fn, where).ok
        verdict = _judged(wrong, fn, where)
        assert not verdict.ok and verdict.message.startswith(f"✘ {wrong}: hidden tests failed")
        # the visible check says which part failed, and why
        with pytest.raises(AssertionError) as err:
            checks.check(wrong, fn)
        assert f"one part of {whole}" in str(err.value)
        assert str(err.value).splitlines()[-1].startswith(f"Diagnosis for {wrong}: ")


def test_the_failing_part_names_the_mistake_measured():
    cases = [
        ("decode_step_output", exd._decode_variant(mask="top_left"), "mask-blocks-past"),
        ("decode_step_cache", exd._decode_variant(append=False), "cache-not-appended"),
        (
            "online_softmax_update_masked_rows",
            exb._online_variant(guard_empty=False),
            "masked-row-nan",
        ),
        ("rotary_attend_output", exr._rotary_variant(rotate_v=True), "rotates-values"),
        ("probe_accuracy_bias", exs._probe_no_bias, "probe-no-bias"),
    ]
    for part, fn, mid in cases:
        assert checks.diagnose(part, fn) == [mid], part


def test_a_part_compares_only_its_values_and_refuses_a_result_of_the_wrong_length():
    good = exd._decode_variant()

    def wrong_output(*args):  # the cache right, the output garbage
        out, k_all, v_all = good(*args)
        return out + 1.0, k_all, v_all

    def two_values(*args):  # (k_all, v_all) alone: the result has the wrong length
        return good(*args)[1:]

    assert _passes("decode_step_cache", wrong_output)
    assert not _passes("decode_step_output", wrong_output)
    report = checks.run("decode_step_cache", two_values)
    assert not report.ok and "returned 2 value(s), expected 3" in report.first_failure


def test_forged_outputs_for_one_part_earn_nothing_for_it(tmp_path):
    # the kernel writes what it likes: the grader compares with its own reference
    exchange = tmp_path / "x"
    (exchange / "in").mkdir(parents=True)
    (exchange / "out").mkdir()
    judging.write_inputs("decode_step_output", exchange)
    grading.record("decode_step_output", exd._decode_variant(mask="top_left"), exchange)
    manifest = exchange / "out" / "decode_step_output" / protocol.MANIFEST
    data = json.loads(manifest.read_text())
    data["outputs"] = data["outputs"][:-1]  # one result fewer than there are cases
    manifest.write_text(json.dumps(data))
    verdict = judging.judge("decode_step_output", exchange)
    assert not verdict.ok and verdict.review and protocol.TAMPER_TAG in verdict.message


def test_the_probe_bias_cannot_change_a_prediction_on_the_protocol_cases():
    # the reason probe_accuracy_heldout grades the protocol alone: centred features and
    # balanced training classes make the least-squares bias the same for every class
    for case in get_exercise("probe_accuracy_heldout").cases(hidden=True):
        X_train, y_train = case.args[:2]
        np.testing.assert_allclose(X_train.mean(axis=0), 0.0, atol=1e-12)
        counts = np.bincount(y_train)
        assert (counts == counts[0]).all(), case.label
        assert exs._probe_no_bias(*case.args) == exs._probe_reference(*case.args)
    # ... while on the bias part's cases it does
    assert any(
        exs._probe_no_bias(*c.args) != exs._probe_reference(*c.args)
        for c in get_exercise("probe_accuracy_bias").cases()
    )


def test_a_row_masked_so_far_is_specified_and_checked():
    ref = get_exercise("online_softmax_update").reference
    masked = get_exercise("online_softmax_update_masked_rows").cases(hidden=True)
    labels = " ".join(c.label for c in masked)
    assert "first block" in labels and "still sees no key" in labels
    assert "first keys" in labels
    for case in masked:
        m, l, acc, s, _v = case.args
        empty = np.isneginf(m[..., 0]) & np.isneginf(s).all(axis=-1)  # nothing seen yet
        m_new, l_new, acc_new = ref(*case.args)
        for x in (m_new, l_new, acc_new):
            assert not np.isnan(x).any(), case.label
        if empty.any():
            assert np.isneginf(m_new[..., 0][empty]).all()
            assert (l_new[..., 0][empty] == 0).all() and (acc_new[empty] == 0).all()
    # and none of the ordinary blocks has such a row (the two parts test different things)
    for case in get_exercise("online_softmax_update_blocks").cases(hidden=True):
        m, _l, _acc, s, _v = case.args
        assert not (np.isneginf(m[..., 0]) & np.isneginf(s).all(axis=-1)).any(), case.label


@pytest.mark.parametrize("whole", SPLIT)
def test_the_lesson_grades_each_part_in_its_own_one_point_cell(whole):
    parts, (lesson, grade_ids), *_ = SPLIT[whole]
    nb = nbformat.read(ROOT / "notebooks" / f"{lesson}.ipynb", as_version=4)
    graded = {
        c.metadata["nbgrader"]["grade_id"]: c
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    }
    for gid, part in zip(grade_ids, parts, strict=True):
        cell = graded[gid]
        assert cell.metadata["nbgrader"]["points"] == 1
        assert f'checks.check("{part}", {whole})' in cell.source
        assert f'checks.check_hidden("{part}", {whole})' in cell.source
    order = [
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") in grade_ids
    ]
    assert order == sorted(order) and order[1] == order[0] + 1
    # no graded cell checks the whole exercise any more: its points are the parts'
    assert not any(f'checks.check("{whole}"' in c.source for c in graded.values())
