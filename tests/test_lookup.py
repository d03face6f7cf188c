"""attnlib.tasks.lookup: the generated lookup task of lesson 05 and its one-head model (and the
figures of lessons 05-06 in attnlib.plot._learning).

Oracles: a plain Python loop for the encoding, torch's scaled_dot_product_attention for
the model's forward pass, numpy's SVD for the projection, and the exact additive
decomposition of a full name × number grid for the variance share.
"""

from __future__ import annotations

import copy
import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib import plot
from attnlib.tasks import lookup as L


def _loop_encoding(names, numbers, query_pos, n_names, n_numbers):
    batch, seq_k = names.shape
    d = n_names + n_numbers
    tokens = np.zeros((batch, seq_k, d))
    query = np.zeros((batch, 1, d))
    target = np.zeros(batch, dtype=np.int64)
    for b in range(batch):
        for j in range(seq_k):
            tokens[b, j, names[b, j]] = 1.0
            tokens[b, j, n_names + numbers[b, j]] = 1.0
        query[b, 0, names[b, query_pos[b]]] = 1.0
        target[b] = numbers[b, query_pos[b]]
    return tokens, query, target


def test_lookup_batch_matches_a_loop():
    rng = np.random.default_rng(0)
    names = np.argsort(rng.random((5, 9)), axis=-1)[:, :4]
    numbers = rng.integers(0, 3, (5, 4))
    query_pos = rng.integers(0, 4, 5)
    got = L.lookup_batch(names, numbers, query_pos, 9, 3)
    want = _loop_encoding(names, numbers, query_pos, 9, 3)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    assert got[2].dtype == np.int64


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((np.zeros((2, 3), int), np.zeros((2, 4), int), np.zeros(2, int), 4, 4), "same shape"),
        ((np.zeros((2, 3), int), np.zeros((2, 3), int), np.zeros(3, int), 4, 4), r"query_pos"),
        ((np.full((2, 3), 4), np.zeros((2, 3), int), np.zeros(2, int), 4, 4), "names must lie"),
        ((np.zeros((2, 3), int), np.full((2, 3), 5), np.zeros(2, int), 4, 5), "numbers must"),
        ((np.zeros((2, 3), int), np.zeros((2, 3), int), np.full(2, 3), 4, 4), "query_pos must"),
        ((np.zeros((2, 3)), np.zeros((2, 3), int), np.zeros(2, int), 4, 4), "integers"),
        ((np.zeros(3, int), np.zeros(3, int), np.zeros(1, int), 4, 4), "2 dims"),
    ],
)
def test_lookup_batch_rejects_bad_input(args, match):
    with pytest.raises((ValueError, TypeError), match=match):
        L.lookup_batch(*args)


def test_sample_lookup_is_deterministic_and_correct():
    kw = {"seq_k": 6, "n_names": 16, "n_numbers": 8}
    a = L.sample_lookup(64, generator=np.random.default_rng(3), **kw)
    b = L.sample_lookup(64, generator=np.random.default_rng(3), **kw)
    c = L.sample_lookup(64, generator=np.random.default_rng(4), **kw)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
    assert not torch.equal(a.names, c.names)
    assert a.tokens.shape == (64, 6, 24) and a.tokens.dtype == torch.float32
    assert a.query.shape == (64, 1, 24)
    assert a.target.shape == (64,) and a.target.dtype == torch.int64
    # names are distinct within each sequence, and everything is in range
    assert all(len(set(row.tolist())) == 6 for row in a.names)
    assert int(a.names.max()) < 16 and int(a.numbers.max()) < 8
    rows = torch.arange(64)
    assert torch.equal(a.target, a.numbers[rows, a.query_pos])
    # the query's name block points at exactly one token: the asked one
    match = (a.tokens[..., :16] * a.query[..., :16]).sum(-1)  # (batch, seq_k)
    assert torch.equal(match.argmax(-1), a.query_pos)
    assert torch.equal(match.sum(-1), torch.ones(64))
    assert float(a.query[..., 16:].abs().sum()) == 0.0  # the answer is not in the question


def test_sample_lookup_needs_enough_names():
    with pytest.raises(ValueError, match="seq_k=6"):
        L.sample_lookup(2, seq_k=6, n_names=5, n_numbers=3, generator=np.random.default_rng(0))


