"""The checks of lesson 14: sliding_window_mask, absorbed_scores and topk_mask.

References (attnlib's own functions) are compared with independent oracles: explicit loops
over query and key positions, and for the latent scores the decompress-then-score path in
float64. Correct solutions written in other idioms must pass with no diagnosis, and the
inference run on them directly must measure nothing; mistakes written the way learners
write them, alone and together, must be named. That every registered variant and every
pair of co-occurring mistakes is diagnosed as exactly its ids is tested for every exercise
in tests/test_checks_registry.py.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch

from attnlib import checks
from attnlib.checks import get_exercise
from attnlib.checks._core import Learner

EXERCISES = ("sliding_window_mask", "absorbed_scores", "topk_mask")


@pytest.mark.parametrize("name", EXERCISES)
def test_exercises_are_registered_with_inference(name):
    ex = get_exercise(name)
    assert len(ex.misconceptions) >= 4 and ex.infer is not None and ex.build is not None


# ----------------------------------------------------------------------------------------
# Oracles
# ----------------------------------------------------------------------------------------


def _window_loop(seq_q, seq_k, window):
    out = np.zeros((seq_q, seq_k), dtype=bool)
    for i in range(seq_q):
        p = i + seq_k - seq_q  # the queries are the newest positions
        for j in range(seq_k):
            out[i, j] = p - window < j <= p
    return out


def _latent_oracle(q, c, W_uk, q_rope, k_rope):
    """Decompress every key, then score: no absorption anywhere (float64 loops over heads)."""
    batch, n_heads, seq_q, d_head = q.shape
    out = torch.zeros(batch, n_heads, seq_q, c.shape[1], dtype=torch.float64)
    for b in range(batch):
        for h in range(n_heads):
            keys = c[b] @ W_uk[h].T  # (seq_k, d_head): k_j = W_uk[h] c_j
            out[b, h] = q[b, h] @ keys.T + q_rope[b, h] @ k_rope[b].T
    return out / math.sqrt(d_head + q_rope.shape[-1])


def _topk_loop(scores, k, mask):
    mask = torch.broadcast_to(mask, scores.shape)
    out = torch.zeros(scores.shape, dtype=torch.bool)
    for idx in np.ndindex(*scores.shape[:-1]):
        allowed = [j for j in range(scores.shape[-1]) if mask[idx][j]]
        ranked = sorted(allowed, key=lambda j: (-float(scores[idx][j]), j))
        for j in ranked[:k]:
            out[idx + (j,)] = True
    return out


def test_window_reference_matches_a_loop_and_the_library():
    from attnlib.windows import sliding_window_mask

    ex = get_exercise("sliding_window_mask")
    for case in ex.cases(hidden=True):
        got = np.asarray(ex.reference(*case.args))
        np.testing.assert_array_equal(got, _window_loop(*case.args), err_msg=case.label)
        q, k, w = case.args
        lib = sliding_window_mask(q, k, window=w, align="bottom_right")
        np.testing.assert_array_equal(got, np.asarray(lib))
    labels = [c.label for c in ex.cases()]
    assert any("seq_q = seq_k" in s for s in labels) and any("window >= seq_k" in s for s in labels)


def test_latent_reference_is_decompress_then_score_in_float64():
    ex = get_exercise("absorbed_scores")
    cases = ex.cases(hidden=True)
    for case in cases:
        got = ex.reference(*case.args)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, _latent_oracle(*case.args), rtol=0, atol=1e-10)
    # non-square everywhere but one case, which lets a wrong-way W_uk run
    square = [c for c in cases if c.args[0].shape[-1] == c.args[1].shape[-1]]
    assert 1 <= len(square) < len(cases)


def test_topk_reference_matches_a_loop():
    ex = get_exercise("topk_mask")
    for case in ex.cases(hidden=True):
        got = ex.reference(*case.args)
        assert got.dtype == torch.bool
        torch.testing.assert_close(got, _topk_loop(*case.args), msg=case.label)
        scores, k, mask = case.args
        assert not (got & ~torch.broadcast_to(mask, got.shape)).any()  # selected ⊆ allowed
    # the cases hold a fully masked row, rows with fewer than k allowed keys, and k = seq_k
    labels = " ".join(c.label for c in ex.cases())
    assert "fully masked" in labels and "n_keep=6 = seq_k" in labels and "has 1 key" in labels
    assert "ties" in labels  # the tie rule is exercised


# ----------------------------------------------------------------------------------------
# Correct solutions in other idioms: no diagnosis, and the inference measures nothing
# ----------------------------------------------------------------------------------------


def window_tril_triu(seq_q, seq_k, window):
    ones = np.ones((seq_q, seq_k), dtype=bool)
    off = seq_k - seq_q
    return np.tril(ones, k=off) & np.triu(ones, k=off - window + 1)


def window_torch(seq_q, seq_k, window):
    p = torch.arange(seq_k - seq_q, seq_k)[:, None]  # positions of the queries
    j = torch.arange(seq_k)[None, :]
    return (j <= p) & (j > p - window)


def window_from_causal(seq_q, seq_k, window):
    from attnlib.masks import causal_mask

    seen = causal_mask(seq_q, seq_k, align="bottom_right")
    too_old = np.zeros_like(seen)
    d = np.arange(seq_q)[:, None] + seq_k - seq_q - np.arange(seq_k)[None, :]
    too_old[d >= window] = True
    return seen & ~too_old


def latent_einsum(q, c, W_uk, q_rope, k_rope):
    q_lat = torch.einsum("bhqd,hdl->bhql", q, W_uk)
    s = torch.einsum("bhql,bkl->bhqk", q_lat, c) + torch.einsum("bhqr,bkr->bhqk", q_rope, k_rope)
    return s / (q.shape[-1] + q_rope.shape[-1]) ** 0.5


def latent_decompressed(q, c, W_uk, q_rope, k_rope):
    keys = torch.cat(
        [torch.einsum("hdl,bkl->bhkd", W_uk, c), k_rope[:, None].expand(-1, q.shape[1], -1, -1)],
        dim=-1,
    )  # (batch, n_heads, seq_k, d_head + d_rope): the full keys, rebuilt
    queries = torch.cat([q, q_rope], dim=-1)
    return queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])


def latent_numpy(q, c, W_uk, q_rope, k_rope):
    q, c, W, qr, kr = (t.numpy() for t in (q, c, W_uk, q_rope, k_rope))
    s = (q @ W) @ np.swapaxes(c, -1, -2)[:, None] + qr @ np.swapaxes(kr, -1, -2)[:, None]
    return s / np.sqrt(q.shape[-1] + qr.shape[-1])


def topk_argsort(index_scores, k, mask):
    s = index_scores.masked_fill(~mask, float("-inf"))
    order = s.argsort(dim=-1, descending=True, stable=True)[..., :k]
    keep = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, order, True)
    return keep & mask


def topk_threshold(index_scores, k, mask):  # keeps every key tied with the k-th
    s = torch.where(mask, index_scores, -torch.inf)
    kk = min(k, s.shape[-1])
    if kk == 0:
        return torch.zeros_like(s, dtype=torch.bool)
    kth = s.sort(dim=-1, descending=True).values[..., kk - 1 : kk]  # the k-th best score
    return (s >= kth) & mask


def topk_numpy(index_scores, k, mask):
    s = np.where(mask.numpy(), index_scores.numpy(), -np.inf)
    idx = np.argsort(-s, axis=-1, kind="stable")[..., :k]
    keep = np.zeros(s.shape, dtype=bool)
    np.put_along_axis(keep, idx, True, axis=-1)
    return keep & np.isfinite(s)


CORRECT = [
    ("sliding_window_mask", window_tril_triu),
    ("sliding_window_mask", window_torch),
    ("sliding_window_mask", window_from_causal),
    ("absorbed_scores", latent_einsum),
    ("absorbed_scores", latent_decompressed),
    ("absorbed_scores", latent_numpy),
    ("topk_mask", topk_argsort),
    ("topk_mask", topk_numpy),
]


@pytest.mark.parametrize(("name", "fn"), CORRECT, ids=[f.__name__ for _, f in CORRECT])
def test_correct_solutions_pass_and_the_inference_measures_nothing(name, fn, capsys):
    report = checks.run(name, fn, hidden=True)
    assert report.ok, report.first_failure
    assert checks.diagnose(name, fn) == []
    assert list(get_exercise(name).infer(Learner(fn))) == []
    checks.check(name, fn)
    assert capsys.readouterr().out.startswith(f"✔ {name}: correct on all")


def test_a_solution_that_calls_the_library_is_refused():
    from attnlib.windows import sliding_window_mask

    def calls_library(seq_q, seq_k, window):
        return sliding_window_mask(seq_q, seq_k, window=window, align="bottom_right")

    with pytest.raises(AssertionError, match="calls the course's reference"):
        checks.check("sliding_window_mask", calls_library)


# ----------------------------------------------------------------------------------------
# Mistakes written the way learners write them
# ----------------------------------------------------------------------------------------


def window_le_and_first_positions(seq_q, seq_k, window):
    i = np.arange(seq_q)[:, None]  # forgot that the queries are the last positions...
    j = np.arange(seq_k)[None, :]
    return (j >= i - window) & (j <= i)  # ...and kept W + 1 keys


def window_abs(seq_q, seq_k, window):
    p = np.arange(seq_q)[:, None] + seq_k - seq_q
    return np.abs(p - np.arange(seq_k)[None, :]) < window  # a symmetric band


def window_float_triangles(seq_q, seq_k, window):
    off = seq_k - seq_q
    ones = np.ones((seq_q, seq_k))
    return np.tril(ones, k=off) - np.tril(ones, k=off - window)  # 0/1 floats


def window_strict(seq_q, seq_k, window):
    p = torch.arange(seq_k - seq_q, seq_k)[:, None]
    j = torch.arange(seq_k)[None, :]
    return (j < p) & (j >= p - window)  # "the W keys before me"


def latent_no_rope_sqrt_head(q, c, W_uk, q_rope, k_rope):
    return (q @ W_uk) @ c[:, None].transpose(-1, -2) / math.sqrt(q.shape[-1])


def latent_transposed_latent_scale(q, c, W_uk, q_rope, k_rope):
    s = (q @ W_uk.mT) @ c[:, None].mT + q_rope @ k_rope[:, None].mT
    return s / math.sqrt(q.shape[-1] + q_rope.shape[-1])


def latent_scaled_by_latent(q, c, W_uk, q_rope, k_rope):
    q_lat = torch.einsum("bhqd,hdl->bhql", q, W_uk)  # width d_latent now...
    s = torch.einsum("bhql,bkl->bhqk", q_lat, c) + torch.einsum("bhqr,bkr->bhqk", q_rope, k_rope)
    return s / math.sqrt(q_lat.shape[-1])  # ...so scaled by it


def topk_ascending_sort(index_scores, k, mask):
    s = index_scores.masked_fill(~mask, float("inf"))
    idx = s.argsort(dim=-1)[..., :k]  # ascending: the lowest scores
    return torch.zeros_like(mask.expand_as(s)).scatter(-1, idx, True) & mask


def topk_no_mask_threshold(index_scores, k, mask):
    kth = index_scores.sort(dim=-1, descending=True).values[..., k : k + 1]
    return index_scores >= kth  # index k, not k - 1: k + 1 keys; and the mask is never used


def topk_then_mask(index_scores, k, mask):
    top = index_scores.topk(k, dim=-1).indices
    return torch.zeros(index_scores.shape, dtype=torch.bool).scatter(-1, top, True) & mask


def window_longformer(seq_q, seq_k, window):
    p = np.arange(seq_k - seq_q, seq_k)[:, None]
    return np.abs(p - np.arange(seq_k)[None, :]) <= window // 2  # W/2 on each side


def window_longformer_first_positions(seq_q, seq_k, window):
    i, j = torch.arange(seq_q)[:, None], torch.arange(seq_k)[None, :]
    return (i - j).abs() <= window / 2  # centred, and the queries at 0 .. seq_q - 1


def window_looking_forward(seq_q, seq_k, window):
    p = np.arange(seq_k - seq_q, seq_k)[:, None]
    j = np.arange(seq_k)[None, :]
    return (j >= p) & (j < p + window)  # key minus query where it should be query minus key


def topk_over_queries(index_scores, k, mask):
    s = index_scores.masked_fill(~mask, float("-inf"))
    best = s.argsort(dim=1, descending=True, stable=True)[:, :k]  # dim 1: the queries
    return torch.zeros(s.shape, dtype=torch.bool).scatter(1, best, True) & mask


def topk_scores_times_mask(index_scores, k, mask):
    s = index_scores * mask  # forbidden keys score 0, not -inf
    best = s.argsort(dim=-1, descending=True, stable=True)[..., :k]
    return torch.zeros(s.shape, dtype=torch.bool).scatter(-1, best, True) & mask


def topk_over_queries_with_topk(index_scores, k, mask):
    s = index_scores.masked_fill(~mask, float("-inf"))
    top = s.topk(k, dim=-2).indices  # the k best queries of each key
    return torch.zeros(s.shape, dtype=torch.bool).scatter(-2, top, True) & mask


def latent_rope_added_after_scaling(q, c, W_uk, q_rope, k_rope):
    content = (q @ W_uk) @ c[:, None].mT / math.sqrt(q.shape[-1] + q_rope.shape[-1])
    return content + q_rope @ k_rope[:, None].mT  # the rotary part unscaled


def latent_each_part_by_its_width(q, c, W_uk, q_rope, k_rope):
    content = torch.einsum("bhqd,hdl,bkl->bhqk", q, W_uk, c) / math.sqrt(q.shape[-1])
    position = torch.einsum("bhqr,bkr->bhqk", q_rope, k_rope) / math.sqrt(q_rope.shape[-1])
    return content + position  # two dot products, each scaled by its own width


def topk_fill_without_and(index_scores, k, mask):
    s = index_scores.masked_fill(~mask, float("-inf"))
    top = s.topk(k, dim=-1).indices  # a row with fewer than k allowed keys picks masked ones
    return torch.zeros(s.shape, dtype=torch.bool).scatter(-1, top, True)


MISTAKES = [
    ("sliding_window_mask", window_le_and_first_positions, ["window-plus-one", "window-top-left"]),
    ("sliding_window_mask", window_abs, ["window-looks-ahead"]),
    ("sliding_window_mask", window_float_triangles, ["mask-not-boolean"]),
    ("sliding_window_mask", window_strict, ["window-plus-one", "window-excludes-self"]),
    ("absorbed_scores", latent_no_rope_sqrt_head, ["rotary-key-forgotten", "scale-head-only"]),
    ("absorbed_scores", latent_transposed_latent_scale, ["up-projection-transposed"]),
    ("absorbed_scores", latent_scaled_by_latent, ["scale-latent-width"]),
    ("topk_mask", topk_ascending_sort, ["topk-lowest"]),
    # torch.topk keeps no particular key among ties, a threshold keeps them all
    (
        "topk_mask",
        topk_no_mask_threshold,
        ["topk-off-by-one", "topk-ignores-mask", "topk-ties-all-kept"],
    ),
    ("topk_mask", topk_then_mask, ["topk-mask-after-selection", "topk-tie-break"]),
    ("topk_mask", topk_fill_without_and, ["topk-ignores-mask", "topk-tie-break"]),
    ("topk_mask", topk_threshold, ["topk-ties-all-kept"]),
    # issue 36: mistakes the checks did not name before
    ("sliding_window_mask", window_longformer, ["window-centred"]),
    (
        "sliding_window_mask",
        window_longformer_first_positions,
        ["window-centred", "window-top-left"],
    ),
    ("sliding_window_mask", window_looking_forward, ["window-reversed"]),
    ("topk_mask", topk_over_queries, ["topk-across-queries"]),
    ("topk_mask", topk_over_queries_with_topk, ["topk-tie-break", "topk-across-queries"]),
    ("topk_mask", topk_scores_times_mask, ["topk-mask-fill-zero"]),
    ("absorbed_scores", latent_rope_added_after_scaling, ["rotary-part-unscaled"]),
    ("absorbed_scores", latent_each_part_by_its_width, ["parts-scaled-apart"]),
]


@pytest.mark.parametrize(("name", "fn", "ids"), MISTAKES, ids=[f.__name__ for _, f, _ in MISTAKES])
def test_learner_mistakes_are_named(name, fn, ids):
    report = checks.run(name, fn)
    assert not report.ok
    assert report.misconceptions == ids, report.findings
    assert checks.diagnose(name, fn) == ids
    # feedback in steps: the first failure measures and asks, the second names the cause
    checks.forget()
    questions = {m.id: m.question for m in get_exercise(name).misconceptions}
    with pytest.raises(AssertionError) as first:
        checks.check(name, fn)
    for mid in ids:
        assert questions[mid] in str(first.value)
        assert checks.explanation(name, mid) not in str(first.value)
    with pytest.raises(AssertionError) as second:
        checks.check(name, fn)
    assert str(second.value).splitlines()[-1] == checks.result_line(name, ids)
    for mid in ids:
        assert checks.explanation(name, mid) in str(second.value)
    checks.forget()


@pytest.mark.parametrize("name", EXERCISES)
def test_a_check_takes_well_under_a_second(name):
    ex = get_exercise(name)
    worst = ex.build(**{k: v for m in ex.misconceptions[:1] for k, v in m.settings.items()})
    start = time.perf_counter()
    checks.run(name, worst, hidden=True)
    checks.run(name, ex.reference, hidden=True)
    assert time.perf_counter() - start < 1.0
