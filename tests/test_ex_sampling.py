"""Lesson 17's Exercise 17.1, ``top_p_filter``: submissions written the way learners write
them, named by measurement; the reference and the cases against independent oracles.

* The reference equals a float64 loop over each row's tokens (most likely first, kept
  while the ones before hold less than top_p) on every case, visible and hidden; no case
  has a boundary tie, and the cases hold 1-D, 2-D and 3-D logits, a row whose top token
  alone is above top_p, top_p 1 and 0.05, -inf logits and float64.
* Correct filters written differently (a descending sort, Hugging Face's ascending sort
  and tail of at most 1 - top_p, its warper on the rows, a loop per row, a numpy
  threshold, in place on a clone) pass with no diagnosis, and the inference measures
  nothing in them.
* Realistic mistakes, one, two or three at once, are named with exactly their ids, by
  the check (a question each, then each cause) and by the hidden check.
* The probes tell every combination of the kept-set choices apart, each cut far from its
  threshold, the same in float32 as in float64.
* A filter written in place is judged by what it returns (the limit of a check that gives
  every call a copy): the module docstring says so, this file shows it.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from named import assert_correct, assert_named

from attnlib import checks
from attnlib.checks import ex_sampling, get_exercise

NAME = "top_p_filter"
INF = float("-inf")

# ----------------------------------------------------------------------------------------
# The reference and the cases
# ----------------------------------------------------------------------------------------


def _loop_oracle(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Each row in float64 with plain Python: most likely first, kept while the ones
    before it hold less than top_p."""
    rows = logits.double().reshape(-1, logits.shape[-1]).tolist()
    out = []
    for row in rows:
        top = max(row)
        e = [math.exp(x - top) for x in row]
        probs = [v / sum(e) for v in e]
        before, kept = 0.0, set()
        for j in sorted(range(len(row)), key=lambda j: -probs[j]):
            if before < top_p:
                kept.add(j)
            before += probs[j]
        out.append([x if j in kept else INF for j, x in enumerate(row)])
    return torch.tensor(out, dtype=logits.dtype).reshape(logits.shape)


def test_the_reference_is_a_loop_over_each_rows_tokens():
    ex = get_exercise(NAME)
    for case in ex.cases(hidden=True):
        logits, top_p = case.args
        got = ex.reference(logits, top_p)
        assert got.dtype == logits.dtype and got.shape == logits.shape
        torch.testing.assert_close(got, _loop_oracle(logits, top_p), rtol=0, atol=0)
        assert torch.equal(logits, case.args[0])  # the input left alone


def test_no_case_has_a_boundary_tie_and_every_kind_of_row_is_there():
    ex = get_exercise(NAME)
    for seed in (None, 1, 2):
        with checks._core.hidden_seed(seed):
            cases = ex.cases(hidden=True)
        for case in cases:
            logits, top_p = case.args
            for row in logits.double().reshape(-1, logits.shape[-1]).numpy():
                assert ex_sampling._safe(row, top_p), case.label
    cases = ex.cases()
    dims = {c.args[0].ndim for c in cases}
    assert dims == {1, 2, 3}
    assert {c.args[1] for c in cases} >= {1.0, 0.05}
    assert any(torch.isinf(c.args[0]).any() for c in cases)
    assert any(c.args[0].dtype == torch.float64 for c in cases)
    # a row whose top token alone holds more than top_p (the crossing token is the first)
    assert any((torch.softmax(c.args[0].double(), -1).amax(-1) > c.args[1]).any() for c in cases)
    # and rows that keep several tokens, none of them first in the vocabulary
    kept = [torch.isfinite(ex.reference(*c.args)).sum(-1) for c in cases]
    assert max(int(k.max()) for k in kept) >= 4


# ----------------------------------------------------------------------------------------
# Correct, written differently
# ----------------------------------------------------------------------------------------


def descending_cumsum(logits, top_p):
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs  # the mass of the tokens before each one
    keep_sorted = before < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, INF)


def ascending_tail(logits, top_p):  # Hugging Face's way round
    sorted_logits, order = torch.sort(logits, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= 1 - top_p
    remove[..., -1:] = False
    remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove, INF)


def warper_on_rows(logits, top_p):
    from transformers.generation.logits_process import TopPLogitsWarper

    rows = logits.reshape(-1, logits.shape[-1])
    return TopPLogitsWarper(top_p)(None, rows).reshape(logits.shape)


