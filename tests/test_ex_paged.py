"""Lesson 17's exercise ``gather_pages``: the reference against an independent oracle,
correct functions in other idioms, and mistakes written the way learners write them.

* The reference (:func:`attnlib.paged_cache.gather_pages`) equals a position-by-position
  oracle on every case, and the cases hold what the exercise promises: page sizes 1 to 5,
  two heads or more, d apart from the page size, tables out of order not starting at page
  0, tables longer than needed, pools with unused pages, lengths mid-page, on a boundary
  and of one position.
* Correct functions in other idioms (the pages indexed, transposed and reshaped; pages
  concatenated along the positions; a loop over positions; flattened indices with
  index_select; pages stacked on a new axis; numpy) pass the visible and hidden cases with
  no diagnosis, and the inference run on them directly measures nothing.
* Mistakes as learners write them, alone and two at once, are named with exactly their
  ids, by measurement; the findings say what was measured.
* The probes tell apart every gather the mistake model makes with up to two mistakes
  (except the pairs the exercise lists as hiding each other), so a diagnosis never depends
  on which of two explanations was found first.

That every registered variant and every co-occurring pair is diagnosed as exactly its ids
is tested for every exercise in tests/test_checks_registry.py.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from named import assert_correct, assert_named

from attnlib import checks
from attnlib.checks import ex_paged, get_exercise

NAME = "gather_pages"


def test_the_exercise_is_registered_with_inference():
    ex = get_exercise(NAME)
    assert len(ex.misconceptions) >= 10 and ex.infer is not None and ex.build is not None


# ----------------------------------------------------------------------------------------
# The reference and the cases
# ----------------------------------------------------------------------------------------


def _oracle(pool, block_table, length):
    """Position by position, in float64: position p is row p mod page_size of page
    block_table[p div page_size]."""
    page_size = pool.shape[2]
    out = torch.zeros(pool.shape[1], length, pool.shape[3], dtype=torch.float64)
    for p in range(length):
        page, row = block_table[p // page_size], p % page_size
        for h in range(pool.shape[1]):
            out[h, p] = pool[page, h, row].double()
    return out


def test_the_reference_matches_a_position_by_position_oracle():
    ex = get_exercise(NAME)
    for case in ex.cases(hidden=True):
        got = ex.reference(*case.args)
        assert torch.equal(got.double(), _oracle(*case.args)), case.label


def test_the_cases_hold_what_the_exercise_promises():
    cases = get_exercise(NAME).cases()
    shapes = [c.args[0].shape for c in cases]
    assert {s[2] for s in shapes} >= {1, 2, 3, 4, 5}  # page sizes
    assert all(s[1] >= 2 for s in shapes)  # heads: mixing them shows
    assert all(s[2] != s[3] for s in shapes)  # d apart from the page size
    needed = [-(-c.args[2] // s[2]) for c, s in zip(cases, shapes, strict=True)]
    tables = [c.args[1] for c in cases]
    assert all(t[0] != 0 for t in tables) and all(t != sorted(t) for t in tables if len(t) > 1)
    assert any(len(t) > n for t, n in zip(tables, needed, strict=True))  # longer than needed
    assert all(s[0] > n for s, n in zip(shapes, needed, strict=True))  # unused pages
    rests = {c.args[2] % s[2] for c, s in zip(cases, shapes, strict=True) if s[2] > 1}
    assert 0 in rests and len(rests) >= 3  # on a page boundary, and mid-page
    assert any(c.args[2] == 1 for c in cases)


# ----------------------------------------------------------------------------------------
# Correct, written differently
# ----------------------------------------------------------------------------------------


def indexed_transposed_reshaped(pool, block_table, length):
    n_pages, n_kv_heads, page_size, d = pool.shape
    n = (length + page_size - 1) // page_size
    pages = pool[torch.tensor(block_table[:n])]  # (n, heads, page_size, d)
    return pages.permute(1, 0, 2, 3).reshape(n_kv_heads, n * page_size, d)[:, :length]


def concatenated_pages(pool, block_table, length):
    page_size = pool.shape[2]
    n = -(-length // page_size)
    return torch.cat([pool[page] for page in block_table[:n]], dim=1)[:, :length]


def loop_over_positions(pool, block_table, length):
    page_size = pool.shape[2]
    out = torch.empty(pool.shape[1], length, pool.shape[3], dtype=pool.dtype)
    for p in range(length):
        out[:, p] = pool[block_table[p // page_size], :, p % page_size]
    return out


def flat_index_select(pool, block_table, length):
    n_pages, n_kv_heads, page_size, d = pool.shape
    flat = pool.transpose(0, 1).reshape(n_kv_heads, n_pages * page_size, d)
    where = [block_table[p // page_size] * page_size + p % page_size for p in range(length)]
    return flat.index_select(1, torch.tensor(where, dtype=torch.long))


def stacked_then_flattened(pool, block_table, length):
    n = -(-length // pool.shape[2])
    return torch.stack([pool[i] for i in block_table[:n]], dim=1).flatten(1, 2)[:, :length]


def in_numpy(pool, block_table, length):
    page_size = pool.shape[2]
    pages = np.asarray(pool)[block_table[: -(-length // page_size)]]
    return np.concatenate(list(pages), axis=1)[:, :length]


def whole_table_then_cut(pool, block_table, length):
    n_kv_heads, d = pool.shape[1], pool.shape[3]
    pages = pool[block_table]  # every entry of the table: the unneeded ones are cut off
    return pages.transpose(0, 1).reshape(n_kv_heads, -1, d)[:, :length]


CORRECT = [
    indexed_transposed_reshaped,
    concatenated_pages,
    loop_over_positions,
    flat_index_select,
    stacked_then_flattened,
    in_numpy,
    whole_table_then_cut,
]


@pytest.mark.parametrize("fn", CORRECT)
def test_correct_gathers_written_differently_pass(fn):
    assert_correct(NAME, fn)


def test_a_solution_that_calls_the_library_is_refused():
    from attnlib.paged_cache import gather_pages

    def calls_library(pool, block_table, length):
        return gather_pages(pool, block_table, length)

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check(NAME, calls_library)


# ----------------------------------------------------------------------------------------
# Mistakes as learners write them
# ----------------------------------------------------------------------------------------


def _pages_needed(length, page_size):
    return -(-length // page_size)


def first_pages_of_the_pool(pool, block_table, length):
    n_pages, n_kv_heads, page_size, d = pool.shape
    n = _pages_needed(length, page_size)
    return pool[:n].transpose(0, 1).reshape(n_kv_heads, n * page_size, d)[:, :length]


def loop_without_the_table(pool, block_table, length):
    page_size = pool.shape[2]
    return torch.stack([pool[p // page_size, :, p % page_size] for p in range(length)], dim=1)


def sorted_needed_pages(pool, block_table, length):
    page_size = pool.shape[2]
    pages = sorted(block_table[: _pages_needed(length, page_size)])
    return torch.cat([pool[i] for i in pages], dim=1)[:, :length]


def sorted_tensor_table(pool, block_table, length):
    n_kv_heads, page_size, d = pool.shape[1:]
    n = _pages_needed(length, page_size)
    table = torch.tensor(block_table).sort().values[:n]
    return pool[table].transpose(0, 1).reshape(n_kv_heads, -1, d)[:, :length]


def page_and_row_swapped(pool, block_table, length):
    page_size = pool.shape[2]
    out = torch.empty(pool.shape[1], length, pool.shape[3])
    for p in range(length):
        out[:, p] = pool[block_table[p % page_size], :, p // page_size]
    return out


def stacked_after_the_rows(pool, block_table, length):
    n_kv_heads, page_size, d = pool.shape[1:]
    pages = [pool[i] for i in block_table[: _pages_needed(length, page_size)]]
    return torch.stack(pages, dim=2).reshape(n_kv_heads, -1, d)[:, :length]


def divided_by_the_number_of_pages(pool, block_table, length):
    n_pages = pool.shape[0]
    rows = [pool[block_table[p // n_pages], :, p % n_pages] for p in range(length)]
    return torch.stack(rows, dim=1)


def shape_read_in_another_order(pool, block_table, length):
    n_pages, page_size, n_kv_heads, d = pool.shape  # as if rows came before heads
    rows = [pool[block_table[p // page_size], :, p % page_size] for p in range(length)]
    return torch.stack(rows, dim=1)


def reshaped_without_transpose(pool, block_table, length):
    n_kv_heads, page_size, d = pool.shape[1:]
    pages = pool[block_table[: _pages_needed(length, page_size)]]
    return pages.reshape(n_kv_heads, -1, d)[:, :length]


def viewed_without_transpose(pool, block_table, length):
    n_kv_heads, page_size, d = pool.shape[1:]
    n = _pages_needed(length, page_size)
    return pool[torch.tensor(block_table[:n])].view(n_kv_heads, n * page_size, d)[:, :length]


def concatenated_on_the_default_axis(pool, block_table, length):
    n = _pages_needed(length, pool.shape[2])
    return torch.cat([pool[i] for i in block_table[:n]])[:, :length]


def concatenated_on_the_last_axis(pool, block_table, length):
    n = _pages_needed(length, pool.shape[2])
    return torch.cat([pool[i] for i in block_table[:n]], dim=-1)[:, :length]


def never_cut(pool, block_table, length):
    n = _pages_needed(length, pool.shape[2])
    return torch.cat([pool[i] for i in block_table[:n]], dim=1)


def whole_table_never_cut(pool, block_table, length):
    n_kv_heads, d = pool.shape[1], pool.shape[3]
    return pool[block_table].transpose(0, 1).reshape(n_kv_heads, -1, d)


def one_position_short(pool, block_table, length):
    page_size = pool.shape[2]
    rows = [pool[block_table[p // page_size], :, p % page_size] for p in range(length - 1)]
    return torch.stack(rows, dim=1)


def up_to_and_including_length(pool, block_table, length):
    page_size = pool.shape[2]
    rows = [pool[block_table[p // page_size], :, p % page_size] for p in range(length + 1)]
    return torch.stack(rows, dim=1)


def sliced_one_too_far(pool, block_table, length):
    return concatenated_pages(pool, block_table, length + 1)


def whole_pages_only(pool, block_table, length):
    n_kv_heads, page_size, d = pool.shape[1:]
    n = length // page_size  # rounded down
    pages = pool[torch.tensor(block_table[:n], dtype=torch.long)]
    return pages.transpose(0, 1).reshape(n_kv_heads, n * page_size, d)[:, :length]


def newest_first(pool, block_table, length):
    return loop_over_positions(pool, block_table, length).flip(1)


def table_read_backwards(pool, block_table, length):
    n = _pages_needed(length, pool.shape[2])
    return torch.cat([pool[i] for i in reversed(block_table[:n])], dim=1)[:, :length]


def rows_stacked_on_a_new_first_axis(pool, block_table, length):
    page_size = pool.shape[2]
    return torch.stack([pool[block_table[p // page_size], :, p % page_size] for p in range(length)])


def pool_order_and_rounded_down(pool, block_table, length):
    n_kv_heads, page_size, d = pool.shape[1:]
    n = length // page_size
    return pool[:n].transpose(0, 1).reshape(n_kv_heads, n * page_size, d)[:, :length]


def no_transpose_and_never_cut(pool, block_table, length):
    n_kv_heads, page_size, d = pool.shape[1:]
    n = _pages_needed(length, page_size)
    return pool[block_table[:n]].reshape(n_kv_heads, n * page_size, d)


def swapped_and_positions_first(pool, block_table, length):
    page_size = pool.shape[2]
    return torch.stack([pool[block_table[p % page_size], :, p // page_size] for p in range(length)])


def sorted_and_one_short(pool, block_table, length):
    n = _pages_needed(length, pool.shape[2])
    return torch.cat([pool[i] for i in sorted(block_table)[:n]], dim=1)[:, : length - 1]


REALISTIC = [
    (first_pages_of_the_pool, ["pages-in-pool-order"]),
    (loop_without_the_table, ["pages-in-pool-order"]),
    (sorted_needed_pages, ["table-sorted"]),
    (sorted_tensor_table, ["table-sorted"]),
    (page_and_row_swapped, ["page-row-swapped"]),
    (stacked_after_the_rows, ["page-row-swapped"]),
    (divided_by_the_number_of_pages, ["page-size-wrong"]),
    (shape_read_in_another_order, ["page-size-wrong"]),
    (reshaped_without_transpose, ["heads-mixed"]),
    (viewed_without_transpose, ["heads-mixed"]),
    (concatenated_on_the_default_axis, ["concat-wrong-axis"]),
    (concatenated_on_the_last_axis, ["concat-wrong-axis"]),
    (never_cut, ["not-cut"]),
    (whole_table_never_cut, ["not-cut"]),
    (one_position_short, ["cut-off-by-one"]),
    (up_to_and_including_length, ["cut-off-by-one"]),
    (sliced_one_too_far, ["cut-off-by-one"]),
    (whole_pages_only, ["pages-rounded-down"]),
    (newest_first, ["positions-reversed"]),
    (table_read_backwards, ["positions-reversed"]),
    (rows_stacked_on_a_new_first_axis, ["positions-before-heads"]),
    (pool_order_and_rounded_down, ["pages-in-pool-order", "pages-rounded-down"]),
    (no_transpose_and_never_cut, ["heads-mixed", "not-cut"]),
    (swapped_and_positions_first, ["page-row-swapped", "positions-before-heads"]),
    (sorted_and_one_short, ["table-sorted", "cut-off-by-one"]),
]


def _ids(v):
    return v.__name__ if callable(v) else "+".join(v)


@pytest.mark.parametrize(("fn", "ids"), REALISTIC, ids=_ids)
def test_realistic_mistakes_are_named_by_measurement(fn, ids):
    report = checks.run(NAME, fn)
    assert not report.ok and not report.inference_error
    assert [f.id for f in report.findings] == ids, report.findings
    assert all(len(f.detail) > 20 for f in report.findings)
    assert checks.diagnose(NAME, fn) == ids


@pytest.mark.parametrize(
    ("fn", "ids"),
    [(f, i) for f, i in REALISTIC if len(i) == 2],
    ids=_ids,
)
def test_two_mistakes_at_once_are_named_in_steps(fn, ids):
    assert_named(NAME, fn, ids)


def test_the_findings_say_what_was_measured():
    (finding,) = checks.run(NAME, first_pages_of_the_pool).findings
    assert "block table [6, 2, 7, 0, 4, 8]" in finding.detail
    assert "rows of pages 0, 1, 2, in that order" in finding.detail
    (finding,) = checks.run(NAME, divided_by_the_number_of_pages).findings
    assert "4 pages of 5 rows" in finding.detail and "3 (4), 1 (4), 2 (4)" in finding.detail
    (finding,) = checks.run(NAME, whole_pages_only).findings
    assert "length 10 with page size 4 gave 8 positions" in finding.detail
    assert "length 9 with page size 3 gave 9 positions" in finding.detail
    (finding,) = checks.run(NAME, reshaped_without_transpose).findings
    assert "head 0 of your output holds rows of heads 0, 1" in finding.detail
    (finding,) = checks.run(NAME, newest_first).findings
    assert "first position came from page 7, row 1" in finding.detail


def test_numbers_that_are_not_the_pools_are_not_read():
    def noisy(pool, block_table, length):
        return loop_over_positions(pool, block_table, length) + 0.5

    def zeros(pool, block_table, length):
        return torch.zeros(pool.shape[1], length, pool.shape[3])

    for fn in (noisy, zeros):
        assert list(get_exercise(NAME).infer(checks._core.Learner(fn))) == []
        assert checks.diagnose(NAME, fn) == []


# ----------------------------------------------------------------------------------------
# The probes tell the mistake model's gathers apart
# ----------------------------------------------------------------------------------------


def test_the_probes_tell_apart_every_gather_with_up_to_two_mistakes():
    exclusive = get_exercise(NAME).exclusive
    candidates = ex_paged._candidates()
    assert len(candidates) > 100
    for settings, ids, outs in candidates:
        if any(group <= set(ids) for group in exclusive):
            continue  # these hide each other, by the exercise's own account
        ran = [i for i, k in enumerate(outs) if k is not None]
        assert ran or len(ids) == 2, settings  # one mistake alone always runs on a probe
        if not ran:
            continue
        # another explanation, with no more mistakes, giving the same numbers wherever this
        # one runs, would make the diagnosis a matter of search order
        rivals = [
            other
            for s, other, o in candidates
            if len(other) <= len(ids)
            and sorted(other) != sorted(ids)
            and all(o[i] == outs[i] for i in ran)
        ]
        assert rivals == [], (settings, rivals)


def test_every_single_mistake_runs_on_two_probes_or_more():
    for settings, ids, outs in ex_paged._candidates():
        if len(ids) == 1:
            assert sum(k is not None for k in outs) >= 2, settings


def test_a_check_takes_well_under_a_second():
    ex_paged._candidates()  # built once per process
    start = time.process_time()
    for fn, _ in REALISTIC[:6]:
        checks.run(NAME, fn, hidden=True)
    checks.run(NAME, get_exercise(NAME).reference, hidden=True)
    assert (time.process_time() - start) / 7 < 0.2
