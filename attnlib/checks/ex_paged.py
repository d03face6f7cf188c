"""Lesson 17's block-table gather exercise: a sequence's keys gathered from a pool of pages.

* ``gather_pages(pool, block_table, length) -> (n_kv_heads, length, d)`` — ``pool`` holds
  every page of one layer's keys (or values), shape (n_pages, n_kv_heads, page_size, d);
  ``block_table`` lists the sequence's pages, oldest positions first (it may list more
  pages than ``length`` needs: those entries are ignored); position p of the sequence sits
  in page ``block_table[p // page_size]`` at row ``p % page_size``.

The reference is :func:`attnlib.paged_cache.gather_pages` (which a solution must not call).
A learner's function is not asked to check its input: every case is valid. The cases have
several page sizes (1, 2, 3, 4, 5), two or three heads (so that mixing them shows), d
different from the page size, block tables out of order that do not start at page 0, tables
longer than the sequence needs, a pool with pages nobody uses, and lengths that end in the
middle of a page, exactly on a page boundary, or after one position. Length 0 is left out:
a loop over positions that stacks its rows, a correct idiom, has nothing to stack there.

Diagnosis by inference: three probe pools whose numbers say where they sit (entry
(page, head, row, feature) holds 1 plus its index in the flattened pool), with block tables
out of order, lengths in the middle of a page (two rows into it, so that one position too
many, one too few, the whole page and the pages rounded down all give different counts)
and on a page boundary, and one pool with fewer pages than a page has rows (so that a page
number computed with the number of pages still runs). What the learner's function returns
there is compared with every gather a known mistake, or two, makes (:func:`_build`, with
each choice's other spellings: a loop over positions or whole pages laid end to end,
sorting the whole table or its needed part, reversing the positions or the pages); the
gathers with the fewest mistakes that give exactly the learner's numbers on every probe
that ran name them, if they agree. The findings say what the numbers showed: which pages
were read, which rows each position came from, how many positions came back, which axis
holds what.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.paged_cache import gather_pages as _gather_pages

# ----------------------------------------------------------------------------------------
# The reference and the cases
# ----------------------------------------------------------------------------------------


def _reference(pool, block_table, length):
    return _gather_pages(pool, block_table, length)


def _pool(g, n_pages, n_kv_heads, page_size, d):
    return torch.randn(n_pages, n_kv_heads, page_size, d, generator=g)


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(1702)
    return [
        Case(
            "9 pages of 4 rows, 2 heads, d=3; block table [5, 2, 7], length 10 (ends two rows "
            "into its last page)",
            (_pool(g, 9, 2, 4, 3), [5, 2, 7], 10),
        ),
        Case(
            "7 pages of 3 rows, 3 heads, d=2; block table [4, 0, 6, 1, 3] (longer than "
            "needed), length 9 (exactly 3 pages)",
            (_pool(g, 7, 3, 3, 2), [4, 0, 6, 1, 3], 9),
        ),
        Case(
            "page size 1 (each position a page of its own): 6 pages, 2 heads, d=4; block "
            "table [3, 0, 5, 1], length 4",
            (_pool(g, 6, 2, 1, 4), [3, 0, 5, 1], 4),
        ),
        Case(
            "8 pages of 4 rows, 2 heads, d=5; block table [6, 3], length 1 (one position)",
            (_pool(g, 8, 2, 4, 5), [6, 3], 1),
        ),
        Case(
            "6 pages of 2 rows, 3 heads, d=3; block table [2, 5, 1, 4], length 5 (ends "
            "mid-page; the last entry is not needed)",
            (_pool(g, 6, 3, 2, 3), [2, 5, 1, 4], 5),
        ),
        Case(
            "5 pages of 5 rows, 2 heads, d=4; block table [4, 1, 3], length 13 (ends three "
            "rows into its last page)",
            (_pool(g, 5, 2, 5, 4), [4, 1, 3], 13),
        ),
        Case(
            "10 pages of 3 rows, 2 heads, d=6; block table [8, 3, 9, 5, 0, 2], length 12 "
            "(on a page boundary, two entries to spare)",
            (_pool(g, 10, 2, 3, 6), [8, 3, 9, 5, 0, 2], 12),
        ),
    ]


def _hidden_cases() -> list[Case]:
    # sizes, tables and lengths drawn (the grader's seed changes them), then one
    # fixed-shape case with drawn numbers on a page boundary
    rng = np.random.default_rng(1721)
    g = torch.Generator().manual_seed(1722)
    cases = []
    for _ in range(3):
        page_size = int(rng.integers(2, 6))
        n_kv_heads = int(rng.integers(2, 4))
        d = int(rng.choice([x for x in range(2, 7) if x != page_size]))
        n_pages = int(rng.integers(6, 12))
        length = int(rng.integers(2, 3 * page_size + 1))
        needed = -(-length // page_size)
        table = [int(p) for p in rng.permutation(n_pages)[: needed + int(rng.integers(0, 3))]]
        cases.append(
            Case(
                f"hidden: {n_pages} pages of {page_size} rows, {n_kv_heads} heads, d={d}; "
                f"block table {table}, length {length}",
                (_pool(g, n_pages, n_kv_heads, page_size, d), table, length),
            )
        )
    table = [int(p) for p in rng.permutation(8)[:4]]
    cases.append(
        Case(
            f"hidden: 8 pages of 3 rows, 2 heads, d=4; block table {table}, length 9",
            (_pool(g, 8, 2, 3, 4), table, 9),
        )
    )
    return cases


# ----------------------------------------------------------------------------------------
# The mistake model
# ----------------------------------------------------------------------------------------

# How a layout of whole pages, or a loop over positions, finds a position.
_PAGEWISE = ("heads_first", "heads_mixed", "cat_heads", "cat_features", "interleaved")
_DIVISORS = {"loop": 2, "swapped": 2, "n_pages": 0, "n_kv_heads": 1, "d": 3}  # pool axis


def _build(
    *,
    pages="table",
    arrange="heads_first",
    count="ceil",
    cut="length",
    order="forward",
    axes="heads_first",
):
    """A gather_pages with the given choices; the defaults give the correct one.

    ``pages``: which pages are read, "table" (the block table's), "pool_order" (pages 0, 1,
    2 ... of the pool), "sorted" (the needed entries of the table, sorted) or "sorted_all"
    (the whole table sorted, then its first entries). ``arrange``: whole pages laid end to
    end, "heads_first" (the head axis moved in front first), "heads_mixed" (reshaped as
    they are), "cat_heads" or "cat_features" (concatenated along the heads or the feature
    axis), "interleaved" (stacked along a new axis after the rows); or a loop over
    positions, page = entry p // s of the table and row = p % s, with s the page size
    ("loop"), the number of pages, heads or features ("n_pages", "n_kv_heads", "d"), or
    page and row swapped ("swapped": entry p % page_size, row p // page_size). ``count``:
    pages needed "ceil" or "floor" (a partial last page lost). ``cut``: positions kept,
    "length", "none" (every row of the pages read), "table" (every page the table lists,
    none cut), "short" (length - 1) or "long" (length + 1). ``order``: "forward",
    "reversed" (positions newest first) or "pages_reversed" (the needed pages newest first,
    rows in order). ``axes``: "heads_first" (n_kv_heads, length, d) or "positions_first"
    (length, n_kv_heads, d).
    """

    def gather_pages(pool, block_table, length):
        n_pages, n_kv_heads, page_size, d = pool.shape
        table = [int(p) for p in block_table]
        n = -(-length // page_size) if count == "ceil" else length // page_size
        source = {"pool_order": list(range(n_pages)), "sorted_all": sorted(table)}.get(pages, table)
        if cut == "table":  # every page listed, none cut
            n = len(source)
        used = sorted(source[:n]) if pages == "sorted" else source[:n]
        if order == "pages_reversed":
            used = used[::-1]
        keep = {"length": length, "short": length - 1, "long": length + 1}.get(cut, n * page_size)
        if arrange in _PAGEWISE:
            chosen = pool[torch.tensor(used, dtype=torch.long)]  # (n, n_kv_heads, page_size, d)
            if arrange == "heads_first":
                laid = chosen.transpose(0, 1).reshape(n_kv_heads, n * page_size, d)
            elif arrange == "heads_mixed":
                laid = chosen.reshape(n_kv_heads, n * page_size, d)
            elif arrange == "interleaved":  # stacked on a new axis after the rows
                laid = torch.stack(list(chosen), dim=2).reshape(n_kv_heads, n * page_size, d)
            else:
                laid = torch.cat(list(chosen), dim=0 if arrange == "cat_heads" else -1)
            out = laid[:, :keep]
        else:  # a loop over positions
            s = page_size if arrange == "swapped" else pool.shape[_DIVISORS[arrange]]
            if pages != "sorted" and order != "pages_reversed":
                used = source  # the table read entry by entry, as far as the loop goes
            rows = []
            for p in range(min(keep, n * page_size) if count == "floor" else keep):
                if arrange == "swapped":
                    page, row = used[p % page_size], p // page_size
                else:
                    page, row = used[p // s], p % s
                rows.append(pool[page, :, row])  # (n_kv_heads, d)
            out = torch.stack(rows, dim=1)  # (n_kv_heads, positions, d)
        if order == "reversed":
            out = out.flip(1)
        if axes == "positions_first":
            out = out.transpose(0, 1)
        return out

    return gather_pages


# Every spelling of every choice, and the mistake it is (None: right).
_CHOICES = {
    "pages": {"table": None, "pool_order": "pages-in-pool-order", "sorted": "table-sorted",
              "sorted_all": "table-sorted"},
    "arrange": {"heads_first": None, "loop": None, "heads_mixed": "heads-mixed",
                "cat_heads": "concat-wrong-axis", "cat_features": "concat-wrong-axis",
                "swapped": "page-row-swapped", "interleaved": "page-row-swapped",
                "n_pages": "page-size-wrong",
                "n_kv_heads": "page-size-wrong", "d": "page-size-wrong"},
    "count": {"ceil": None, "floor": "pages-rounded-down"},
    "cut": {"length": None, "none": "not-cut", "table": "not-cut", "short": "cut-off-by-one",
            "long": "cut-off-by-one"},
    "order": {"forward": None, "reversed": "positions-reversed",
              "pages_reversed": "positions-reversed"},
    "axes": {"heads_first": None, "positions_first": "positions-before-heads"},
}  # fmt: skip

# ----------------------------------------------------------------------------------------
# The inference
# ----------------------------------------------------------------------------------------

# (n_pages, n_kv_heads, page_size, d), block table, length
_PROBES = (
    # mid-page (2 rows into the last page), the table longer than needed, spare pages; a
    # loop that swaps page and row, or divides by the heads or features, still runs
    ((9, 2, 4, 3), [6, 2, 7, 0, 4, 8], 10),
    # fewer pages than a page has rows: a page found by dividing by the number of pages runs
    ((4, 3, 5, 2), [3, 1, 2], 12),
    # exactly 3 pages; page and row swapped, or a division by the heads, runs again
    ((8, 2, 3, 5), [5, 1, 3, 6, 0], 9),
    # fewer pages than rows again, mid-page; a division by the features runs again
    ((5, 2, 6, 4), [3, 0, 4, 1], 14),
)
_MAX_MISTAKES = 2  # gathers with up to this many mistakes are compared


def _probe_pool(shape) -> torch.Tensor:
    """Entry (page, head, row, feature) holds 1 + its index in the flattened pool."""
    n = int(np.prod(shape))
    return torch.arange(1, n + 1, dtype=torch.float32).reshape(shape)


def _key(a: np.ndarray) -> tuple:
    return (a.shape, np.ascontiguousarray(a, dtype=np.float64).tobytes())


_CANDIDATES: list = []  # (settings, ids, [key or None per probe]), fewest mistakes first


def _candidates() -> list:
    if _CANDIDATES:
        return _CANDIDATES
    keys = list(_CHOICES)
    found = []
    for values in itertools.product(*(_CHOICES[k] for k in keys)):
        ids = [_CHOICES[k][v] for k, v in zip(keys, values, strict=True)]
        named = [i for i in ids if i is not None]
        if len(named) > _MAX_MISTAKES:
            continue
        settings = dict(zip(keys, values, strict=True))
        fn = _build(**settings)
        outs = []
        for shape, table, length in _PROBES:
            try:
                with torch.no_grad():
                    out = fn(_probe_pool(shape), list(table), length)
                outs.append(_key(out.numpy()))
            except (IndexError, RuntimeError, ValueError):
                outs.append(None)
        found.append((settings, named, outs))
    found.sort(key=lambda c: len(c[1]))
    _CANDIDATES.extend(found)
    return _CANDIDATES


def _decode(value: float, shape) -> tuple[int, ...] | None:
    """(page, head, row, feature) of a probe pool's number; None if it is none of them."""
    i = value - 1
    if not float(i).is_integer() or not 0 <= i < int(np.prod(shape)):
        return None
    return tuple(int(x) for x in np.unravel_index(int(i), shape))


def _positions(a: np.ndarray, settings) -> np.ndarray:
    """The output as (heads, positions, features), whichever axis held the positions."""
    return np.swapaxes(a, 0, 1) if settings["axes"] == "positions_first" else a


def _page_rows(a, settings, shape) -> list:
    """(page, row) of each position of head 0 (first feature)."""
    a = _positions(a, settings)
    return [_decode(a[0, i, 0], shape)[::2] for i in range(a.shape[1])]


def _pages_read(a, shape) -> list[int]:
    """The pages the output's numbers came from, in the order they first appear."""
    seen = []
    for v in a.reshape(-1):
        page = _decode(v, shape)[0]
        if page not in seen:
            seen.append(page)
    return seen


def _listing(items) -> str:
    return ", ".join(str(x) for x in items)


def _probe_words(i: int) -> str:
    (n_pages, heads, page_size, d), table, length = _PROBES[i]
    return (
        f"on a probe of {n_pages} pages of {page_size} rows ({heads} heads, d = {d}) with "
        f"block table [{_listing(table)}] and length {length}"
    )


def _detail(mid: str, settings, got: list) -> str:
    """What the learner's numbers on the probes showed, for mistake ``mid``."""
    ran = [i for i, a in enumerate(got) if a is not None]
    i = ran[0]
    a, shape = got[i], _PROBES[i][0]
    page_size = shape[2]
    where = _probe_words(i)
    if mid in ("pages-in-pool-order", "table-sorted"):
        read = _listing(_pages_read(a, shape))
        return f"{where}, your output holds rows of pages {read}, in that order."
    if mid == "page-row-swapped":
        pr = _page_rows(a, settings, shape)[: page_size + 1]
        return (
            f"{where}, your positions 0 .. {len(pr) - 1} came from (page, row) "
            f"{_listing(pr)}: neighbouring positions are in different pages."
        )
    if mid == "page-size-wrong":
        runs = [
            f"{page} ({len(list(group))})"
            for page, group in itertools.groupby(p for p, _ in _page_rows(a, settings, shape))
        ]
        return (
            f"{where}, your positions came from pages {_listing(runs)} (positions from each, "
            f"in brackets), although a page holds {page_size} rows."
        )
    if mid == "heads-mixed":
        a0 = _positions(a, settings)[0]
        mixed = sorted({_decode(v, shape)[1] for v in a0.reshape(-1)})
        pr = [_decode(v, shape) for v in a0[:, 0]]
        other = next(
            (f"position {j} came from head {h}, row {r} of page {p}"
             for j, (p, h, r, _) in enumerate(pr) if h != 0), ""
        )  # fmt: skip
        other = f" ({other})" if other else ""
        return f"{where}, head 0 of your output holds rows of heads {_listing(mixed)}{other}."
    if mid == "concat-wrong-axis":
        return f"{where}, your output has shape {tuple(a.shape)}."
    if mid in ("pages-rounded-down", "not-cut", "cut-off-by-one"):
        counts = []
        for j in ran:
            (_, _, ps, _), _, n = _PROBES[j]
            held = _positions(got[j], settings).shape[1]
            counts.append(f"length {n} with page size {ps} gave {held} positions")
        return "on the probes, " + "; ".join(counts) + "."
    if mid == "positions-reversed":
        pr = _page_rows(a, settings, shape)
        return (
            f"{where}, your first position came from page {pr[0][0]}, row {pr[0][1]}, and "
            f"your last from page {pr[-1][0]}, row {pr[-1][1]}."
        )
    if mid == "positions-before-heads":
        return (
            f"{where}, your output has shape {tuple(a.shape)}: {a.shape[0]} along its first "
            f"axis and {a.shape[1]} along its second."
        )
    return where


def _infer(learner) -> list[Finding]:
    got, matches = [], None
    for shape, table, length in _PROBES:
        o = learner(_probe_pool(shape), list(table), length)
        a = o.array(0) if o.ok and o.arity == 1 else None
        if a is not None and (a.ndim != 3 or a.dtype == bool):
            a = None
        if a is not None and any(_decode(v, shape) is None for v in a.reshape(-1)):
            return []  # numbers that are not the pool's: nothing here to read
        got.append(a)
    if all(a is None for a in got):
        return []
    for settings, ids, outs in _candidates():
        if matches and len(ids) > len(matches[0][1]):
            break
        agree = all(
            a is None or (k is not None and k == _key(a)) for a, k in zip(got, outs, strict=True)
        )
        if agree:
            matches = (matches or []) + [(settings, ids)]
    if not matches or len({tuple(ids) for _, ids in matches}) > 1:
        return []  # nothing known gives these numbers, or two different mistakes do
    settings, ids = matches[0]
    return [Finding(mid, _detail(mid, settings, got)) for mid in ids]


# ----------------------------------------------------------------------------------------
# The exercise
# ----------------------------------------------------------------------------------------


def _m(mid, explanation, question, settings, *extra):
    return Misconception(
        mid,
        explanation,
        (_build(**settings), *(_build(**e) for e in extra)),
        settings,
        question=question,
    )


register(
    Exercise(
        name="gather_pages",
        summary="gather_pages(pool, block_table, length) -> (n_kv_heads, length, d): position "
        "p sits in page block_table[p // page_size] at row p % page_size",
        reference=_reference,
        make_cases=_cases,
        make_hidden_cases=_hidden_cases,
        exact=True,
        forbidden=("attnlib.paged_cache.gather_pages",),
        infer=_infer,
        build=_build,
        exclusive=(
            # With the pages rounded down the positions run out before the cut: a sequence
            # ending mid-page comes back short whatever the cut, and one ending on a page
            # boundary loses nothing, so a cut too long or missing never shows.
            frozenset({"pages-rounded-down", "not-cut"}),
            frozenset({"pages-rounded-down", "cut-off-by-one"}),
            # Pages concatenated along the heads or the features keep a page's rows on the
            # position axis: a cut there at the length or one off it changes nothing once
            # the length passes one page.
            frozenset({"concat-wrong-axis", "not-cut"}),
            frozenset({"concat-wrong-axis", "cut-off-by-one"}),
        ),
        misconceptions=(
            _m(
                "pages-in-pool-order",
                "The pages are read in the pool's own order, the first pages of the pool, "
                "instead of the pages the block table lists. A sequence's pages are wherever "
                "the free list had room when it grew, in any order and anywhere in the pool; "
                "only its block table says which they are, so every page number has to come "
                "from the table.",
                "Which pages of the pool did your function read? Which pages does the block "
                "table of the probe list, and in what order?",
                {"pages": "pool_order"},
            ),
            _m(
                "table-sorted",
                "The block table is sorted before it is used. Its order is the sequence's "
                "order: its first entry holds the oldest positions, whatever page number it "
                "has. Sorting it moves the sequence's positions around (and sorting the whole "
                "table can bring in pages the sequence does not use).",
                "Your function read the right kind of pages, but in increasing page number. "
                "In what order does the block table list them, and what does that order mean?",
                {"pages": "sorted"},
                {"pages": "sorted_all"},
            ),
            _m(
                "page-row-swapped",
                "The page and the row are swapped: the remainder of the position by the page "
                "size is used to pick the table entry and the quotient as the row (or the "
                "pages are stacked along a new axis after their rows, which deals the "
                "positions out to the pages in turn). Positions fill a page row by row "
                "before moving to the next page, so the quotient (how many whole pages come "
                "before the position) picks the table entry and the remainder is the row "
                "inside it.",
                "Which page and which row did your positions 0, 1, 2 come from? Do "
                "neighbouring positions of a sequence sit in one page or in different ones?",
                {"arrange": "swapped"},
                {"arrange": "interleaved"},
            ),
            _m(
                "page-size-wrong",
                "The position is divided by a size that is not the page size (the number of "
                "pages in the pool, or another axis of the pool), so the page changes at the "
                "wrong positions and rows are read from the wrong places. A page holds "
                "page size rows: that size, the third of the pool's shape, is what a position "
                "is divided by.",
                "After how many positions does your function move on to the next page? How "
                "many rows does one page hold, and which size did you divide by?",
                {"arrange": "n_pages"},
                {"arrange": "n_kv_heads"},
                {"arrange": "d"},
            ),
            _m(
                "heads-mixed",
                "The pages are laid end to end with the page axis still in front of the head "
                "axis, and then reshaped: a reshape only regroups numbers in their memory "
                "order, which is page, head, row. What comes out as head 0 is the first page's "
                "rows of every head, then the next page's, heads and positions mixed. Move "
                "the head axis in front of the page axis first, then join pages and rows.",
                "Look at head 0 of your output: which heads of the pool did its numbers come "
                "from? In what order do the numbers of the chosen pages lie in memory?",
                {"arrange": "heads_mixed"},
            ),
            _m(
                "concat-wrong-axis",
                "The pages are joined along the wrong axis (the heads or the features). Each "
                "page holds page size positions of every head; laying pages end to end means "
                "joining them along the position axis, the middle one, which then holds the "
                "pages' rows one page after the other.",
                "What shape does your function return, and which of its axes grew with the "
                "number of pages? Which axis holds the positions?",
                {"arrange": "cat_heads"},
                {"arrange": "cat_features"},
            ),
            _m(
                "pages-rounded-down",
                "The number of pages needed is rounded down, so a partly filled last page is "
                "dropped and a sequence ending in the middle of a page loses its newest "
                "positions. It takes the length divided by the page size rounded up: a page "
                "holding even one position is needed.",
                "How many positions do you return when the length ends in the middle of a "
                "page, and how many when it ends exactly on a page boundary? Which pages "
                "hold the missing ones?",
                {"count": "floor"},
            ),
            _m(
                "not-cut",
                "The gathered pages are returned whole (the needed ones, or every page the "
                "block table lists). The last needed page is usually only partly filled; its "
                "rows past the sequence's length, and any page listed after it, hold "
                "whatever was there (an earlier sequence's keys, or zeros), and attention "
                "would read them as positions. Keep the first length positions only.",
                "How many positions does your output hold when the length is 10 and a page "
                "holds 4 rows? How many does the sequence have?",
                {"cut": "none"},
                {"cut": "table"},
            ),
            _m(
                "cut-off-by-one",
                "The positions are cut one too early or one too late. A sequence of length "
                "L has positions 0 up to L - 1: the first L positions, no more, no fewer.",
                "How many positions does your output hold, and how many should a sequence of "
                "this length have? Where is your cut?",
                {"cut": "short"},
                {"cut": "long"},
            ),
            _m(
                "positions-reversed",
                "The sequence comes out newest first (its positions, or its pages, in "
                "reverse). The block table lists pages oldest first, and inside a page row 0 "
                "is the oldest: the output keeps that order, position 0 first.",
                "Which page and row did your first position come from, and which your last? "
                "Which end of the block table holds the oldest positions?",
                {"order": "reversed"},
                {"order": "pages_reversed"},
            ),
            _m(
                "positions-before-heads",
                "The positions are on the first axis and the heads on the second: rows "
                "gathered one position at a time and stacked along a new first axis give "
                "(length, n_kv_heads, d). The cache's layout, like the pool's, keeps heads "
                "first: (n_kv_heads, length, d).",
                "What shape does your function return, and which of its sizes is the number "
                "of heads?",
                {"axes": "positions_first"},
            ),
        ),
    )
)