def loop_per_row(logits, top_p):
    out = logits.clone()
    flat = out.view(-1, out.shape[-1])
    for row in flat:
        probs = torch.softmax(row.double(), dim=0)
        total = 0.0
        for j in torch.argsort(probs, descending=True).tolist():
            if total >= top_p:
                row[j] = INF
            total += probs[j].item()
    return out


def numpy_threshold(logits, top_p):
    x = logits.numpy().astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    ranked = -np.sort(-probs, axis=-1)
    n = ((np.cumsum(ranked, axis=-1) - ranked) < top_p).sum(axis=-1, keepdims=True)
    smallest_kept = np.take_along_axis(ranked, n - 1, axis=-1)
    out = np.where(probs >= smallest_kept, x, -np.inf)
    return torch.from_numpy(out).to(logits.dtype)


def in_place_on_a_clone(logits, top_p):
    out = logits.clone()
    probs, order = torch.softmax(out, -1).sort(-1, descending=True)
    drop = probs.cumsum(-1) - probs >= top_p
    out.scatter_(-1, order, out.gather(-1, order).masked_fill(drop, INF))
    return out


CORRECT = [
    descending_cumsum,
    ascending_tail,
    warper_on_rows,
    loop_per_row,
    numpy_threshold,
    in_place_on_a_clone,
]


@pytest.mark.parametrize("fn", CORRECT, ids=[f.__name__ for f in CORRECT])
def test_correct_filters_written_differently_pass(fn):
    assert_correct(NAME, fn)


def test_a_solution_that_calls_the_library_is_refused():
    from attnlib.sampling import filter_logits

    def calls_library(logits, top_p):
        return filter_logits(logits, top_p=top_p)

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check(NAME, calls_library)


# ----------------------------------------------------------------------------------------
# Mistakes written the way learners write them
# ----------------------------------------------------------------------------------------


def _sorted_probs(logits):
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    return sorted_logits, torch.softmax(sorted_logits, dim=-1), order


def crossing_dropped(logits, top_p):
    _, probs, order = _sorted_probs(logits)
    remove = probs.cumsum(-1) > top_p  # the crossing token's own mass counted
    return logits.masked_fill(remove.scatter(-1, order, remove), INF)


def keep_at_most_top_p(logits, top_p):
    x = logits.numpy()
    probs = np.exp(x - x.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    order = np.argsort(-probs, axis=-1)
    keep_sorted = np.cumsum(np.take_along_axis(probs, order, -1), -1) <= top_p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, -1)
    return torch.from_numpy(np.where(keep, x, -np.inf))


def shifted_twice(logits, top_p):
    _, probs, order = _sorted_probs(logits)
    remove = probs.cumsum(-1) - probs > top_p  # already the mass before each token...
    remove[..., 1:] = remove[..., :-1].clone()  # ...and shifted once more, as in HF's code
    remove[..., 0] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), INF)


def ascending_keep_below(logits, top_p):
    sorted_logits, order = torch.sort(logits)  # least likely first
    keep = sorted_logits.softmax(-1).cumsum(-1) < top_p
    return logits.masked_fill(~keep.scatter(-1, order, keep), INF)


def no_softmax(logits, top_p):
    sorted_logits, order = torch.sort(logits, descending=True)
    remove = sorted_logits.cumsum(-1) - sorted_logits >= top_p  # logits added up
    return logits.masked_fill(remove.scatter(-1, order, remove), INF)


def no_sort(logits, top_p):
    probs = torch.softmax(logits, dim=-1)
    keep = probs.cumsum(-1) - probs < top_p
    return torch.where(keep, logits, INF)


def mask_left_sorted(logits, top_p):
    _, probs, _ = _sorted_probs(logits)
    remove = probs.cumsum(-1) - probs >= top_p
    return logits.masked_fill(remove, INF)  # the sorted decision on the unsorted logits


def times_mask(logits, top_p):
    _, probs, order = _sorted_probs(logits)
    keep = probs.cumsum(-1) - probs < top_p
    return logits * keep.scatter(-1, order, keep)  # 0 where dropped


