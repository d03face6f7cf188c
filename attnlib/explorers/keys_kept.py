"""The keys-kept explorer (lesson 14): window size, k and latent size in; which keys one
query can still reach, and what each scheme keeps in its cache, out.

:func:`keys_kept_state` is the pure part — the controls in, a :class:`KeysKeptState` out:
for one query of a causal sequence and each scheme (full attention, a sliding window of W
keys, top-k selection by an indexer, a latent cache, K/V shared by pairs of layers), the
keys the query can reach, its weights over them (the same raw scores for every scheme, so
that only the reach differs), and the cache bytes the scheme holds at that point, from
:func:`attnlib.kv_cache.kv_cache_bytes`. :func:`keys_kept_explorer` wires sliders to it
(:mod:`attnlib.explorers._render`): live in JupyterLab, a captioned still in a stored
notebook, the slides and the handouts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnlib._validate import check_int
from attnlib.core import softmax
from attnlib.explorers._render import explorer_box, figure_png
from attnlib.kv_cache import kv_cache_bytes
from attnlib.masks import causal_mask
from attnlib.selection import topk_mask
from attnlib.windows import sliding_window_mask

__all__ = ["LATENT_CHOICES", "MODEL", "KeysKeptState", "keys_kept_explorer", "keys_kept_state"]

# The model whose cache is counted: 8 layers of 8 heads of 64 dimensions, bfloat16 cache.
# Latent attention caches d_latent + d_rope numbers per token and layer; top-k selection
# keeps every key and adds the indexer's key (d_index numbers); sharing halves the layers
# that store K/V.
MODEL = {
    "n_layers": 8,
    "n_heads": 8,
    "d_head": 64,
    "d_rope": 32,
    "d_index": 32,
    "dtype": torch.bfloat16,
}
LATENT_CHOICES = (32, 64, 128, 256, 512)


@dataclass(frozen=True)
class KeysKeptState:
    """What the keys-kept explorer shows.

    Attributes
    ----------
    query : int — the query's position; it sees keys 0 .. query when nothing is dropped.
    window, k, d_latent : int — the controls.
    schemes : tuple of str — one row each: "full", "window W", "top-k", "latent", "shared".
    reach : bool ndarray of shape (n_schemes, query + 1) — the keys the query can reach.
    weights : ndarray of shape (n_schemes, query + 1) — softmax of the same raw scores over
        each scheme's reach (0 where it cannot reach).
    cache_bytes : tuple of int — the cache each scheme holds after query + 1 tokens
        (batch 1, all layers of :data:`MODEL`).
    """

    query: int
    window: int
    k: int
    d_latent: int
    schemes: tuple
    reach: np.ndarray
    weights: np.ndarray
    cache_bytes: tuple

    @property
    def n_reached(self) -> tuple:
        """How many keys each scheme lets the query reach."""
        return tuple(int(n) for n in self.reach.sum(axis=1))

    def summary(self) -> str:
        parts = ", ".join(
            f"{name}: {n} keys, {b / 1024:.0f} KiB"
            for name, n, b in zip(self.schemes, self.n_reached, self.cache_bytes, strict=True)
        )
        return f"query {self.query} — {parts}"


def keys_kept_state(
    window: int, k: int, d_latent: int, *, query: int = 15, seed: int = 0
) -> KeysKeptState:
    """Which keys query ``query`` can reach under each scheme, and each scheme's cache.

    Parameters
    ----------
    window : int >= 1 — keys a sliding-window layer sees (itself and window - 1 before it).
    k : int >= 1 — keys top-k selection keeps, chosen by indexer scores (here the raw
        scores plus noise: a cheap, imperfect estimate of them).
    d_latent : int >= 1 — numbers cached per token and layer by latent attention (plus
        ``MODEL["d_rope"]`` for the rotary key).
    query : int >= 1 — the query position; with nothing dropped it sees keys 0 .. query.
    seed : int — seeds the scores and the indexer's noise.
    """
    fn = "keys_kept_state"
    window = check_int(fn, "window", window, minimum=1)
    k = check_int(fn, "k", k, minimum=1)
    d_latent = check_int(fn, "d_latent", d_latent, minimum=1)
    query = check_int(fn, "query", query, minimum=1)
    seq = query + 1
    rng = np.random.default_rng(seed)
    scores = 1.5 * rng.standard_normal(seq)  # (seq,): the query's raw scores over keys 0..query
    index = scores + 0.5 * rng.standard_normal(seq)  # the indexer's noisy estimate
    causal = causal_mask(1, seq, align="bottom_right")[0]  # (seq,): all True for the last query
    windowed = sliding_window_mask(1, seq, window=window, align="bottom_right")[0]
    selected = topk_mask(torch.as_tensor(index)[None], k, mask=torch.as_tensor(causal)[None])
    reach = np.stack([causal, windowed, selected[0].numpy(), causal, causal])  # (5, seq)
    weights = softmax(np.broadcast_to(scores, reach.shape), mask=reach)  # (5, seq)
    m = MODEL
    common = {"batch": 1, "seq": seq, "n_layers": m["n_layers"], "dtype": m["dtype"]}
    heads = {"n_kv_heads": m["n_heads"], "d_k": m["d_head"]}
    cache = (
        kv_cache_bytes(**common, **heads),
        kv_cache_bytes(**common, **heads, window=window),
        kv_cache_bytes(**common, **heads, d_index=m["d_index"]),
        kv_cache_bytes(**common, d_latent=d_latent, d_rope=m["d_rope"]),
        kv_cache_bytes(**common, **heads, n_kv_layers=m["n_layers"] // 2),
    )
    names = ("full", f"window {window}", f"top-{k}", f"latent {d_latent}", "shared")
    return KeysKeptState(
        query=query,
        window=window,
        k=k,
        d_latent=d_latent,
        schemes=names,
        reach=reach,
        weights=weights,
        cache_bytes=tuple(int(b) for b in cache),
    )


def render_keys_kept(state: KeysKeptState) -> bytes:
    """The explorer's figure for ``state`` as PNG bytes."""
    from attnlib.plot import keys_kept_view

    def draw(fig):
        keys_kept_view(state, axes=fig.subplots(1, 2, width_ratios=(2.2, 1.0)))

    return figure_png(draw, (8.0, 3.5))