def test_tied_shares_one_parameter_and_separate_does_not():
    tied = L.make_lookup("tied", d_head=3, n_names=5, n_numbers=4, seed=0)
    sep = L.make_lookup("separate", d_head=3, n_names=5, n_numbers=4, seed=0)
    assert tied.W_k.weight is tied.W_v.weight
    assert sep.W_k.weight is not sep.W_v.weight
    n_tied = sum(p.numel() for p in tied.parameters())
    n_sep = sum(p.numel() for p in sep.parameters())
    assert n_sep - n_tied == 3 * 9  # exactly one (d_head, d_model) matrix fewer
    # an update through the keys changes the values too
    x = torch.eye(9)[None, :5]  # (1, 5, 9)
    k, v = tied.keys_values(x)
    assert torch.equal(k, v)
    k.sum().backward()
    assert tied.W_v.weight.grad is not None and float(tied.W_v.weight.grad.abs().sum()) > 0


def test_uniform_control_has_uniform_weights_and_no_keys():
    m = L.make_lookup("uniform", d_head=3, n_names=8, n_numbers=4, seed=1)
    assert m.W_k is None
    b = L.sample_lookup(5, seq_k=6, n_names=8, n_numbers=4, generator=np.random.default_rng(0))
    logits, w = m(b.query, b.tokens)
    assert logits.shape == (5, 4)
    torch.testing.assert_close(w, torch.full((5, 1, 6), 1 / 6))


@pytest.mark.parametrize("mode", ["separate", "tied"])
def test_forward_matches_sdpa(mode):
    m = L.make_lookup(mode, d_head=4, n_names=8, n_numbers=5, seed=2)
    b = L.sample_lookup(7, seq_k=5, n_names=8, n_numbers=5, generator=np.random.default_rng(1))
    logits, w = m(b.query, b.tokens)
    q = b.query @ m.W_q.weight.T
    k = b.tokens @ m.W_k.weight.T
    v = b.tokens @ m.W_v.weight.T
    out = F.scaled_dot_product_attention(q, k, v)  # (batch, 1, d_head)
    want = out[:, 0] @ m.W_o.weight.T + m.W_o.bias
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-6)
    s = q @ k.transpose(-1, -2) / math.sqrt(4)
    torch.testing.assert_close(w, torch.softmax(s, -1), rtol=1e-5, atol=1e-6)


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        L.LookupAttention(6, 2, 3, mode="shared")


def test_fit_is_reproducible_and_restores_threads(three_threads):
    threads = torch.get_num_threads()
    assert threads == three_threads
    kw = {"steps": 8, "batch": 16, "seq_k": 4, "n_names": 6, "n_numbers": 3, "seed": 5}
    h = []
    for _ in range(2):
        m = L.make_lookup("separate", d_head=2, n_names=6, n_numbers=3, seed=0)
        h.append(L.fit_lookup(m, progress=False, **kw))
    np.testing.assert_array_equal(h[0]["loss"], h[1]["loss"])
    assert len(h[0]["accuracy"]) == 8
    assert torch.get_num_threads() == threads


def test_fit_records_probe_values():
    m = L.make_lookup("separate", d_head=2, n_names=6, n_numbers=3, seed=0)
    calls = []

    def probe(model):
        calls.append(torch.is_grad_enabled())
        return {"norm_k": float(model.W_k.weight.norm())}

    h = L.fit_lookup(m, steps=3, batch=8, seq_k=4, n_names=6, n_numbers=3, seed=0, probe=probe,
                     progress=False)  # fmt: skip
    assert len(h["norm_k"]) == 3 and calls == [False, False, False]
    assert h["norm_k"][0] != h["norm_k"][-1]  # the keys moved


def test_all_tokens_covers_the_grid_once():
    x, names, numbers = L.all_tokens(4, 3)
    assert x.shape == (12, 7)
    pairs = {(int(a), int(b)) for a, b in zip(names, numbers, strict=True)}
    assert pairs == {(a, b) for a in range(4) for b in range(3)}
    assert torch.equal(x[:, :4].argmax(-1), torch.as_tensor(names))
    assert torch.equal(x[:, 4:].argmax(-1), torch.as_tensor(numbers))


def test_variance_explained_on_an_additive_grid():
    # vectors = a[name] + b[number] on a full grid: the shares are exact
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 3)) * 3, rng.standard_normal((4, 3))
    names, numbers = np.meshgrid(np.arange(5), np.arange(4), indexing="ij")
    names, numbers = names.ravel(), numbers.ravel()
    x = a[names] + b[numbers]
    va = ((a - a.mean(0)) ** 2).sum() / 5
    vb = ((b - b.mean(0)) ** 2).sum() / 4
    assert L.variance_explained(x, names) == pytest.approx(va / (va + vb), rel=1e-12)
    assert L.variance_explained(x, numbers) == pytest.approx(vb / (va + vb), rel=1e-12)
    assert L.variance_explained(torch.as_tensor(x), names) == pytest.approx(va / (va + vb))