def renormalised_probs(logits, top_p):
    probs = torch.softmax(logits, -1)
    sorted_probs, order = probs.sort(-1, descending=True)
    keep = sorted_probs.cumsum(-1) - sorted_probs < top_p
    probs = probs * keep.scatter(-1, order, keep)
    return probs / probs.sum(-1, keepdim=True)


def sorted_logits_returned(logits, top_p):
    sorted_logits, probs, _ = _sorted_probs(logits)
    return sorted_logits.masked_fill(probs.cumsum(-1) - probs >= top_p, INF)


def tail_below_top_p(logits, top_p):
    sorted_logits, order = torch.sort(logits)
    remove = sorted_logits.softmax(-1).cumsum(-1) <= top_p  # top_p where 1 - top_p belongs
    remove[..., -1] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), INF)


def written_for_one_row(logits, top_p):
    probs = torch.softmax(logits, dim=0)  # dim 0: right for one row only
    sorted_probs, order = torch.sort(probs, dim=0, descending=True)
    keep = torch.cumsum(sorted_probs, dim=0) - sorted_probs < top_p
    return logits.masked_fill(~keep.scatter(0, order, keep), INF)


def whole_batch_at_once(logits, top_p):
    flat = logits.flatten()
    probs, order = torch.softmax(flat, 0).sort(descending=True)
    keep = (probs.cumsum(0) - probs < top_p).scatter(0, order, probs.cumsum(0) - probs < top_p)
    return flat.masked_fill(~keep, INF).view_as(logits)


def hf_code_with_dim_1(logits, top_p):
    sorted_logits, order = torch.sort(logits, descending=False, dim=1)
    remove = sorted_logits.softmax(dim=1).cumsum(dim=1) <= 1 - top_p
    remove[..., -1:] = False  # for (batch, vocab) only: dim 1 is the vocabulary there
    return logits.masked_fill(remove.scatter(1, order, remove), INF)


def argsort_ascending_loop(logits, top_p):
    x = logits.numpy()
    out = np.full_like(x, -np.inf)
    for idx in np.ndindex(*x.shape[:-1]):
        probs = np.exp(x[idx] - x[idx].max())
        probs /= probs.sum()
        total = 0.0
        for j in np.argsort(probs):  # least likely first
            if total < top_p:
                out[idx + (j,)] = x[idx + (j,)]
            total += probs[j]
    return torch.from_numpy(out)


def logits_and_sorted_mask(logits, top_p):
    sorted_logits, _ = torch.sort(logits, descending=True)
    return logits.masked_fill(sorted_logits.cumsum(-1) - sorted_logits >= top_p, INF)


def zero_fill_crossing_dropped_flattened(logits, top_p):
    flat = logits.reshape(-1)
    probs, order = torch.softmax(flat, 0).sort(descending=True)
    keep = probs.cumsum(0) <= top_p
    return (flat * keep.scatter(0, order, keep)).reshape(logits.shape)


def sorted_probs_one_too_many(logits, top_p):
    probs, _ = torch.softmax(logits, -1).sort(-1, descending=True)
    keep = probs.cumsum(-1) - probs < top_p
    keep[..., 1:] = keep[..., 1:] | keep[..., :-1]  # "keep the token that crosses, too"
    return probs * keep


MISTAKES = [
    (crossing_dropped, ["crossing-token-dropped"]),
    (keep_at_most_top_p, ["crossing-token-dropped"]),
    (shifted_twice, ["one-token-too-many"]),
    (ascending_keep_below, ["crossing-token-dropped", "least-likely-kept"]),
    (no_softmax, ["cumsum-of-logits"]),
    (no_sort, ["cumsum-unsorted"]),
    (mask_left_sorted, ["mask-not-scattered"]),
    (times_mask, ["dropped-set-to-zero"]),
    (renormalised_probs, ["returns-probabilities"]),
    (sorted_logits_returned, ["returned-sorted"]),
    (tail_below_top_p, ["top-p-as-drop-share"]),
    (written_for_one_row, ["rows-mixed"]),
    (whole_batch_at_once, ["rows-mixed"]),
    (hf_code_with_dim_1, ["rows-mixed"]),
    (argsort_ascending_loop, ["least-likely-kept"]),
    (logits_and_sorted_mask, ["mask-not-scattered", "cumsum-of-logits"]),
    (
        zero_fill_crossing_dropped_flattened,
        ["crossing-token-dropped", "dropped-set-to-zero", "rows-mixed"],
    ),
    (sorted_probs_one_too_many, ["one-token-too-many", "returns-probabilities", "returned-sorted"]),
]