def keys_kept_explorer(
    window: int = 4, k: int = 4, d_latent: int = 64, *, query: int = 15, seed: int = 0
):
    """Move the window, k, the latent size and the query; see what each scheme keeps.

    Returns
    -------
    ipywidgets.VBox
        Attributes ``window_slider``, ``k_slider``, ``latent_dropdown``, ``query_slider``,
        ``readout``, ``image``, ``state``; displayed, the live widget and a captioned still
        (:mod:`attnlib.explorers._render`).
    """
    import ipywidgets as W

    first = keys_kept_state(window, k, d_latent, query=query, seed=seed)  # validates
    top = max(24, first.query)
    win_s = W.IntSlider(value=window, min=1, max=top, description="window W")
    k_s = W.IntSlider(value=k, min=1, max=top, description="k")
    choices = sorted({*LATENT_CHOICES, first.d_latent})
    lat_d = W.Dropdown(options=choices, value=first.d_latent, description="d_latent")
    q_s = W.IntSlider(value=first.query, min=1, max=top, description="query")
    for s in (win_s, k_s, q_s):
        s.continuous_update = False
    return explorer_box(
        [(win_s, k_s), (lat_d, q_s)],
        {"window_slider": win_s, "k_slider": k_s, "latent_dropdown": lat_d, "query_slider": q_s},
        lambda: keys_kept_state(win_s.value, k_s.value, lat_d.value, query=q_s.value, seed=seed),
        render_keys_kept,
    )
