"""attnlib.masks — causal_mask and padding_mask against explicit loops and torch's own."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib.masks import causal_mask, padding_mask

SIZES = [(1, 1), (4, 4), (3, 7), (7, 3), (1, 5), (5, 1), (0, 3), (3, 0)]


def loop_causal(seq_q: int, seq_k: int, align: str) -> np.ndarray:
    """Query i may see key j when j is not in its future, written out one entry at a time."""
    m = np.zeros((seq_q, seq_k), dtype=bool)
    for i in range(seq_q):
        # top-left: query i is position i; bottom-right: the queries are the last seq_q
        # of seq_k positions, so query i is position i + (seq_k - seq_q)
        pos = i if align == "top_left" else i + (seq_k - seq_q)
        for j in range(seq_k):
            m[i, j] = j <= pos
    return m


@pytest.mark.parametrize(("seq_q", "seq_k"), SIZES)
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_causal_mask_matches_explicit_loop(seq_q, seq_k, align):
    m = causal_mask(seq_q, seq_k, align=align)
    assert isinstance(m, np.ndarray) and m.dtype == np.bool_
    assert m.shape == (seq_q, seq_k)
    np.testing.assert_array_equal(m, loop_causal(seq_q, seq_k, align))
    t = causal_mask(seq_q, seq_k, align=align, like=torch.zeros(1))
    assert isinstance(t, torch.Tensor) and t.dtype == torch.bool
    np.testing.assert_array_equal(t.numpy(), m)


def test_causal_mask_default_is_square_top_left():
    np.testing.assert_array_equal(causal_mask(4), np.tril(np.ones((4, 4), bool)))
    np.testing.assert_array_equal(causal_mask(4), causal_mask(4, 4, align="bottom_right"))
    # the two alignments differ exactly when seq_q != seq_k
    assert not np.array_equal(causal_mask(3, 5), causal_mask(3, 5, align="bottom_right"))


@pytest.mark.parametrize(("seq_q", "seq_k"), [(4, 4), (3, 7), (7, 3), (1, 6)])
def test_top_left_is_what_sdpa_is_causal_does(seq_q, seq_k):
    g = torch.Generator().manual_seed(seq_q * 10 + seq_k)
    q = torch.randn(2, seq_q, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, seq_k, 8, generator=g, dtype=torch.float64)
    eye = torch.eye(seq_k, dtype=torch.float64).expand(2, seq_k, seq_k)
    # SDPA with values = identity returns its weights; their zeros are its mask
    w_sdpa = F.scaled_dot_product_attention(q, k, eye, is_causal=True)
    m = causal_mask(seq_q, seq_k, like=q)
    assert torch.equal(w_sdpa[0] > 0, m)
    w_mask = F.scaled_dot_product_attention(q, k, eye, attn_mask=m)
    torch.testing.assert_close(w_mask, w_sdpa)


@pytest.mark.parametrize(("seq_q", "seq_k"), [(4, 4), (3, 7), (7, 3), (1, 6)])
def test_bottom_right_is_torch_causal_lower_right(seq_q, seq_k):
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns when seq_q > seq_k
        lower_right = causal_lower_right(seq_q, seq_k)._materialize()
    upper_left = causal_upper_left(seq_q, seq_k)._materialize()
    assert torch.equal(causal_mask(seq_q, seq_k, align="bottom_right", like=q_like()), lower_right)
    assert torch.equal(causal_mask(seq_q, seq_k, like=q_like()), upper_left)


def q_like():
    return torch.zeros(1, dtype=torch.float16)


def test_bottom_right_last_query_sees_every_key_when_decoding():
    # decoding with a cache: 2 new queries, 6 keys (4 cached + 2 new)
    m = causal_mask(2, 6, align="bottom_right")
    np.testing.assert_array_equal(m, [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: causal_mask(-1), ValueError, "causal_mask: seq_q must be >= 0, got -1"),
        (lambda: causal_mask(3, -2), ValueError, "causal_mask: seq_k must be >= 0, got -2"),
        (lambda: causal_mask(3.0), TypeError, "causal_mask: seq_q must be an int, got float"),
        (lambda: causal_mask(True), TypeError, "seq_q must be an int, got bool"),
        (lambda: causal_mask(3, "4"), TypeError, "seq_k must be an int, got str"),
        (
            lambda: causal_mask(3, align="top-left"),
            ValueError,
            "align must be 'top_left' or 'bottom_right', got 'top-left'",
        ),
    ],
    ids=["neg-seq_q", "neg-seq_k", "float-seq_q", "bool-seq_q", "str-seq_k", "bad-align"],
)
def test_causal_mask_errors(call, error, pattern):
    with pytest.raises(error, match=re.escape(pattern)):
        call()


def test_causal_mask_accepts_numpy_ints():
    np.testing.assert_array_equal(
        causal_mask(np.int64(3), np.int32(5)), loop_causal(3, 5, "top_left")
    )


# ----------------------------------------------------------------------------------------
# padding_mask
# ----------------------------------------------------------------------------------------


def loop_padding(lengths, seq_k):
    m = np.zeros((len(lengths), 1, seq_k), dtype=bool)
    for b, n in enumerate(lengths):
        for j in range(seq_k):
            m[b, 0, j] = j < n
    return m


@pytest.mark.parametrize(
    "lengths", [[3, 5, 0, 1], (5,), np.array([2, 4], dtype=np.int32), []], ids=str
)
def test_padding_mask_numpy(lengths):
    m = padding_mask(lengths, 5)
    assert isinstance(m, np.ndarray) and m.dtype == np.bool_
    assert m.shape == (len(lengths), 1, 5)  # (batch, 1, seq_k)
    np.testing.assert_array_equal(m, loop_padding(list(lengths), 5))


def test_padding_mask_torch():
    lengths = torch.tensor([3, 5, 0, 1])
    m = padding_mask(lengths, 5)
    assert isinstance(m, torch.Tensor) and m.dtype == torch.bool
    assert m.shape == (4, 1, 5)
    np.testing.assert_array_equal(m.numpy(), loop_padding([3, 5, 0, 1], 5))


def test_padding_mask_blocks_padded_keys_in_attend_and_sdpa():
    # changing what sits in padded key/value positions changes nothing
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 8, generator=g)
    k = torch.randn(3, 7, 8, generator=g)
    v = torch.randn(3, 7, 6, generator=g)
    lengths = torch.tensor([7, 3, 5])
    mask = padding_mask(lengths, 7)
    out, w = attnlib.attend(q, k, v, mask)
    k2, v2 = k.clone(), v.clone()
    for b, n in enumerate(lengths.tolist()):
        k2[b, n:] = 100.0
        v2[b, n:] = -50.0
    out2, w2 = attnlib.attend(q, k2, v2, mask)
    torch.testing.assert_close(out2, out)
    torch.testing.assert_close(w2, w)
    assert torch.all(w[1, :, 3:] == 0) and torch.all(w[2, :, 5:] == 0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.parametrize(
    ("lengths", "seq_k", "error", "pattern"),
    [
        (
            [2, -1],
            4,
            ValueError,
            "padding_mask: every length must be in 0..seq_k=4, got lengths [2, -1]",
        ),
        (
            [2, 5],
            4,
            ValueError,
            "padding_mask: every length must be in 0..seq_k=4, got lengths [2, 5]",
        ),
        (torch.tensor([9]), 4, ValueError, "every length must be in 0..seq_k=4, got lengths [9]"),
        (
            [[1, 2], [3, 4]],
            4,
            ValueError,
            "padding_mask: lengths must have shape (batch,), got shape (2, 2)",
        ),
        (3, 4, ValueError, "lengths must have shape (batch,), got shape ()"),
        ([1.0, 2.0], 4, TypeError, "padding_mask: lengths must be integers, got dtype float64"),
        (torch.tensor([1.5]), 4, TypeError, "lengths must be integers, got dtype float32"),
        ([1, 2], -1, ValueError, "padding_mask: seq_k must be >= 0, got -1"),
        ([1, 2], 4.0, TypeError, "padding_mask: seq_k must be an int, got float"),
    ],
    ids=[
        "negative",
        "too-large",
        "torch-too-large",
        "2d",
        "scalar",
        "float",
        "torch-float",
        "neg-seq_k",
        "float-seq_k",
    ],
)
def test_padding_mask_errors(lengths, seq_k, error, pattern):
    with pytest.raises(error, match=re.escape(pattern)):
        padding_mask(lengths, seq_k)