@pytest.mark.parametrize(("fn", "ids"), MISTAKES, ids=[f.__name__ for f, _ in MISTAKES])
def test_realistic_mistakes_are_named_in_steps(fn, ids):
    assert_named(NAME, fn, ids)


def test_the_findings_say_what_was_measured():
    def detail(fn, mid):
        return {f.id: f.detail for f in checks.run(NAME, fn).findings}[mid]

    crossing = detail(crossing_dropped, "crossing-token-dropped")
    assert "they hold less than top_p, and token 3" in crossing
    assert "the others still hold" in detail(shifted_twice, "one-token-too-many")
    assert "probe row 4 (all its logits negative) keeps token(s) 0, 1, 2, 3, 4, 5, 6" in detail(
        no_softmax, "cumsum-of-logits"
    )
    assert "the first 3 tokens of the vocabulary" in detail(no_sort, "cumsum-unsorted")
    assert "where the 2 most likely tokens are 1, 3" in detail(
        mask_left_sorted, "mask-not-scattered"
    )
    assert "keeps fewer tokens" in detail(tail_below_top_p, "top-p-as-drop-share")
    assert "the least likely token" in detail(argsort_ascending_loop, "least-likely-kept")
    assert "of a batch of shape (2, 4, 7)" in detail(hf_code_with_dim_1, "rows-mixed")
    assert "(8, 7)" not in detail(hf_code_with_dim_1, "rows-mixed")  # right on (rows, vocab)


def test_a_filter_written_in_place_is_judged_by_what_it_returns():
    def in_place_returned(logits, top_p):
        _, probs, order = _sorted_probs(logits)
        drop = probs.cumsum(-1) - probs >= top_p
        return logits.masked_fill_(drop.scatter(-1, order, drop), INF)

    def in_place_no_return(logits, top_p):
        in_place_returned(logits, top_p)

    # every call gets a copy of the case's logits: the change to the input is not seen
    assert checks.run(NAME, in_place_returned, hidden=True).ok
    report = checks.run(NAME, in_place_no_return)
    assert not report.ok and "NoneType" in report.first_failure
    assert report.misconceptions == []


# ----------------------------------------------------------------------------------------
# The probes
# ----------------------------------------------------------------------------------------


def test_the_probes_tell_every_combination_apart_far_from_each_threshold():
    combos = ex_sampling._combos()
    assert len(combos) == 60
    x64 = torch.tensor(ex_sampling._PROBE, dtype=torch.float64)
    x32 = torch.tensor(ex_sampling._PROBE)
    seen = {}
    for c in combos:
        fn = ex_sampling._build(**c)
        sig, sig32 = (
            tuple(tuple(torch.isfinite(fn(x, p)).flatten().tolist()) for p in ex_sampling._PROBE_P)
            for x in (x64, x32)
        )
        assert sig == sig32, c
        assert sig not in seen, (c, seen.get(sig))
        seen[sig] = c
    assert ex_sampling._signatures() == {s: c for s, c in seen.items()}
    # every sum compared with a threshold (top_p or 1 - top_p, of probabilities or of logits,
    # in every order) is at least 0.005 away from it
    for p in ex_sampling._PROBE_P:
        for t in (p, 1 - p):
            for v in (torch.softmax(x64, -1), x64):
                for s in (v, v.sort(-1).values, v.sort(-1, descending=True).values):
                    before = s.cumsum(-1) - s
                    assert (before - t).abs().min() > 5e-3
                    assert (before + s - t).abs().min() > 5e-3
    # the probe rows: distinct logits, none 0, the most likely token never token 0
    assert all(len(set(r)) == 7 for r in ex_sampling._PROBE.tolist())
    assert (ex_sampling._PROBE != 0).all() and (ex_sampling._PROBE.argmax(-1) != 0).all()


def test_a_check_takes_well_under_a_second():
    ex = get_exercise(NAME)
    worst = ex.build(rows="flattened", cut="one_more", fill="probs")
    start = time.perf_counter()
    checks.run(NAME, worst, hidden=True)
    checks.run(NAME, ex.reference, hidden=True)
    assert time.perf_counter() - start < 1.0
