"""Lessons 13 and 14: realistic wrong submissions, named by measurement (issue 23).

Like tests/test_checks_inference.py, but for the graded exercises of lessons 13 and 14:
functions written the way learners write them (loops, numpy, ``torch.topk``, the paper's
formulas typed literally), with one mistake or two at once, each of which must be named with
all of its ids; correct functions written differently, which must pass with no diagnosis;
the rules each exercise's specification states, each exercised by its visible and hidden
cases; and the figures of the two lessons (colour-blind safe colours, labels that do not
collide, a chance label computed from its value).
"""

from __future__ import annotations

import itertools
import math

import matplotlib
import numpy as np
import pytest
import torch
from named import assert_correct, in_registry_order

from attnlib import checks
from attnlib.checks import get_exercise

matplotlib.use("Agg")

# ----------------------------------------------------------------------------------------
# previous_token_score(weights) -> (n_heads,)
# ----------------------------------------------------------------------------------------


def prev_loop_first_sequence(weights):
    n_heads, seq = weights.shape[1], weights.shape[-1]
    out = torch.zeros(n_heads, dtype=weights.dtype)
    for h in range(n_heads):  # the batch index never moves
        out[h] = torch.stack([weights[0, h, t, t - 1] for t in range(1, seq)]).mean()
    return out


def prev_range_stops_early(weights):
    seq = weights.shape[-1]
    t = torch.arange(1, seq - 1)  # "up to seq - 1", one query too few
    return weights[:, :, t, t - 1].mean(dim=(0, 2))


def prev_upper_diagonal_summed(weights):
    return torch.diagonal(weights, 1, -2, -1).sum(dim=(0, 2))  # offset +1: above the diagonal


def prev_divided_by_seq(weights):
    batch, seq = weights.shape[0], weights.shape[-1]
    t = torch.arange(1, seq)
    return weights[:, :, t, t - 1].sum(dim=(0, 2)) / (batch * seq)


def prev_numpy_loop_from_two_first_sequence(weights):
    w = weights.numpy()
    seq = w.shape[-1]
    return np.array(
        [np.mean([w[0, h, t, t - 1] for t in range(2, seq)]) for h in range(w.shape[1])]
    )


def prev_from_zero_over_heads(weights):
    seq = weights.shape[-1]
    t = torch.arange(seq)  # t - 1 = -1 for query 0
    return weights[:, :, t, t - 1].mean(dim=(1, 2))


# ----------------------------------------------------------------------------------------
# k_composition(W_q, W_k, W_v, W_o) -> float
# ----------------------------------------------------------------------------------------


def kc_spectral(W_q, W_k, W_v, W_o):
    W_QK, W_OV = W_q @ W_k.T, W_v @ W_o
    norm = torch.linalg.norm  # with ord=2 a matrix gets its largest singular value
    return float(norm(W_QK @ W_OV.T, 2) / (norm(W_QK, 2) * norm(W_OV, 2)))


def kc_paper_formulas_literally(W_q, W_k, W_v, W_o):
    W_QK = W_q.T @ W_k  # Elhage et al.: W_QK = W_Q^T W_K (their W_Q is (d_head, d_model))
    W_OV = W_o @ W_v  # W_OV = W_O W_V
    fro = torch.linalg.matrix_norm
    return float(fro(W_QK.T @ W_OV) / (fro(W_QK) * fro(W_OV)))


def kc_numpy_spectral_untransposed(W_q, W_k, W_v, W_o):
    qk = W_q.numpy() @ W_k.numpy().T
    ov = W_v.numpy() @ W_o.numpy()
    n = np.linalg.norm
    return float(n(qk @ ov, 2) / (n(qk, 2) * n(ov, 2)))


def kc_query_side_raw(W_q, W_k, W_v, W_o):
    return float(torch.linalg.matrix_norm((W_v @ W_o) @ (W_q @ W_k.T)))


def kc_squared_norms(W_q, W_k, W_v, W_o):
    W_QK, W_OV = W_q @ W_k.T, W_v @ W_o

    def fro(x):
        return (x**2).sum()  # "the sum of the squared entries", without the square root

    return float(fro(W_QK @ W_OV.T) / (fro(W_QK) * fro(W_OV)))


def kc_numpy_elementwise(W_q, W_k, W_v, W_o):
    qk = W_q.numpy() @ W_k.numpy().T
    ov = W_v.numpy() @ W_o.numpy()
    return float(np.linalg.norm(qk * ov.T) / (np.linalg.norm(qk) * np.linalg.norm(ov)))


