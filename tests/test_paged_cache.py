"""The paged KV cache (lesson 17): pages, block tables, shared prompts, copy on write.

Oracles: the contiguous :class:`attnlib.kv_cache.KVCache` (one per sequence, the same
appends; exact equality, since a cache only moves numbers), a per-position loop over the
block table for :func:`gather_pages`, torch's scaled_dot_product_attention on the
contiguous tensors, the course's GPT decoding with KVCaches, and memory counted by hand.
"""

from __future__ import annotations

import random

import pytest
import torch
from cache_helpers import one_thread, rand  # noqa: F401 (one_thread: a fixture)
from torch.nn import functional as F

from attnlib.gpt import GPT
from attnlib.kv_cache import KVCache, grouped_attend
from attnlib.paged_cache import (
    MemoryComparison,
    OutOfPagesError,
    PagedKVCache,
    PagedView,
    compare_reserved_bytes,
    gather_pages,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _steps(n_kv_heads, n, d_k, d_v, seed):
    return rand(n_kv_heads, n, d_k, seed=seed), rand(n_kv_heads, n, d_v, seed=seed + 10_000)


def _oracle(n_kv_heads=2, d_k=3, d_v=5):
    return KVCache(1, n_kv_heads, d_k, d_v, max_len=4, dtype=torch.float64)


def _same_as(cache: PagedKVCache, oracles: dict) -> None:
    for seq_id, ref in oracles.items():
        k, v = cache.read(seq_id)
        r_k, r_v = ref.read()
        assert cache.length(seq_id) == ref.length
        assert torch.equal(k, r_k[0]) and torch.equal(v, r_v[0]), seq_id


# ---- equal to the contiguous cache ----------------------------------------------------------


@pytest.mark.parametrize(("seed", "page_size"), [(0, 4), (1, 3), (2, 1), (3, 64)])
def test_interleaved_random_appends_equal_the_contiguous_cache_token_for_token(seed, page_size):
    rng = random.Random(seed)
    cache = PagedKVCache(n_pages=160, page_size=page_size, n_kv_heads=2, d_k=3, d_v=5,
                         dtype=torch.float64)  # fmt: skip
    oracles = {s: _oracle() for s in (0, "b", 7)}
    for step in range(30):  # 30 appends of 1..5 positions to sequences chosen at random
        seq_id, n = rng.choice(list(oracles)), rng.randint(1, 5)
        k, v = _steps(2, n, 3, 5, seed=100 * seed + step)
        got_k, got_v = cache.append(seq_id, k, v)
        want_k, want_v = oracles[seq_id].append(k[None], v[None])
        assert torch.equal(got_k, want_k[0]) and torch.equal(got_v, want_v[0])
        started = {s: ref for s, ref in oracles.items() if ref.length}
        _same_as(cache, started)  # the other sequences are untouched
    held = sum(-(-ref.length // page_size) for ref in oracles.values())
    assert cache.n_free_pages == 160 - held  # no page lost or taken twice
    tables = [p for s in oracles for p in cache.block_table(s)]
    assert len(tables) == len(set(tables)) == held


def test_an_empty_append_changes_nothing():
    cache = PagedKVCache(4, 2, 1, 2, dtype=torch.float64)
    cache.append(0, *_steps(1, 3, 2, 2, seed=0))
    before = cache.read(0)
    k, v = cache.append(0, torch.zeros(1, 0, 2, dtype=torch.float64), torch.zeros(1, 0, 2,
                        dtype=torch.float64))  # fmt: skip
    assert torch.equal(k, before[0]) and cache.block_table(0) == [0, 1] and cache.n_free_pages == 2


def test_gather_pages_equals_a_loop_over_positions():
    pool = rand(6, 2, 4, 3, seed=1)  # 6 pages of 4 positions, 2 heads, d = 3
    table = [4, 1, 5]  # not in order: the block table decides
    for length in (0, 1, 4, 5, 11, 12):
        rows = [pool[table[p // 4], :, p % 4] for p in range(length)]  # each (2, 3)
        want = torch.stack(rows, dim=1) if rows else torch.zeros(2, 0, 3, dtype=pool.dtype)
        assert torch.equal(gather_pages(pool, table, length), want), length
        assert torch.equal(gather_pages(pool, torch.tensor(table), length), want)
    # the case tells apart the mistakes a learner makes: pages read in pool order, heads
    # mixed into positions by a reshape without the transpose, p % page_size for the page
    mistakes = {
        "pool order": pool[sorted(table)].transpose(0, 1).reshape(2, 12, 3)[:, :11],
        "no transpose": pool[table].reshape(2, 12, 3)[:, :11],
        "page by modulo": torch.stack([pool[table[p % 3], :, p % 4] for p in range(11)], 1),
    }
    for name, wrong in mistakes.items():
        assert not torch.equal(wrong, gather_pages(pool, table, 11)), name


# ---- sharing a prompt: fork and copy on write ----------------------------------------------


def test_fork_shares_pages_and_copies_only_the_partly_filled_last_page():
    cache = PagedKVCache(n_pages=8, page_size=4, n_kv_heads=2, d_k=3, d_v=5, dtype=torch.float64)
    parent, child = _oracle(), _oracle()
    prompt = _steps(2, 6, 3, 5, seed=1)  # 6 positions: page 0 full, page 1 holds 2 rows
    cache.append("p", *prompt)
    parent.append(prompt[0][None], prompt[1][None])
    child.append(prompt[0][None], prompt[1][None])
    cache.fork("p", "c")
    assert cache.block_table("c") == cache.block_table("p") == [0, 1]
    assert [cache.ref_count(p) for p in (0, 1, 2)] == [2, 2, 0]
    assert cache.reserved_bytes == 2 * cache.page_bytes  # shared pages counted once
    assert cache.used_bytes == 6 * cache.row_bytes

    snapshot = [t.clone() for t in cache.read("p")]
    own = _steps(2, 1, 3, 5, seed=2)  # the child's first own token: copy on write
    cache.append("c", *own)
    child.append(own[0][None], own[1][None])
    assert cache.block_table("c") == [0, 2]  # page 0 (full) still shared, page 1 copied
    assert cache.block_table("p") == [0, 1]
    assert [cache.ref_count(p) for p in (0, 1, 2)] == [2, 1, 1]
    assert all(torch.equal(a, b) for a, b in zip(cache.read("p"), snapshot, strict=True))
    assert cache.used_bytes == (4 + 2 + 3) * cache.row_bytes

    other = _steps(2, 3, 3, 5, seed=3)  # the parent diverges: its page 1 is its own now
    cache.append("p", *other)
    parent.append(other[0][None], other[1][None])
    assert cache.block_table("p") == [0, 1, 3] and cache.n_free_pages == 4
    _same_as(cache, {"p": parent, "c": child})

    cache.free("p")
    assert [cache.ref_count(p) for p in (0, 1, 2, 3)] == [1, 0, 1, 0]
    _same_as(cache, {"c": child})  # the child still reads the prompt's first page
    cache.free("c")
    assert cache.n_free_pages == 8 and cache.reserved_bytes == cache.used_bytes == 0


def test_the_parent_writing_first_copies_and_the_child_keeps_the_original():
    cache = PagedKVCache(n_pages=6, page_size=4, n_kv_heads=1, d_k=2, dtype=torch.float64)
    refs = {s: _oracle(1, 2, 2) for s in ("p", "c1", "c2")}
    prompt = _steps(1, 5, 2, 2, seed=4)
    cache.append("p", *prompt)
    refs["p"].append(prompt[0][None], prompt[1][None])
    for c in ("c1", "c2"):
        cache.fork("p", c)
        refs[c].append(prompt[0][None], prompt[1][None])
    for i, s in enumerate(("p", "c1", "c2")):  # three writers into one shared partial page
        k, v = _steps(1, 1, 2, 2, seed=20 + i)
        cache.append(s, k, v)
        refs[s].append(k[None], v[None])
        _same_as(cache, refs)
    # the first two copy page 1; the last is its only holder by then and writes in place
    assert [cache.block_table(s) for s in ("p", "c1", "c2")] == [[0, 2], [0, 3], [0, 1]]
    assert cache.ref_count(0) == 3 and cache.n_free_pages == 2


def test_a_page_aligned_prompt_is_shared_whole_and_nothing_is_copied():
    cache = PagedKVCache(n_pages=5, page_size=4, n_kv_heads=1, d_k=2, dtype=torch.float64)
    cache.append("p", *_steps(1, 8, 2, 2, seed=5))
    cache.fork("p", "c")
    cache.append("c", *_steps(1, 1, 2, 2, seed=6))
    cache.append("p", *_steps(1, 1, 2, 2, seed=7))
    assert cache.block_table("c") == [0, 1, 2] and cache.block_table("p") == [0, 1, 3]
    assert cache.ref_count(0) == cache.ref_count(1) == 2


# ---- running out of pages -------------------------------------------------------------------


def test_running_out_of_pages_raises_and_leaves_the_cache_as_it_was():
    cache = PagedKVCache(n_pages=3, page_size=2, n_kv_heads=1, d_k=2, dtype=torch.float64)
    cache.append(0, *_steps(1, 5, 2, 2, seed=0))  # 3 pages, the last half full
    before = [t.clone() for t in cache.read(0)]
    cache.append(0, *_steps(1, 1, 2, 2, seed=1))  # fills the last page: no new page needed
    with pytest.raises(OutOfPagesError, match=r"PagedKVCache.append: out of pages: appending "
                       r"to sequence 0 needs 1 free page\(s\) of 2 positions, and 0 of the "
                       r"pool's 3 are free; free finished sequences"):  # fmt: skip
        cache.append(0, *_steps(1, 1, 2, 2, seed=2))
    assert cache.length(0) == 6 and cache.n_free_pages == 0
    assert torch.equal(cache.read(0)[0][:, :5], before[0])


def test_the_copy_on_write_page_is_counted_before_writing():
    cache = PagedKVCache(n_pages=2, page_size=4, n_kv_heads=1, d_k=2, dtype=torch.float64)
    cache.append("p", *_steps(1, 5, 2, 2, seed=0))  # both pages, the second partly filled
    cache.fork("p", "c")
    with pytest.raises(OutOfPagesError, match="needs 1 free page"):
        cache.append("c", *_steps(1, 1, 2, 2, seed=1))  # would copy page 1: no page left
    assert cache.block_table("c") == [0, 1] and cache.length("c") == 5
    assert cache.ref_count(1) == 2


def test_a_batch_append_is_all_or_nothing():
    cache = PagedKVCache(n_pages=3, page_size=2, n_kv_heads=1, d_k=2, dtype=torch.float64)
    batch = cache.view("a", "b")
    batch.append(rand(2, 1, 2, 2, seed=0), rand(2, 1, 2, 2, seed=1))  # 2 pages
    with pytest.raises(OutOfPagesError, match=r"PagedView.append: .*'a', 'b' needs 2 free"):
        batch.append(rand(2, 1, 1, 2, seed=2), rand(2, 1, 1, 2, seed=3))
    assert batch.length == 2 and cache.n_free_pages == 1


# ---- memory ---------------------------------------------------------------------------------


def test_memory_numbers_by_hand():
    # a position: 2 heads · (4 + 4) numbers · 4 bytes = 64 bytes; pages of 16 positions
    lengths = [100, 20, 3, 57]
    got = compare_reserved_bytes(lengths, page_size=16, n_kv_heads=2, d_k=4)
    # used: 180 positions · 64; contiguous: 4 rows of 100 · 64;
    # paged: 7 + 2 + 1 + 4 = 14 pages of 16 · 64
    assert got == MemoryComparison(used=11_520, contiguous=25_600, paged=14_336)
    cache = PagedKVCache(n_pages=20, page_size=16, n_kv_heads=2, d_k=4)
    for i, n in enumerate(lengths):
        cache.append(i, torch.zeros(2, n, 4), torch.zeros(2, n, 4))
    assert (cache.reserved_bytes, cache.used_bytes) == (14_336, 11_520)
    assert cache.nbytes == 20 * 16 * 64  # the whole pool, in use or not
    assert cache.page_bytes == 1024 and cache.row_bytes == 64


def test_memory_with_a_shared_prompt_by_hand():
    # a 40-position prompt, then 10, 30 and 1 positions of three answers; pages of 16
    got = compare_reserved_bytes([50, 70, 41], page_size=16, n_kv_heads=2, d_k=4,
                                 shared_prefix=40)  # fmt: skip
    # used: (40 + 10 + 30 + 1) · 64; contiguous: 3 rows of 70 · 64; paged: the prompt's
    # 2 full pages once, then 4 - 2, 5 - 2 and 3 - 2 pages: 8 pages of 16 · 64
    assert got == MemoryComparison(used=5_184, contiguous=13_440, paged=8_192)
    cache = PagedKVCache(n_pages=20, page_size=16, n_kv_heads=2, d_k=4)
    cache.append(0, torch.zeros(2, 40, 4), torch.zeros(2, 40, 4))
    cache.fork(0, 1)
    cache.fork(0, 2)
    for s, n in ((1, 30), (0, 10), (2, 1)):
        cache.append(s, torch.zeros(2, n, 4), torch.zeros(2, n, 4))
    assert cache.reserved_bytes == 8_192
    # rows written: the positions, plus the prompt's last 8 rows in the two copies made on
    # write (the third sequence to write found itself the page's only holder)
    assert cache.used_bytes == 5_184 + 2 * 8 * 64
    assert compare_reserved_bytes([5, 5], page_size=4, n_kv_heads=1, d_k=1, max_len=8) == (
        MemoryComparison(used=80, contiguous=128, paged=128)
    )


# ---- attention through the paged read ---------------------------------------------------


def test_attention_through_the_paged_read_equals_sdpa_on_contiguous_tensors():
    cache = PagedKVCache(n_pages=32, page_size=4, n_kv_heads=2, d_k=8, dtype=torch.float64)
    full = {}
    for i, n in enumerate((9, 3, 13)):  # three sequences, appended in pieces, interleaved
        full[i] = _steps(2, n, 8, 8, seed=40 + i)
    for lo, hi in ((0, 2), (2, 3), (3, 13)):
        for i, (k, v) in full.items():
            if lo < k.shape[1]:
                cache.append(i, k[:, lo:hi], v[:, lo:hi])
    for i, (k, v) in full.items():
        q = rand(1, 4, 2, 8, seed=60 + i)  # 4 query heads share the 2 key heads; 2 new queries
        k_p, v_p = cache.read(i)
        out, _ = grouped_attend(q, k_p[None], v_p[None], causal=True, align="bottom_right")
        mask = torch.ones(2, k.shape[1], dtype=torch.bool).tril(k.shape[1] - 2)
        want = F.scaled_dot_product_attention(q, k[None], v[None], mask, enable_gqa=True)
        torch.testing.assert_close(out, want, rtol=0, atol=1e-12)


def test_a_gpt_decodes_through_pages_as_through_kv_caches():
    """A prompt prefilled once, forked into two answers that decode as one batch of 2:
    the logits equal those of the same GPT with contiguous KVCaches (prompt prefilled twice)."""
    torch.manual_seed(0)
    model = GPT(vocab_size=13, d_model=16, n_heads=2, n_layers=2, max_len=32).eval()
    prompt, answers = torch.tensor([[1, 5, 2, 7, 3]]), torch.tensor([[4, 8, 9], [6, 6, 1]])
    pools = [PagedKVCache(16, 4, n_kv_heads=2, d_k=8) for _ in range(2)]  # one per layer
    caches = model.new_caches(2, 16)
    with torch.no_grad():
        first = model(prompt, [p.view("prompt") for p in pools])
        want = model(prompt.expand(2, -1), caches)
        torch.testing.assert_close(first.expand(2, -1, -1), want, rtol=0, atol=1e-6)
        for p in pools:
            p.fork("prompt", "a")
            p.fork("prompt", "b")
            p.free("prompt")
        views = [p.view("a", "b") for p in pools]
        assert all(isinstance(v, KVCache) for v in views)
        for t in range(3):
            got = model(answers[:, t : t + 1], views)
            want = model(answers[:, t : t + 1], caches)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert views[0].length == caches[0].length == 8
    # 8 positions each: page 0 (prompt positions 0-3) shared, then a page each (4-7): 3 pages
    # of 4 positions · 2 heads · (8 + 8) numbers · 4 bytes
    assert pools[0].block_table("a")[0] == pools[0].block_table("b")[0] == 0
    assert pools[0].reserved_bytes == 3 * 4 * 2 * 16 * 4 == views[0].nbytes


# ---- bad input -----------------------------------------------------------------------------

_pool = torch.zeros(3, 1, 2, 4)
_c = PagedKVCache(4, 2, 1, 2)
_c.append(0, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
_c.append(1, torch.zeros(1, 3, 2), torch.zeros(1, 3, 2))
BAD = [
    (lambda: gather_pages(_pool.numpy(), [0], 1), TypeError,
     r"gather_pages: pool must be a torch.Tensor, got numpy.ndarray"),
    (lambda: gather_pages(_pool[0], [0], 1), ValueError,
     r"gather_pages: pool \(torch.Tensor, shape \(1, 2, 4\), float32\) must have 4 dims"),
    (lambda: gather_pages(_pool, torch.tensor([0.0]), 1), TypeError,
     r"gather_pages: block_table must hold integers, got dtype torch.float32"),
    (lambda: gather_pages(_pool, [0, 1.0], 1), TypeError,
     r"gather_pages: block_table must be a list of ints or a 1-D integer tensor, got list"),
    (lambda: gather_pages(_pool, [0, 1], 5), ValueError,
     r"gather_pages: length=5 needs 3 pages of page_size=2, but block_table lists 2"),
    (lambda: gather_pages(_pool, [0, 3], 3), ValueError,
     r"gather_pages: block_table holds page 3, outside the pool's pages 0..2"),
    (lambda: gather_pages(_pool, [0], -1), ValueError, r"gather_pages: length must be >= 0"),
    (lambda: PagedKVCache(0, 2, 1, 2), ValueError, r"PagedKVCache: n_pages must be >= 1, got 0"),
    (lambda: PagedKVCache(2, 2.0, 1, 2), TypeError, r"PagedKVCache: page_size must be an int"),
    (lambda: _c.append(0, torch.zeros(1, 1, 3), torch.zeros(1, 1, 2)), ValueError,
     r"PagedKVCache.append: k has shape \(1, 1, 3\), expected \(n_kv_heads, seq_new, d_k\) "
     r"= \(1, seq_new, 2\)"),
    (lambda: _c.append(0, torch.zeros(1, 1, 2).double(), torch.zeros(1, 1, 2)), TypeError,
     r"PagedKVCache.append: k has dtype torch.float64, the cache holds torch.float32"),
    (lambda: _c.append(0.5, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2)), TypeError,
     r"PagedKVCache.append: seq_id must be an int or a str, got float"),
    (lambda: _c.read(9), ValueError,
     r"PagedKVCache.read: no sequence 9 in the cache; it holds \[0, 1\]"),
    (lambda: _c.fork(0, 1), ValueError, r"PagedKVCache.fork: child 1 is already a sequence"),
    (lambda: _c.fork(5, 6), ValueError, r"PagedKVCache.fork: no sequence 5 in the cache"),
    (lambda: _c.free("x"), ValueError, r"PagedKVCache.free: no sequence 'x' in the cache"),
    (lambda: _c.view(0, 1), ValueError,
     r"PagedView: the sequences of a batch must hold as many positions each, got \{0: 1, 1: 3\}"),
    (lambda: _c.view(0, 0), ValueError, r"PagedView: seq_ids must be different"),
    (lambda: PagedView("cache", 0), TypeError, r"PagedView: cache must be a PagedKVCache, got str"),
    (lambda: _c.view(0).append(torch.zeros(2, 1, 1, 2), torch.zeros(2, 1, 1, 2)), ValueError,
     r"PagedView.append: k has shape \(2, 1, 1, 2\), expected \(batch, n_kv_heads, seq_new, "
     r"d_k\) = \(1, 1, seq_new, 2\)"),
    (lambda: _c.view(1).truncate(1), ValueError, r"PagedView.truncate: a paged cache does not"),
    (lambda: compare_reserved_bytes([3, 5], page_size=2, n_kv_heads=1, d_k=1, shared_prefix=4),
     ValueError, r"compare_reserved_bytes: shared_prefix=4 is longer than the shortest "
     r"sequence \(3 positions\)"),
    (lambda: compare_reserved_bytes([3, 5], page_size=2, n_kv_heads=1, d_k=1, max_len=4),
     ValueError, r"compare_reserved_bytes: max_len=4 is less than the longest length 5"),
    (lambda: compare_reserved_bytes(7, page_size=2, n_kv_heads=1, d_k=1), TypeError,
     r"compare_reserved_bytes: lengths must be a non-empty list of ints, got int"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "message"), BAD, ids=[m[:40] for _, _, m in BAD])
def test_bad_input_gets_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()
    assert _c.sequences == [0, 1] and _c.n_free_pages == 1  # nothing changed