def test_variance_explained_edges_and_errors():
    x = np.array([[0.0, 1.0], [0.0, 1.0], [2.0, 0.0], [2.0, 0.0]])
    assert L.variance_explained(x, [0, 0, 1, 1]) == pytest.approx(1.0)
    assert L.variance_explained(x, [0, 1, 0, 1]) == pytest.approx(0.0)
    assert L.variance_explained(np.ones((3, 2)), [0, 1, 2]) == 0.0
    with pytest.raises(ValueError, match="labels"):
        L.variance_explained(x, [0, 1])


def test_pca_2d_matches_numpy_svd_up_to_sign():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((30, 5)) @ np.diag([5.0, 3.0, 1.0, 0.5, 0.1])
    p = L.pca_2d(torch.as_tensor(x)).numpy()
    c = x - x.mean(0)
    _, _, vt = np.linalg.svd(c, full_matrices=False)
    want = c @ vt[:2].T
    for i in range(2):
        sign = np.sign(p[:, i] @ want[:, i])
        np.testing.assert_allclose(p[:, i], sign * want[:, i], atol=1e-10)
    # sign convention: the largest-magnitude coordinate of each axis is positive
    assert all(p[np.abs(p[:, i]).argmax(), i] > 0 for i in range(2))


# ---- the figures of lessons 05 and 06 (attnlib.plot._learning) ---------------------------------


def test_learning_curves_draw_the_smoothed_data():
    y = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    ax = plot.learning_curves({"a": y, "b": 1 - y}, smooth=2, chance=0.5)
    lines = ax.get_lines()
    raw, smooth = lines[0].get_ydata(), lines[1].get_ydata()
    np.testing.assert_array_equal(raw, y)
    np.testing.assert_allclose(smooth, [0.0, 0.5, 0.5, 0.5, 1.0, 1.0])  # trailing mean of 2
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b", "chance"]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="1-D"):
        plot.learning_curves({"a": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="empty"):
        plot.learning_curves({})


def test_feature_spaces_has_one_panel_per_space_and_feature():
    rng = np.random.default_rng(0)
    pts = {"keys": rng.standard_normal((12, 2)), "values": rng.standard_normal((12, 2))}
    labels = {"name": np.arange(12) % 4, "number": np.arange(12) % 3}
    fig = plot.feature_spaces(pts, labels, scores={("keys", "name"): 0.987})
    axes = fig.get_axes()
    assert len(axes) == 4
    assert "name explains 98.7% of the variance" in axes[0].get_title()
    np.testing.assert_array_equal(axes[3].collections[0].get_offsets(), pts["values"])
    plt.close(fig)
    with pytest.raises(ValueError, match=r"labels\['name'\]"):
        plot.feature_spaces(pts, {"name": np.arange(5)})
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        plot.feature_spaces({"keys": np.zeros((4, 3))}, {"name": np.arange(4)})


def test_grad_norm_and_entropy_curves():
    ax = plot.grad_norm_curves({"W_K": [1e-3, 1e-2, 1e-1]})
    assert ax.get_yscale() == "log"
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [1e-3, 1e-2, 1e-1])
    plt.close(ax.figure)
    ax = plot.entropy_curve([1.7, 1.0, 0.2], seq_k=6)
    ys = [line.get_ydata()[0] for line in ax.get_lines()]
    assert ys[1] == pytest.approx(math.log(6))  # the uniform line
    plt.close(ax.figure)


# ---- many heads at once, and the basis-free views (lesson 05's width sweep and section 6) ----


def _fit_kwargs():
    return {"batch": 32, "seq_k": 4, "n_names": 6, "n_numbers": 3, "seed": 3, "lr": 0.05}


def test_fit_lookups_trains_each_head_as_if_alone():
    """Side by side (mixed modes and widths) = one fit_lookup per head, step for step."""
    specs = [("separate", 3), ("tied", 2), ("uniform", 4), ("tied", 5)]
    alone, together = [], []
    for mode, d in specs:
        m = L.make_lookup(mode, d_head=d, n_names=6, n_numbers=3, seed=1)
        alone.append((m, L.fit_lookup(m, steps=40, progress=False, **_fit_kwargs())["accuracy"]))
        together.append(L.make_lookup(mode, d_head=d, n_names=6, n_numbers=3, seed=1))
    curves = L.fit_lookups(together, steps=40, progress=False, **_fit_kwargs())
    assert curves.shape == (len(specs), 40)
    batch = L.sample_lookup(64, seq_k=4, n_names=6, n_numbers=3, generator=np.random.default_rng(0))
    for (m_alone, acc_alone), m_together, acc_together in zip(alone, together, curves, strict=True):
        np.testing.assert_allclose(acc_together, acc_alone, atol=1 / 32 + 1e-12)
        for p, q in zip(m_alone.parameters(), m_together.parameters(), strict=True):
            torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)  # weights copied back
        with torch.no_grad():
            torch.testing.assert_close(
                m_together(batch.query, batch.tokens)[0],
                m_alone(batch.query, batch.tokens)[0],
                rtol=1e-3,
                atol=1e-4,
            )
    assert together[1].W_k is together[1].W_v  # a tied head stays tied