def kc_divided_by_qk_only(W_q, W_k, W_v, W_o):
    W_QK, W_OV = W_q @ W_k.T, W_v @ W_o
    return float(torch.linalg.norm(W_QK @ W_OV.T) / torch.linalg.norm(W_QK))  # one factor


def kc_squared_query_side_raw(W_q, W_k, W_v, W_o):
    return float(((W_v @ W_o @ W_q @ W_k.T) ** 2).sum())


# ----------------------------------------------------------------------------------------
# absorbed_scores(q, c, W_uk, q_rope, k_rope) -> (batch, n_heads, seq_q, seq_k)
# ----------------------------------------------------------------------------------------


def latent_without_head_axis(q, c, W_uk, q_rope, k_rope):
    s = (q @ W_uk) @ c.transpose(-1, -2) + q_rope @ k_rope.transpose(-1, -2)
    return s / math.sqrt(q.shape[-1] + q_rope.shape[-1])


def latent_unscaled(q, c, W_uk, q_rope, k_rope):
    return (q @ W_uk) @ c[:, None].transpose(-1, -2) + q_rope @ k_rope[:, None].transpose(-1, -2)


def latent_divided_by_width(q, c, W_uk, q_rope, k_rope):
    return latent_unscaled(q, c, W_uk, q_rope, k_rope) / (q.shape[-1] + q_rope.shape[-1])


def latent_cached_width(q, c, W_uk, q_rope, k_rope):
    return latent_unscaled(q, c, W_uk, q_rope, k_rope) / math.sqrt(c.shape[-1] + k_rope.shape[-1])


def latent_without_head_axis_unscaled(q, c, W_uk, q_rope, k_rope):
    return (q @ W_uk) @ c.transpose(-1, -2) + q_rope @ k_rope.transpose(-1, -2)


# ----------------------------------------------------------------------------------------
# topk_mask(index_scores, n_keep, mask) -> bool (batch, seq_q, seq_k)
# ----------------------------------------------------------------------------------------


def topk_with_torch_topk(index_scores, n_keep, mask):
    s = index_scores.masked_fill(~mask, float("-inf"))
    top = s.topk(n_keep, dim=-1).indices  # which of several equal scores: unspecified
    return torch.zeros(s.shape, dtype=torch.bool).scatter(-1, top, True) & mask


def topk_last_of_ascending_sort(index_scores, n_keep, mask):
    s = index_scores.masked_fill(~mask, float("-inf"))
    order = s.argsort(dim=-1, stable=True)  # ascending: the best come last
    top = order[..., s.shape[-1] - n_keep :]
    return torch.zeros(s.shape, dtype=torch.bool).scatter(-1, top, True) & mask


def topk_threshold(index_scores, n_keep, mask):
    s = torch.where(mask, index_scores, -torch.inf)
    kth = s.sort(dim=-1, descending=True).values[..., n_keep - 1 : n_keep]
    return (s >= kth) & mask  # every key tied with the n_keep-th is kept


def topk_one_more_with_torch_topk(index_scores, n_keep, mask):
    s = index_scores.masked_fill(~mask, float("-inf"))
    top = s.topk(min(n_keep + 1, s.shape[-1]), dim=-1).indices
    return torch.zeros(s.shape, dtype=torch.bool).scatter(-1, top, True) & mask


def window_longformer_numpy(seq_q, seq_k, window):
    p = np.arange(seq_k - seq_q, seq_k)[:, None]
    return np.abs(p - np.arange(seq_k)[None, :]) <= window / 2  # Longformer's |i - j| <= W/2


def topk_per_key(index_scores, n_keep, mask):
    s = index_scores.masked_fill(~mask, float("-inf"))
    order = s.argsort(dim=-2, descending=True, stable=True)  # ranked along the queries
    keep = torch.zeros(s.shape, dtype=torch.bool).scatter(-2, order[..., :n_keep, :], True)
    return keep & mask


def topk_masked_to_zero(index_scores, n_keep, mask):
    s = torch.where(mask, index_scores, 0.0)
    top = s.argsort(dim=-1, descending=True, stable=True)[..., :n_keep]
    return torch.zeros(s.shape, dtype=torch.bool).scatter(-1, top, True) & mask


