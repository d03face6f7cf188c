"""A paged KV cache: fixed-size pages, a block table per sequence, shared prompts (lesson 17).

A contiguous :class:`attnlib.kv_cache.KVCache` serving many sequences at once must reserve
room for the longest sequence in every row of the batch: a short answer wastes the rest of
its row. A paged cache, the idea behind vLLM's PagedAttention, cuts memory into **pages** of
``page_size`` positions, all in one **pool** tensor per layer (one for keys, one for values).
Each sequence owns a **block table**, the list of its pages in order: position ``p`` of the
sequence sits in page ``block_table[p // page_size]``, row ``p % page_size``. A sequence takes
a page from the **free list** only when it needs one, so at most one page per sequence is
partly empty.

Sequences that share a prompt share its pages: :meth:`PagedKVCache.fork` gives the child the
parent's block table and counts one more reference on each page. Nothing is copied until
one of them writes into a page another still reads: **copy on write**. Only the partly filled
last page can be written, so only that page is ever copied; full prompt pages stay shared,
held once however many sequences read them.

* :func:`gather_pages` — the block-table gather: a sequence's keys (or values) from the pool;
* :class:`PagedKVCache` — pool, block tables, reference counts and free list of one layer:
  ``append``, ``read``, ``fork``, ``free``, ``reserved_bytes``, ``used_bytes``, ``nbytes``;
* :class:`PagedView` — some of its sequences seen as a :class:`~attnlib.kv_cache.KVCache`
  (``append``/``read``/``length``/``nbytes``), so that a model that decodes with a KVCache
  (:class:`attnlib.gpt.GPT`, :class:`attnlib.decoder.TinyDecoder`) decodes with pages;
* :func:`compare_reserved_bytes` — memory reserved for a batch of sequences of different
  lengths: contiguous (every row at the longest length) against paged;
* :class:`OutOfPagesError` — raised when the pool has no free page left.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from attnlib._validate import (
    check_array,
    check_cache_step,
    check_instance,
    check_int,
    check_kv_step,
    check_ndim,
    is_int,
    type_name,
    validated,
)
from attnlib.kv_cache import KVCache

__all__ = [
    "gather_pages",
    "PagedKVCache",
    "PagedView",
    "OutOfPagesError",
    "MemoryComparison",
    "compare_reserved_bytes",
]


class OutOfPagesError(RuntimeError):
    """Every page of a :class:`PagedKVCache` pool is in use.

    Not a mistake in an argument (those are ``TypeError`` and ``ValueError``): the pool is
    full, like a GPU out of memory. Free finished sequences or make a larger pool. The
    cache is left as it was before the call that raised.
    """


# ----------------------------------------------------------------------------------------
# The block-table gather.
# ----------------------------------------------------------------------------------------


def _check_gather_pages(pool, block_table, length) -> None:
    fn = "gather_pages"
    check_array(fn, "pool", pool, only="torch")
    check_ndim(fn, "pool", pool, ndim=4, doc="(n_pages, n_kv_heads, page_size, d)")
    n_pages, page_size = pool.shape[0], pool.shape[2]
    if isinstance(block_table, torch.Tensor):
        if block_table.dtype.is_floating_point or block_table.dtype in (torch.bool,):
            raise TypeError(f"{fn}: block_table must hold integers, got dtype {block_table.dtype}")
        check_ndim(fn, "block_table", block_table, ndim=1, doc="(n_pages_used,)")
        table = block_table.tolist()
    elif isinstance(block_table, (list, tuple)) and all(is_int(p) for p in block_table):
        table = [int(p) for p in block_table]
    else:
        raise TypeError(
            f"{fn}: block_table must be a list of ints or a 1-D integer tensor, got "
            f"{type_name(block_table)}"
        )
    length = check_int(fn, "length", length, minimum=0)
    needed = -(-length // page_size)  # pages that hold `length` positions (rounded up)
    if needed > len(table):
        raise ValueError(
            f"{fn}: length={length} needs {needed} pages of page_size={page_size}, but "
            f"block_table lists {len(table)}"
        )
    bad = [p for p in table[:needed] if not 0 <= p < n_pages]
    if bad:
        raise ValueError(
            f"{fn}: block_table holds page {bad[0]}, outside the pool's pages 0..{n_pages - 1}"
        )


@validated(_check_gather_pages)
def gather_pages(pool: torch.Tensor, block_table, length: int) -> torch.Tensor:
    """The first ``length`` positions of one sequence, gathered from a pool of pages.

    Position ``p`` of the sequence sits in page ``block_table[p // page_size]`` at row
    ``p % page_size``. Take the pages the sequence uses, in the block table's order, lay
    them end to end along the position axis, and cut at ``length`` (the last page may be
    partly filled).

    Parameters
    ----------
    pool : Tensor of shape (n_pages, n_kv_heads, page_size, d)
        Every page of one layer's keys (d = d_k) or values (d = d_v).
    block_table : list of int or 1-D integer Tensor
        The sequence's pages, oldest positions first; entries past the pages ``length``
        needs are ignored.
    length : int
        Positions the sequence holds.

    Returns
    -------
    Tensor of shape (n_kv_heads, length, d)
        A new tensor (the pages are copied out of the pool).

    See Also
    --------
    PagedKVCache.read : gathers a sequence's keys and values this way.

    Examples
    --------
    >>> pool = torch.arange(3 * 2.0).reshape(3, 1, 2, 1)  # 3 pages of 2 positions, 1 head
    >>> pool[:, 0, :, 0]                                   # page 0 holds 0, 1; page 1 2, 3 ...
    tensor([[0., 1.],
            [2., 3.],
            [4., 5.]])
    >>> gather_pages(pool, [2, 0], 3)[0, :, 0]              # page 2, then page 0, cut at 3
    tensor([4., 5., 0.])
    """
    n_pages, n_kv_heads, page_size, d = pool.shape
    n_used = -(-length // page_size)  # pages holding the sequence (the last maybe partly)
    table = torch.as_tensor(block_table, dtype=torch.long)[:n_used]
    pages = pool[table]  # (n_used, n_kv_heads, page_size, d)
    laid = pages.transpose(0, 1).reshape(n_kv_heads, n_used * page_size, d)  # pages end to end
    return laid[:, :length]  # (n_kv_heads, length, d)


# ----------------------------------------------------------------------------------------
# The cache.
# ----------------------------------------------------------------------------------------


def _check_seq_id(fn: str, name: str, seq_id) -> None:
    if not (is_int(seq_id) or isinstance(seq_id, str)):
        raise TypeError(f"{fn}: {name} must be an int or a str, got {type_name(seq_id)}")


class PagedKVCache:
    """Keys and values of one attention layer for many sequences, in pages of a shared pool.

    Parameters
    ----------
    n_pages : int
        Pages in the pool (allocated up front: the pool never grows).
    page_size : int
        Positions per page.
    n_kv_heads, d_k : int
        Shape of a position's keys: (n_kv_heads, d_k).
    d_v : int, optional
        Width of the values; default ``d_k``.
    dtype : torch.dtype, default torch.float32

    Notes
    -----
    Sequences are named by an int or a str (``seq_id``); one starts with its first
    :meth:`append` (or :meth:`view`). A model with several layers keeps one cache per
    layer; every layer does the same appends, so their block tables are the same.

    See Also
    --------
    attnlib.kv_cache.KVCache : one contiguous row per sequence of a batch.
    gather_pages : how :meth:`read` finds a sequence's positions.
    compare_reserved_bytes : the memory this saves, by formula.

    Examples
    --------
    >>> cache = PagedKVCache(n_pages=8, page_size=4, n_kv_heads=1, d_k=2)
    >>> k, v = cache.append(0, torch.ones(1, 6, 2), torch.ones(1, 6, 2))  # a 6-token prompt
    >>> cache.block_table(0), tuple(k.shape)
    ([0, 1], (1, 6, 2))
    >>> cache.fork(0, 1)                                 # a second answer to the same prompt
    >>> k, v = cache.append(1, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
    >>> cache.block_table(1)  # page 0 still shared; page 1 was partly filled, so copied
    [0, 2]
    >>> cache.reserved_bytes  # 3 pages · 4 rows · (2 + 2) numbers · 4 bytes
    192
    >>> cache.used_bytes      # rows written: 4 (shared) + 2 (parent's) + 3 (child's copy)
    144
    """

    def _check_init(self, n_pages, page_size, n_kv_heads, d_k, d_v=None, *, dtype=torch.float32):
        fn = "PagedKVCache"
        for name, n in (
            ("n_pages", n_pages),
            ("page_size", page_size),
            ("n_kv_heads", n_kv_heads),
            ("d_k", d_k),
        ):
            check_int(fn, name, n, minimum=1)
        if d_v is not None:
            check_int(fn, "d_v", d_v, minimum=1)
        check_instance(fn, "dtype", dtype, torch.dtype, "a torch.dtype")

    @validated(_check_init)
    def __init__(
        self,
        n_pages: int,
        page_size: int,
        n_kv_heads: int,
        d_k: int,
        d_v: int | None = None,
        *,
        dtype: torch.dtype = torch.float32,
    ):
        self.n_pages, self.page_size = int(n_pages), int(page_size)
        self.n_kv_heads, self.d_k = int(n_kv_heads), int(d_k)
        self.d_v = self.d_k if d_v is None else int(d_v)
        self.dtype = dtype
        self.pool_k = torch.zeros(n_pages, n_kv_heads, page_size, self.d_k, dtype=dtype)
        self.pool_v = torch.zeros(n_pages, n_kv_heads, page_size, self.d_v, dtype=dtype)
        self._free = list(range(self.n_pages - 1, -1, -1))  # a stack: page 0 is taken first
        self._refs = [0] * self.n_pages  # sequences whose block table lists each page
        self._filled = [0] * self.n_pages  # rows written in each page
        self._tables: dict[int | str, list[int]] = {}
        self._lengths: dict[int | str, int] = {}

    # ---- what it holds --------------------------------------------------------------------

    @property
    def row_bytes(self) -> int:
        """Bytes of one position: ``n_kv_heads · (d_k + d_v) · bytes per number``."""
        return self.n_kv_heads * (self.d_k + self.d_v) * self.pool_k.element_size()

    @property
    def page_bytes(self) -> int:
        """Bytes of one page of keys and values: ``page_size · row_bytes``."""
        return self.page_size * self.row_bytes

    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool (keys and values), in use or not."""
        return self.pool_k.untyped_storage().nbytes() + self.pool_v.untyped_storage().nbytes()

    @property
    def reserved_bytes(self) -> int:
        """Bytes of the pages some sequence holds (a shared page counted once)."""
        return (self.n_pages - len(self._free)) * self.page_bytes

    @property
    def used_bytes(self) -> int:
        """Bytes of the rows written in those pages: a shared page counted once, and the
        rows a copy on write duplicated counted in each copy."""
        return sum(self._filled[p] for p in range(self.n_pages) if self._refs[p]) * self.row_bytes

    @property
    def n_free_pages(self) -> int:
        """Pages on the free list."""
        return len(self._free)

    @property
    def sequences(self) -> list:
        """The ids of the sequences held, in the order they started."""
        return list(self._tables)

    def length(self, seq_id) -> int:
        """Positions held for ``seq_id``."""
        return self._lengths[self._known("PagedKVCache.length", seq_id)]

    def block_table(self, seq_id) -> list[int]:
        """The pages of ``seq_id``, oldest positions first (a copy)."""
        return list(self._tables[self._known("PagedKVCache.block_table", seq_id)])

    def ref_count(self, page: int) -> int:
        """How many sequences' block tables list ``page``."""
        page = check_int(
            "PagedKVCache.ref_count", "page", page, minimum=0, maximum=self.n_pages - 1
        )
        return self._refs[page]

    def _known(self, fn: str, seq_id, name: str = "seq_id"):
        _check_seq_id(fn, name, seq_id)
        if seq_id not in self._tables:
            raise ValueError(
                f"{fn}: no sequence {seq_id!r} in the cache; it holds {self.sequences}"
            )
        return seq_id

    # ---- appending ------------------------------------------------------------------------

    def _pages_needed(self, seq_id, seq_new: int, refs: list[int]) -> int:
        """Pages an append of ``seq_new`` positions takes from the free list. ``refs``, a
        copy of the reference counts, is updated as the append would update them."""
        ps, length = self.page_size, self._lengths.get(seq_id, 0)
        if seq_new == 0:
            return 0
        table = self._tables.get(seq_id, [])
        copy = length % ps != 0 and refs[table[-1]] > 1  # writes into a shared partial page
        if copy:
            refs[table[-1]] -= 1
        return int(copy) + (-(-(length + seq_new) // ps) - -(-length // ps))

    def _reserve(self, fn: str, steps: Sequence[tuple]) -> None:
        """Raise OutOfPagesError unless the appends ``(seq_id, seq_new)`` fit in the free list."""
        refs, needed = list(self._refs), 0
        for seq_id, seq_new in steps:
            needed += self._pages_needed(seq_id, seq_new, refs)
        if needed > len(self._free):
            ids = ", ".join(repr(s) for s, _ in steps)
            raise OutOfPagesError(
                f"{fn}: out of pages: appending to sequence {ids} needs {needed} free "
                f"page(s) of {self.page_size} positions, and {len(self._free)} of the pool's "
                f"{self.n_pages} are free; free finished sequences or make a larger pool"
            )

    def _take_page(self) -> int:
        page = self._free.pop()
        self._refs[page], self._filled[page] = 1, 0
        return page

    def _write(self, seq_id, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append k (n_kv_heads, seq_new, d_k), v (..., d_v); pages were reserved."""
        ps, seq_new = self.page_size, k.shape[1]
        table = self._tables.setdefault(seq_id, [])
        length = self._lengths.setdefault(seq_id, 0)
        if seq_new == 0:
            return
        rows = length % ps  # rows already written in the last page
        if rows and self._refs[table[-1]] > 1:  # copy on write: the last page is shared
            old, new = table[-1], self._take_page()
            self.pool_k[new, :, :rows] = self.pool_k[old, :, :rows]
            self.pool_v[new, :, :rows] = self.pool_v[old, :, :rows]
            self._filled[new] = rows
            self._refs[old] -= 1
            table[-1] = new
        while len(table) * ps < length + seq_new:
            table.append(self._take_page())
        positions = torch.arange(length, length + seq_new)  # (seq_new,)
        pages = torch.tensor(table)[positions // ps]  # (seq_new,): the page of each position
        slots = positions % ps  # (seq_new,): its row in that page
        self.pool_k[pages, :, slots] = k.detach().transpose(0, 1)  # (seq_new, n_kv_heads, d_k)
        self.pool_v[pages, :, slots] = v.detach().transpose(0, 1)  # (seq_new, n_kv_heads, d_v)
        end = length + seq_new
        for j in range(length // ps, len(table)):
            self._filled[table[j]] = min(ps, end - j * ps)
        self._lengths[seq_id] = end

    def _check_append(self, seq_id, k, v) -> None:
        fn = "PagedKVCache.append"
        _check_seq_id(fn, "seq_id", seq_id)
        heads = (("n_kv_heads", self.n_kv_heads), ("seq_new", None))
        entries = (("k", k, (*heads, ("d_k", self.d_k))), ("v", v, (*heads, ("d_v", self.d_v))))
        check_cache_step(fn, entries, dtype=self.dtype, seq_axis=1)

    @validated(_check_append)
    def append(self, seq_id, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the keys and values of new positions of one sequence; return all it holds.

        A new ``seq_id`` starts a sequence. A page is taken from the free list whenever
        the last one is full; if the last page is partly filled and shared with another
        sequence (after :meth:`fork`), it is copied first (copy on write).

        Parameters
        ----------
        seq_id : int or str
        k : Tensor of shape (n_kv_heads, seq_new, d_k)
        v : Tensor of shape (n_kv_heads, seq_new, d_v)

        Returns
        -------
        k_all : Tensor of shape (n_kv_heads, length, d_k)
        v_all : Tensor of shape (n_kv_heads, length, d_v)

        Raises
        ------
        OutOfPagesError
            If the free list has too few pages (nothing is written then).
        """
        self._reserve("PagedKVCache.append", [(seq_id, k.shape[1])])
        self._write(seq_id, k, v)
        return self.read(seq_id)

    def _check_read(self, seq_id) -> None:
        self._known("PagedKVCache.read", seq_id)

    @validated(_check_read)
    def read(self, seq_id) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (n_kv_heads, length, d_k) and values (n_kv_heads, length, d_v) of ``seq_id``,
        oldest first, gathered through its block table (:func:`gather_pages`)."""
        table, length = self._tables[seq_id], self._lengths[seq_id]
        return gather_pages(self.pool_k, table, length), gather_pages(self.pool_v, table, length)

    # ---- sharing and freeing --------------------------------------------------------------

    def fork(self, parent, child) -> None:
        """Start ``child`` as a copy of ``parent`` that shares all its pages (nothing is
        copied: each page gains a reference). The first write of either into a shared,
        partly filled page copies that page."""
        fn = "PagedKVCache.fork"
        parent = self._known(fn, parent, "parent")
        _check_seq_id(fn, "child", child)
        if child in self._tables:
            raise ValueError(f"{fn}: child {child!r} is already a sequence of the cache")
        table = list(self._tables[parent])
        for page in table:
            self._refs[page] += 1
        self._tables[child], self._lengths[child] = table, self._lengths[parent]

    def free(self, seq_id) -> None:
        """Forget ``seq_id``: each of its pages loses a reference, and pages no sequence
        holds any more go back to the free list."""
        seq_id = self._known("PagedKVCache.free", seq_id)
        for page in reversed(self._tables.pop(seq_id)):
            self._refs[page] -= 1
            if self._refs[page] == 0:
                self._filled[page] = 0
                self._free.append(page)
        del self._lengths[seq_id]

    def view(self, *seq_ids) -> PagedView:
        """The sequences ``seq_ids`` as one batch with the interface of a KVCache
        (:class:`PagedView`); ids not held yet start empty."""
        return PagedView(self, *seq_ids)

    def __repr__(self) -> str:
        return (
            f"PagedKVCache(n_pages={self.n_pages}, page_size={self.page_size}, "
            f"n_kv_heads={self.n_kv_heads}, d_k={self.d_k}, d_v={self.d_v}, "
            f"sequences={len(self._tables)}, free pages={len(self._free)})"
        )


class PagedView(KVCache):
    """Sequences of a :class:`PagedKVCache` seen as a :class:`~attnlib.kv_cache.KVCache`.

    Row ``i`` of the batch is sequence ``seq_ids[i]``. ``append(k, v)`` takes keys
    (batch, n_kv_heads, seq_new, d_k) and appends row ``i`` to sequence ``seq_ids[i]``;
    ``read`` gathers them back as (batch, n_kv_heads, length, d_k). The sequences must hold
    the same number of positions (a batch decodes in step), e.g. children forked from one
    prompt. Because it is a KVCache, models that take one decode with it unchanged.

    Parameters
    ----------
    cache : PagedKVCache
    *seq_ids : int or str
        At least one, all different.

    Examples
    --------
    >>> pages = PagedKVCache(n_pages=4, page_size=2, n_kv_heads=1, d_k=2)
    >>> batch = pages.view("a", "b")
    >>> k, v = batch.append(torch.ones(2, 1, 3, 2), torch.ones(2, 1, 3, 2))
    >>> tuple(k.shape), batch.length, pages.block_table("b")
    ((2, 1, 3, 2), 3, [2, 3])
    """

    def _check_view(self, cache, *seq_ids) -> None:
        fn = "PagedView"
        check_instance(fn, "cache", cache, PagedKVCache, "a PagedKVCache")
        if not seq_ids:
            raise ValueError(f"{fn}: give at least one seq_id")
        for s in seq_ids:
            _check_seq_id(fn, "seq_id", s)
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"{fn}: seq_ids must be different, got {list(seq_ids)}")
        lengths = {s: cache._lengths.get(s, 0) for s in seq_ids}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"{fn}: the sequences of a batch must hold as many positions each, got {lengths}"
            )

    @validated(_check_view)
    def __init__(self, cache: PagedKVCache, *seq_ids):  # no storage of its own
        self.cache, self.seq_ids = cache, list(seq_ids)
        self.batch, self.n_kv_heads = len(seq_ids), cache.n_kv_heads
        self.d_k, self.d_v, self.dtype = cache.d_k, cache.d_v, cache.dtype
        for s in seq_ids:
            cache._tables.setdefault(s, [])
            cache._lengths.setdefault(s, 0)

    @property
    def length(self) -> int:
        """Positions each sequence holds."""
        return self.cache._lengths[self.seq_ids[0]]

    @property
    def capacity(self) -> int:
        """Positions the sequences' pages hold before they need another."""
        return min(len(self.cache._tables[s]) for s in self.seq_ids) * self.cache.page_size

    def _check_view_append(self, k, v) -> None:
        check_kv_step("PagedView.append", self, k, v)

    @validated(_check_view_append)
    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append row ``i`` of k (batch, n_kv_heads, seq_new, d_k) and v (..., d_v) to
        sequence ``seq_ids[i]``; return everything held, (batch, n_kv_heads, length, d)."""
        steps = [(s, k.shape[2]) for s in self.seq_ids]
        self.cache._reserve("PagedView.append", steps)
        for i, s in enumerate(self.seq_ids):
            self.cache._write(s, k[i], v[i])
        return self.read()

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (batch, n_kv_heads, length, d_k) and values (..., d_v) of the sequences."""
        held = [self.cache.read(s) for s in self.seq_ids]
        return torch.stack([k for k, _ in held]), torch.stack([v for _, v in held])

    def truncate(self, length: int) -> None:
        """Not supported: pages may be shared with other sequences. Raises ``ValueError``."""
        raise ValueError("PagedView.truncate: a paged cache does not rewind; fork before instead")

    @property
    def nbytes(self) -> int:
        """Bytes of the pages these sequences hold (a page shared between them once)."""
        pages = {p for s in self.seq_ids for p in self.cache._tables[s]}
        return len(pages) * self.cache.page_bytes

    def __repr__(self) -> str:
        return f"PagedView(seq_ids={self.seq_ids}, length={self.length})"


# ----------------------------------------------------------------------------------------
# Memory: contiguous against paged.
# ----------------------------------------------------------------------------------------


class MemoryComparison(NamedTuple):
    """Bytes of a batch's cache (one layer), as :func:`compare_reserved_bytes` counts them."""

    used: int  # the positions themselves, a shared prefix once
    contiguous: int  # reserved by a contiguous cache: every row at max_len
    paged: int  # reserved by a paged cache: whole pages, full prefix pages once


def compare_reserved_bytes(
    lengths: Sequence[int],
    *,
    page_size: int,
    n_kv_heads: int,
    d_k: int,
    d_v: int | None = None,
    dtype: torch.dtype = torch.float32,
    max_len: int | None = None,
    shared_prefix: int = 0,
) -> MemoryComparison:
    """Memory reserved for sequences of different lengths: contiguous against paged.

    With ``row = n_kv_heads · (d_k + d_v) · bytes per number`` (one position of one layer):

    * contiguous: every sequence gets a row of ``max_len`` positions,
      ``len(lengths) · max_len · row``;
    * paged: each sequence holds ``ceil(length / page_size)`` pages of ``page_size · row``;
      the ``shared_prefix // page_size`` full pages of a prompt all of them share (forked
      from one sequence) are held once. The prompt's partly filled last page is copied by
      each sequence when it writes its first own token, so it is counted per sequence.
    * used: the positions themselves, ``(shared_prefix + Σ (length - shared_prefix)) · row``,
      the least any cache could hold (a paged cache's ``used_bytes`` also counts the prompt
      rows each copy on write duplicated).

    Parameters
    ----------
    lengths : sequence of int
        Positions each sequence holds (prefix included).
    page_size, n_kv_heads, d_k : int
    d_v : int, optional
        Default ``d_k``.
    dtype : torch.dtype, default torch.float32
    max_len : int, optional
        Positions a contiguous row reserves; default ``max(lengths)``.
    shared_prefix : int, default 0
        Leading positions every sequence shares (its prompt).

    Returns
    -------
    MemoryComparison
        ``(used, contiguous, paged)`` in bytes.

    See Also
    --------
    PagedKVCache.reserved_bytes : the same paged number, measured on a cache.

    Examples
    --------
    >>> compare_reserved_bytes([10, 3, 7], page_size=4, n_kv_heads=1, d_k=1, dtype=torch.int8)
    MemoryComparison(used=40, contiguous=60, paged=48)
    """
    fn = "compare_reserved_bytes"
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise TypeError(f"{fn}: lengths must be a non-empty list of ints, got {type_name(lengths)}")
    lengths = [check_int(fn, f"lengths[{i}]", n, minimum=0) for i, n in enumerate(lengths)]
    page_size = check_int(fn, "page_size", page_size, minimum=1)
    n_kv_heads = check_int(fn, "n_kv_heads", n_kv_heads, minimum=1)
    d_k = check_int(fn, "d_k", d_k, minimum=1)
    d_v = d_k if d_v is None else check_int(fn, "d_v", d_v, minimum=1)
    check_instance(fn, "dtype", dtype, torch.dtype, "a torch.dtype")
    max_len = max(lengths) if max_len is None else check_int(fn, "max_len", max_len, minimum=0)
    if max_len < max(lengths):
        raise ValueError(f"{fn}: max_len={max_len} is less than the longest length {max(lengths)}")
    shared_prefix = check_int(fn, "shared_prefix", shared_prefix, minimum=0)
    if shared_prefix > min(lengths):
        raise ValueError(
            f"{fn}: shared_prefix={shared_prefix} is longer than the shortest sequence "
            f"({min(lengths)} positions)"
        )
    row = n_kv_heads * (d_k + d_v) * torch.empty((), dtype=dtype).element_size()
    used = (shared_prefix + sum(n - shared_prefix for n in lengths)) * row
    shared_pages = shared_prefix // page_size
    pages = shared_pages + sum(-(-n // page_size) - shared_pages for n in lengths)
    return MemoryComparison(used, len(lengths) * max_len * row, pages * page_size * row)