def test_fit_lookups_refuses_bad_input():
    with pytest.raises(ValueError, match="empty"):
        L.fit_lookups([], steps=1, **_fit_kwargs())
    with pytest.raises(TypeError, match=r"models\[0\]"):
        L.fit_lookups([torch.nn.Linear(2, 2)], steps=1, **_fit_kwargs())
    a = L.make_lookup("tied", d_head=2, n_names=6, n_numbers=3, seed=0)
    b = L.make_lookup("tied", d_head=2, n_names=5, n_numbers=3, seed=0)
    with pytest.raises(ValueError, match="same d_model"):
        L.fit_lookups([a, b], steps=1, **_fit_kwargs())


def test_first_step_at():
    acc = np.r_[np.zeros(10), np.ones(10)]
    assert L.first_step_at(acc, 0.95, window=4) == 14  # steps 11-14 are the first 4 at 1.0
    assert L.first_step_at(acc, 0.5, window=4) == 12
    assert L.first_step_at(np.zeros(30), 0.95) is None
    assert L.first_step_at(np.ones(3), 0.95, window=20) is None
    with pytest.raises(ValueError, match="1-D"):
        L.first_step_at(np.zeros((2, 3)))


def test_token_scores_and_readout_ignore_the_choice_of_basis():
    """Keys -> k A with queries -> q A^-T, values -> v B with W_o -> B^-1 W_o: same tables."""
    torch.manual_seed(0)
    m = L.make_lookup("separate", d_head=3, n_names=5, n_numbers=4, seed=2).double()
    scores, readout = L.token_scores(m, 5, 4), L.token_readout(m, 5, 4)
    assert scores.shape == (20, 5) and readout.shape == (20, 4)
    tokens, names, numbers = L.all_tokens(5, 4)
    queries = torch.cat([torch.eye(5), torch.zeros(5, 4)], dim=1).double()
    with torch.no_grad():  # the oracle: the model's own forward pass on one-token books
        for n in range(5):
            q = m.W_q(queries[n])
            k, v = m.keys_values(tokens.double())
            torch.testing.assert_close(scores[:, n], k @ q / math.sqrt(3))
        torch.testing.assert_close(readout, v @ m.W_o.weight.T)
    g = torch.Generator().manual_seed(1)
    A, B = (torch.randn(3, 3, generator=g, dtype=torch.float64) for _ in range(2))
    moved = copy.deepcopy(m)
    with torch.no_grad():
        moved.W_k.weight.copy_(A.T @ m.W_k.weight)
        moved.W_q.weight.copy_(torch.linalg.inv(A) @ m.W_q.weight)
        moved.W_v.weight.copy_(B.T @ m.W_v.weight)
        moved.W_o.weight.copy_(m.W_o.weight @ torch.linalg.inv(B).T)
        assert not torch.allclose(
            moved.keys_values(tokens.double())[0], m.keys_values(tokens.double())[0]
        )
    torch.testing.assert_close(L.token_scores(moved, 5, 4), scores)
    torch.testing.assert_close(L.token_readout(moved, 5, 4), readout)


def test_width_sweep_plots_every_head():
    widths, seeds = {"separate": (1, 3), "tied": (3, 6)}, (0, 1)
    acc = {(m, d, s): 0.1 * d + 0.01 * s for m, ws in widths.items() for d in ws for s in seeds}
    reached = {key: (None if key[1] == 1 else 50 * key[1]) for key in acc}
    fig = plot.width_sweep(acc, reached, widths, seeds, steps=400)
    ax_acc, ax_steps = fig.get_axes()
    np.testing.assert_allclose(ax_acc.get_lines()[0].get_ydata(), [0.105, 0.305])  # seed means
    assert ax_steps.get_ylim() == (0, 400)
    np.testing.assert_array_equal(ax_steps.get_lines()[0].get_ydata(), [150, 150])  # d=1 never
    assert fig.get_size_inches()[0] <= 8
    plt.close(fig)