REALISTIC = [
    ("previous_token_score", prev_loop_first_sequence, ["first-batch-only"]),
    ("previous_token_score", prev_range_stops_early, ["query-range-off-by-one"]),
    ("previous_token_score", prev_upper_diagonal_summed, ["query-key-swapped", "sum-not-mean"]),
    ("previous_token_score", prev_divided_by_seq, ["mean-wrong-count"]),
    (
        "previous_token_score",
        prev_numpy_loop_from_two_first_sequence,
        ["query-range-off-by-one", "first-batch-only"],
    ),
    (
        "previous_token_score",
        prev_from_zero_over_heads,
        ["includes-first-query", "mean-over-heads"],
    ),
    ("k_composition", kc_spectral, ["spectral-norm"]),
    ("k_composition", kc_paper_formulas_literally, ["column-vector-formulas"]),
    ("k_composition", kc_numpy_spectral_untransposed, ["ov-not-transposed", "spectral-norm"]),
    ("k_composition", kc_query_side_raw, ["query-side", "not-normalised"]),
    ("k_composition", kc_squared_norms, ["squared-norms"]),
    ("k_composition", kc_numpy_elementwise, ["elementwise-product"]),
    ("k_composition", kc_divided_by_qk_only, ["half-normalised"]),
    ("k_composition", kc_squared_query_side_raw, ["query-side", "squared-norms", "not-normalised"]),
    ("absorbed_scores", latent_without_head_axis, ["latents-broadcast-over-heads"]),
    ("absorbed_scores", latent_unscaled, ["scale-missing"]),
    ("absorbed_scores", latent_divided_by_width, ["scale-not-sqrt"]),
    ("absorbed_scores", latent_cached_width, ["scale-latent-plus-rope"]),
    (
        "absorbed_scores",
        latent_without_head_axis_unscaled,
        ["latents-broadcast-over-heads", "scale-missing"],
    ),
    ("topk_mask", topk_with_torch_topk, ["topk-tie-break"]),
    ("topk_mask", topk_last_of_ascending_sort, ["topk-tie-break"]),
    ("topk_mask", topk_threshold, ["topk-ties-all-kept"]),
    ("topk_mask", topk_one_more_with_torch_topk, ["topk-off-by-one", "topk-tie-break"]),
    ("sliding_window_mask", window_longformer_numpy, ["window-centred"]),
    ("topk_mask", topk_per_key, ["topk-across-queries"]),
    ("topk_mask", topk_masked_to_zero, ["topk-mask-fill-zero"]),
]


@pytest.mark.parametrize(
    ("name", "fn", "ids"), [pytest.param(*r, id=f"{r[0]}-{r[1].__name__}") for r in REALISTIC]
)
def test_a_realistic_mistake_is_named_with_all_its_ids(name, fn, ids):
    expected = in_registry_order(name, ids)
    report = checks.run(name, fn)
    assert not report.ok and not report.inference_error
    assert report.misconceptions == expected, report.findings
    assert [f.id for f in report.findings] == expected  # measured, not matched to a variant
    assert all(len(f.detail) > 20 for f in report.findings)  # each says what was measured
    assert checks.diagnose(name, fn) == expected
    assert checks.run(name, fn, hidden=True).misconceptions == expected
    with pytest.raises(AssertionError, match="hidden tests failed"):
        checks.check_hidden(name, fn)
    # feedback in steps: first each measurement and its question, no cause named ...
    checks.forget()
    by_id = {m.id: m for m in get_exercise(name).misconceptions}
    with pytest.raises(AssertionError) as first:
        checks.check(name, fn)
    for f in report.findings:
        assert f"Measured: {f.detail}" in str(first.value)
        assert by_id[f.id].question in str(first.value)
        assert by_id[f.id].explanation not in str(first.value)
    # ... then, the same mistake again, each cause with its id
    with pytest.raises(AssertionError) as second:
        checks.check(name, fn)
    assert str(second.value).splitlines()[-1] == checks.result_line(name, expected)
    for mid in expected:
        assert f"[{mid}]" in str(second.value) and by_id[mid].explanation in str(second.value)
    checks.forget()


# ----------------------------------------------------------------------------------------
# Correct functions written differently: they pass, and the inference measures nothing
# ----------------------------------------------------------------------------------------


def prev_diagonal_offset(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def prev_numpy_loop(weights):
    w = weights.numpy()
    b, h, s, _ = w.shape
    return np.array([np.mean([w[i, j, t, t - 1] for i in range(b) for t in range(1, s)])
                     for j in range(h)])  # fmt: skip


def kc_numpy(W_q, W_k, W_v, W_o):
    qk = W_q.numpy() @ W_k.numpy().T
    ov = W_v.numpy() @ W_o.numpy()
    return float(np.linalg.norm(qk @ ov.T) / (np.linalg.norm(qk) * np.linalg.norm(ov)))


def kc_float32(W_q, W_k, W_v, W_o):
    W_q, W_k, W_v, W_o = (w.float() for w in (W_q, W_k, W_v, W_o))
    W_QK, W_OV = W_q @ W_k.T, W_v @ W_o
    return float(
        torch.linalg.norm(W_QK @ W_OV.T) / (torch.linalg.norm(W_QK) * torch.linalg.norm(W_OV))
    )


def latent_einsum(q, c, W_uk, q_rope, k_rope):
    content = torch.einsum("bhqd,hdl,bkl->bhqk", q, W_uk, c)
    position = torch.einsum("bhqr,bkr->bhqk", q_rope, k_rope)
    return (content + position) / math.sqrt(q.shape[-1] + q_rope.shape[-1])


def topk_negated_stable_sort(index_scores, n_keep, mask):
    s = index_scores.masked_fill(~mask, float("-inf"))
    top = (-s).argsort(dim=-1, stable=True)[..., :n_keep]  # ascending of -s: ties keep order
    return torch.zeros(s.shape, dtype=torch.bool).scatter(-1, top, True) & mask


def topk_rank_by_count(index_scores, n_keep, mask):
    # rank of key j = keys that beat it (higher score, or equal score and lower index)
    s = index_scores.masked_fill(~mask, float("-inf"))
    higher = s[..., None, :] > s[..., :, None]  # (..., seq_k, seq_k): key i beaten by key j
    j = torch.arange(s.shape[-1])
    tied_before = (s[..., None, :] == s[..., :, None]) & (j[None, :] < j[:, None])
    rank = (higher | tied_before).sum(-1)
    return (rank < n_keep) & mask


CORRECT = [
    ("previous_token_score", prev_diagonal_offset),
    ("previous_token_score", prev_numpy_loop),
    ("k_composition", kc_numpy),
    ("k_composition", kc_float32),
    ("absorbed_scores", latent_einsum),
    ("topk_mask", topk_negated_stable_sort),
    ("topk_mask", topk_rank_by_count),
]


@pytest.mark.parametrize(
    ("name", "fn"), [pytest.param(*r, id=f"{r[0]}-{r[1].__name__}") for r in CORRECT]
)
def test_a_correct_function_written_differently_passes_with_no_diagnosis(name, fn):
    assert_correct(name, fn)


def kc_query_side(W_q, W_k, W_v, W_o):
    W_QK, W_OV = W_q @ W_k.T, W_v @ W_o
    fro = torch.linalg.matrix_norm
    return float(fro(W_OV @ W_QK) / (fro(W_QK) * fro(W_OV)))  # Q-composition's product


def test_the_first_failure_on_the_query_side_asks_and_does_not_tell_the_fix():
    # issue 36: 13.2's first failure named the key-side product; now it measures and asks
    checks.forget()
    with pytest.raises(AssertionError) as first:
        checks.check("k_composition", kc_query_side)
    message = str(first.value)
    query_side = next(m for m in get_exercise("k_composition").misconceptions
                      if m.id == "query-side")  # fmt: skip
    assert query_side.question in message
    assert query_side.explanation not in message
    for answer in ("W_QK W_OVᵀ", "W_OV.T", "W_OVᵀ", "transpose", "Q-composition"):
        assert answer not in message, answer
    with pytest.raises(AssertionError) as second:
        checks.check("k_composition", kc_query_side)
    assert query_side.explanation in str(second.value)
    checks.forget()


@pytest.mark.parametrize("name", ["previous_token_score", "k_composition"])
def test_lesson_13_checks_now_diagnose_by_inference(name):
    ex = get_exercise(name)
    assert ex.infer is not None and ex.build is not None
    assert len(checks.co_occurring(name)) >= 3  # pairs of mistakes, each named as two


# ----------------------------------------------------------------------------------------
# Every rule of a specification is exercised by the visible and by the hidden cases
# ----------------------------------------------------------------------------------------


def _tied_at_the_boundary(scores, n_keep, mask):
    """Rows whose n_keep-th best allowed score is shared with a key left out."""
    s = torch.where(torch.as_tensor(mask).expand_as(scores), scores, -torch.inf)
    rows = s.reshape(-1, s.shape[-1])
    count = 0
    for r in rows:
        allowed = r[torch.isfinite(r)]
        if len(allowed) <= n_keep or n_keep == 0:
            continue
        kth = allowed.sort(descending=True).values[n_keep - 1]
        count += int((allowed == kth).sum() > 1 and (allowed > kth).sum() < n_keep)
    return count


@pytest.mark.parametrize("hidden", [False, True])
def test_topk_cases_have_ties_where_the_tie_rule_decides(hidden):
    cases = get_exercise("topk_mask").cases(hidden=hidden)
    tied = [c for c in cases if _tied_at_the_boundary(*c.args) > 0]
    assert len(tied) >= 2, [c.label for c in cases]
    if hidden:
        hidden_only = cases[len(get_exercise("topk_mask").cases()) :]
        assert any(_tied_at_the_boundary(*c.args) > 0 for c in hidden_only)


@pytest.mark.parametrize(
    "wrong", [topk_with_torch_topk, topk_last_of_ascending_sort, topk_threshold]
)
def test_a_wrong_tie_break_fails_the_visible_and_the_hidden_check(wrong):
    assert not checks.run("topk_mask", wrong).ok
    with pytest.raises(AssertionError, match="hidden tests failed"):
        checks.check_hidden("topk_mask", wrong)


def test_torch_topk_on_cpu_does_not_keep_the_lowest_of_equal_scores():
    # what lesson 14 states for torch 2.13 (its docs: tied indices "are not guaranteed to
    # be stable"); measured here on the CPU build
    assert torch.__version__.startswith("2.13")
    picked = sorted(torch.topk(torch.zeros(1, 1, 8), 3).indices[0, 0].tolist())
    assert picked != [0, 1, 2]


@pytest.mark.parametrize("hidden", [False, True])
def test_latent_cases_never_have_batch_equal_to_heads(hidden):
    for case in get_exercise("absorbed_scores").cases(hidden=hidden):
        q = case.args[0]
        assert q.shape[0] != q.shape[1], case.label  # a head/batch mix-up cannot hide


@pytest.mark.parametrize("hidden", [False, True])
def test_window_cases_include_early_queries_and_decoding_steps(hidden):
    cases = get_exercise("sliding_window_mask").cases(hidden=hidden)
    early = [c for c in cases if c.args[2] > 1 and c.args[1] - c.args[0] < c.args[2] - 1]
    decoding = [c for c in cases if c.args[0] < c.args[1]]
    assert early and decoding
    if hidden:
        extra = cases[len(get_exercise("sliding_window_mask").cases()) :]
        assert any(c.args[2] > 1 and c.args[1] - c.args[0] < c.args[2] - 1 for c in extra)


# ----------------------------------------------------------------------------------------
# Figures: colour-blind safe distance curves, labels that do not collide, chance computed
# ----------------------------------------------------------------------------------------

# The colour-vision simulation of tests/test_plot_style.py (Machado et al. 2009). The
# distance curves are read as thin lines with small markers, so they are held to a wider
# margin than the palette's own (ΔE 20 rather than 15): the pairs issue 23 found merging
# under deuteranopia (vermillion/orange 18.3, bluish green/reddish purple 17.9) fail it.
DISTANCE_MIN_DELTA_E = 20.0


def test_distance_curve_colours_stay_apart_under_simulated_colour_blindness():
    import matplotlib.pyplot as plt
    from test_plot_style import cvd_close_pairs, distinguished_colours

    from attnlib import plot
    from attnlib.plot._base import OKABE_ITO, PALETTE
    from attnlib.plot._fewer_keys import DISTANCE_COLOURS

    assert cvd_close_pairs(DISTANCE_COLOURS, threshold=DISTANCE_MIN_DELTA_E) == []
    d = np.arange(1, 25)
    curves = {f"curve {i}": np.full(24, i / 10) for i in range(len(DISTANCE_COLOURS))}
    ax = plot.accuracy_vs_distance(d, curves, window=8)
    shown = distinguished_colours(ax)
    assert len(shown) == len(DISTANCE_COLOURS)
    assert cvd_close_pairs(shown, threshold=DISTANCE_MIN_DELTA_E) == []
    # the check can fail: the palette order the figure used before merges two pairs
    merged = cvd_close_pairs(PALETTE[:5], threshold=DISTANCE_MIN_DELTA_E)
    assert {(a, b) for a, b, kind, _ in merged if kind == "deuteranopia"} == {
        (OKABE_ITO["vermillion"].lower(), OKABE_ITO["orange"].lower()),
        (OKABE_ITO["bluish green"].lower(), OKABE_ITO["reddish purple"].lower()),
    }
    plt.close("all")


def _text_boxes(fig):
    fig.draw_without_rendering()
    r = fig.canvas.get_renderer()
    boxes = []
    for t in fig.findobj(matplotlib.text.Text):
        if t.get_visible() and t.get_text().strip():
            # the text's own box (an annotation's extent also spans its leader line)
            boxes.append((t.get_text(), matplotlib.text.Text.get_window_extent(t, r)))
    return boxes


def _overlaps(boxes):
    return [
        (a, b)
        for (a, ba), (b, bb) in itertools.combinations(boxes, 2)
        if ba.x0 < bb.x1 - 1 and bb.x0 < ba.x1 - 1 and ba.y0 < bb.y1 - 1 and bb.y0 < ba.y1 - 1
    ]


def test_lesson_14_figures_have_no_colliding_labels():
    import matplotlib.pyplot as plt

    from attnlib import plot
    from attnlib.tasks import recall

    res = recall.results()
    points = {res.labels[n]: (res.cache_bytes_per_token[n], res.accuracy[n]) for n in res.names}
    ax = plot.tradeoff_scatter(points, chance=res.chance, title="t", xlabel="x")
    boxes = _text_boxes(ax.figure)
    assert _overlaps(boxes) == []
    # no label covers another variant's marker, and no leader line crosses a label
    centres = {tuple(np.round(ax.transData.transform(xy), 3)) for xy in points.values()}
    r = ax.figure.canvas.get_renderer()
    for t in ax.texts:
        box = matplotlib.text.Text.get_window_extent(t, r).padded(4)
        own = tuple(np.round(ax.transData.transform(t.xy), 3)) if hasattr(t, "xy") else None
        assert not any(box.contains(*c) for c in centres if c != own), t.get_text()
        if getattr(t, "arrow_patch", None) is not None:
            path = t.arrow_patch.get_path().transformed(t.arrow_patch.get_transform())
            for other in ax.texts:
                if other is not t:
                    ob = matplotlib.text.Text.get_window_extent(other, r)
                    assert not path.intersects_bbox(ob, filled=False), (
                        t.get_text(),
                        other.get_text(),
                    )
    shown = ["mha", "hybrid", "window", "latent_small"]
    ax = plot.accuracy_vs_distance(
        res.distances, {res.labels[n]: res.by_distance[n] for n in shown},
        window=res.window, reach=res.reach["window"], chance=res.chance, title="t",
    )  # fmt: skip
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == "full MHA = window 8 + 1 global" and len(labels) == 3  # drawn once
    T = 12
    masks = np.tril(np.ones((3, T, T), dtype=bool))
    fig = plot.attention_grid(
        masks / masks.sum(-1, keepdims=True), mask=masks, titles=["a", "b", "c"],
        keys=[str(j) if j % 2 == 0 else "" for j in range(T)],
    )  # fmt: skip
    ticks = [(t, b) for t, b in _text_boxes(fig) if t.isdigit()]
    assert _overlaps(ticks) == []
    plt.close("all")


def test_phase_change_chance_label_is_computed_from_its_value():
    import matplotlib.pyplot as plt

    from attnlib import plot

    steps = np.arange(200)
    curve = np.linspace(4.0, 1.0, 200)
    ax = plot.phase_change(steps, {"a": curve}, chance=math.log(40))
    texts = [t.get_text() for t in ax.texts]
    assert "chance: log 40 = 3.69" in texts and not any("log 50" in t for t in texts)
    ax = plot.phase_change(steps, {"a": curve}, chance=2.5)
    assert "chance: 2.50" in [t.get_text() for t in ax.texts]
    plt.close("all")


def test_lesson_13_figures_keep_their_colours_apart_under_simulated_colour_blindness():
    import matplotlib.pyplot as plt
    from test_plot_style import cvd_close_pairs

    from attnlib import plot
    from attnlib.tasks import induction as ind

    log = ind.read_log()
    ax = plot.phase_change(
        log["step"],
        {"repeated half": log["repeated"], "first half": log["first"],
         "control, repeated half": log["control_repeated"]},
        chance=ind.CHANCE,
    )  # fmt: skip
    curves = [line.get_color() for line in ax.get_lines() if line.get_label()[:1] != "_"]
    assert len(curves) == 3 and cvd_close_pairs(curves) == []
    ablation = {"intact": 1.0, "keys": 0.04, "queries": 1.0, "values": 1.0, "all": 0.04}
    ax = plot.ablation_bars(ablation, chance=0.02)
    bars = [p.get_facecolor() for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
    assert cvd_close_pairs(bars) == []
    plt.close("all")
