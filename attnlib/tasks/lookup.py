"""A generated lookup task, and a one-head attention model with separate or tied K and V.

The task (lesson 05) is a tiny phone book. Each of ``seq_k`` tokens carries two features:
a *name* (one of ``n_names``, all different within a sequence) and a *number* (one of
``n_numbers``). A query names one of the tokens; the answer is that token's number. So
what the query must **match on** (the name) differs from what it must **retrieve** (the
number, carried by the same token).

Encoding (:func:`lookup_batch`): a token is the concatenation
``[one_hot(name, n_names), one_hot(number, n_numbers)]`` (``d_model = n_names +
n_numbers``); the query uses the same layout with the name filled in and the number block
left at zero — it must not contain the answer.

The model (:class:`LookupAttention`) is one attention head of width ``d_head``::

    q = x_query @ W_q        k = tokens @ W_k        v = tokens @ W_v
    logits = attend(q, k, v).out @ W_o                 # (batch, n_numbers)

with three wirings of the keys and values:

* ``"separate"`` — W_k and W_v are two parameters (the transformer's choice);
* ``"tied"`` — one parameter serves as both: ``k = v``;
* ``"uniform"`` — the control: every key is zero, so every weight is ``1/seq_k`` and the
  head returns the average of the values. Whatever accuracy it reaches is what can be
  had *without* selecting a token.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from attnlib._validate import check_choice, check_instance, check_int
from attnlib.core import attend
from attnlib.training import History, torch_threads, train

__all__ = [
    "MODES",
    "LookupBatch",
    "LookupAttention",
    "lookup_batch",
    "sample_lookup",
    "make_lookup",
    "fit_lookup",
    "accuracy",
    "all_tokens",
    "variance_explained",
    "pca_2d",
    "fit_lookups",
    "first_step_at",
    "token_scores",
    "token_readout",
]

MODES = ("separate", "tied", "uniform")


class LookupBatch(NamedTuple):
    """One batch of the lookup task (torch tensors).

    ``tokens`` : float32 (batch, seq_k, d_model); ``query`` : float32 (batch, 1, d_model);
    ``target`` : int64 (batch,); ``names``, ``numbers`` : int64 (batch, seq_k);
    ``query_pos`` : int64 (batch,).
    """

    tokens: torch.Tensor
    query: torch.Tensor
    target: torch.Tensor
    names: torch.Tensor
    numbers: torch.Tensor
    query_pos: torch.Tensor


def _check_int_array(name: str, x, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"lookup_batch: {name} must hold integers, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"lookup_batch: {name} must have {ndim} dims, got shape {a.shape}")
    return a


def lookup_batch(names, numbers, query_pos, n_names: int, n_numbers: int):
    """Encode integer features as the model's inputs (numpy; the reference of exercise 5.1).

    Parameters
    ----------
    names : int array of shape (batch, seq_k)
        The name of each token, in ``0 .. n_names - 1``.
    numbers : int array of shape (batch, seq_k)
        The number each token carries, in ``0 .. n_numbers - 1``.
    query_pos : int array of shape (batch,)
        Which token each query asks for.
    n_names, n_numbers : int
        Vocabulary sizes; ``d_model = n_names + n_numbers``.

    Returns
    -------
    tokens : float64 ndarray of shape (batch, seq_k, d_model)
        ``[one_hot(name), one_hot(number)]`` for each token.
    query : float64 ndarray of shape (batch, 1, d_model)
        ``[one_hot(name of the asked token), zeros(n_numbers)]`` — no answer inside.
    target : int64 ndarray of shape (batch,)
        The number carried by the asked token.
    """
    n_names = check_int("lookup_batch", "n_names", n_names, minimum=1)
    n_numbers = check_int("lookup_batch", "n_numbers", n_numbers, minimum=1)
    names = _check_int_array("names", names, 2)
    numbers = _check_int_array("numbers", numbers, 2)
    query_pos = _check_int_array("query_pos", query_pos, 1)
    if names.shape != numbers.shape:
        raise ValueError(
            f"lookup_batch: names {names.shape} and numbers {numbers.shape} must have the "
            f"same shape (batch, seq_k)"
        )
    batch, seq_k = names.shape
    if query_pos.shape != (batch,):
        raise ValueError(
            f"lookup_batch: query_pos must have shape ({batch},), got {query_pos.shape}"
        )
    for arr, lim, what in ((names, n_names, "names"), (numbers, n_numbers, "numbers")):
        if arr.size and (arr.min() < 0 or arr.max() >= lim):
            raise ValueError(f"lookup_batch: {what} must lie in 0..{lim - 1}")
    if query_pos.size and (query_pos.min() < 0 or query_pos.max() >= seq_k):
        raise ValueError(f"lookup_batch: query_pos must lie in 0..{seq_k - 1}")
    eye_n, eye_m = np.eye(n_names), np.eye(n_numbers)
    tokens = np.concatenate([eye_n[names], eye_m[numbers]], axis=-1)  # (batch, seq_k, d_model)
    rows = np.arange(batch)
    asked = names[rows, query_pos]  # (batch,)
    query = np.concatenate([eye_n[asked], np.zeros((batch, n_numbers))], axis=-1)
    target = numbers[rows, query_pos].astype(np.int64)  # (batch,)
    return tokens, query[:, None, :], target  # query: (batch, 1, d_model)


def sample_lookup(
    batch: int, *, seq_k: int, n_names: int, n_numbers: int, generator: np.random.Generator
) -> LookupBatch:
    """Draw a batch of the task: names distinct within a sequence, numbers with repeats."""
    fn = "sample_lookup"
    batch = check_int(fn, "batch", batch, minimum=1)
    seq_k = check_int(fn, "seq_k", seq_k, minimum=1)
    n_names = check_int(fn, "n_names", n_names, minimum=1)
    n_numbers = check_int(fn, "n_numbers", n_numbers, minimum=1)
    check_instance(fn, "generator", generator, np.random.Generator, "a numpy.random.Generator")
    if seq_k > n_names:
        raise ValueError(
            f"sample_lookup: seq_k={seq_k} needs at least as many names, got {n_names}"
        )
    g = generator
    names = np.argsort(g.random((batch, n_names)), axis=-1)[:, :seq_k]  # distinct names
    numbers = g.integers(0, n_numbers, size=(batch, seq_k))
    query_pos = g.integers(0, seq_k, size=batch)
    tokens, query, target = lookup_batch(names, numbers, query_pos, n_names, n_numbers)
    f32 = torch.float32
    return LookupBatch(
        torch.from_numpy(tokens).to(f32),
        torch.from_numpy(query).to(f32),
        torch.from_numpy(target),
        torch.from_numpy(names),
        torch.from_numpy(numbers),
        torch.from_numpy(query_pos),
    )


class LookupAttention(nn.Module):
    """One attention head with separate, tied, or no (uniform) keys, and a linear readout.

    Parameters
    ----------
    d_model : int
        Width of the inputs (``n_names + n_numbers``).
    d_head : int
        Width of q, k and v (d_k = d_v = d_head).
    n_out : int
        Number of classes (``n_numbers``).
    mode : {"separate", "tied", "uniform"}
        ``"tied"`` makes ``W_v`` the very same module as ``W_k``; ``"uniform"`` has no
        ``W_k`` (keys are zero, all weights 1/seq_k).
    """

    def __init__(self, d_model: int, d_head: int, n_out: int, mode: str = "separate"):
        super().__init__()
        fn = "LookupAttention"
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        d_head = check_int(fn, "d_head", d_head, minimum=1)
        n_out = check_int(fn, "n_out", n_out, minimum=1)
        check_choice(fn, "mode", mode, MODES)
        self.mode = mode
        self.d_head = d_head
        self.W_q = nn.Linear(d_model, d_head, bias=False)
        self.W_v = nn.Linear(d_model, d_head, bias=False)
        if mode == "separate":
            self.W_k = nn.Linear(d_model, d_head, bias=False)
        elif mode == "tied":
            self.W_k = self.W_v  # one parameter, two roles: k = v
        else:
            self.W_k = None
        self.W_o = nn.Linear(d_head, n_out)

    def keys_values(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v of shape (..., seq_k, d_head) for tokens of shape (..., seq_k, d_model)."""
        v = self.W_v(tokens)  # (batch, seq_k, d_head)
        k = torch.zeros_like(v) if self.W_k is None else self.W_k(tokens)
        return k, v

    def forward(self, query: torch.Tensor, tokens: torch.Tensor):
        """Logits (batch, n_out) and weights (batch, 1, seq_k).

        query : Tensor of shape (batch, 1, d_model); tokens : (batch, seq_k, d_model).
        """
        q = self.W_q(query)  # (batch, 1, d_head)
        k, v = self.keys_values(tokens)  # (batch, seq_k, d_head)
        out, weights = attend(q, k, v)  # (batch, 1, d_head), (batch, 1, seq_k)
        return self.W_o(out[:, 0]), weights  # (batch, n_out)


def make_lookup(mode: str, *, d_head: int, n_names: int, n_numbers: int, seed: int):
    """A freshly initialised :class:`LookupAttention`, seeded."""
    torch.manual_seed(seed)
    return LookupAttention(n_names + n_numbers, d_head, n_numbers, mode)


def accuracy(model: LookupAttention, batch: LookupBatch) -> float:
    """Fraction of queries whose arg-max logit is the asked token's number."""
    with torch.no_grad(), torch_threads(1):  # one thread: the same low bits, the same arg-max
        logits, _ = model(batch.query, batch.tokens)
    return float((logits.argmax(-1) == batch.target).double().mean())


def fit_lookup(
    model: LookupAttention,
    *,
    steps: int,
    batch: int,
    seq_k: int,
    n_names: int,
    n_numbers: int,
    seed: int,
    lr: float = 0.03,
    track: dict | None = None,
    progress: bool = True,
    desc: str | None = None,
    probe=None,
) -> History:
    """Train on fresh batches (cross-entropy, Adam); records ``loss`` and ``accuracy``.

    Every step draws a new batch, so the accuracy recorded at a step is measured on
    examples the model has not seen before. ``probe(model) -> dict`` (optional) is called
    before each update; its numbers are recorded under their own names (e.g. the entropy
    of a fixed example's attention). ``track`` records gradient norms (see
    :func:`attnlib.training.train`, which runs the loop on one thread and shows the
    progress bar, labelled ``desc`` or the model's mode).
    """
    steps = check_int("fit_lookup", "steps", steps, minimum=1)
    g = np.random.default_rng(seed)
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        b = sample_lookup(batch, seq_k=seq_k, n_names=n_names, n_numbers=n_numbers, generator=g)
        logits, _ = model(b.query, b.tokens)
        acc = (logits.argmax(-1) == b.target).float().mean()
        extras = {"accuracy": float(acc)}
        if probe is not None:
            with torch.no_grad():
                extras.update(probe(model))
        return loss_fn(logits, b.target), extras

    return train(
        model.parameters(),
        step,
        steps=steps,
        lr=lr,
        track=track,
        desc=desc or model.mode,
        progress=progress,
        threads=1,
    )


def all_tokens(n_names: int, n_numbers: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Every possible token once: (n_names·n_numbers, d_model), with its name and number."""
    names, numbers = np.meshgrid(np.arange(n_names), np.arange(n_numbers), indexing="ij")
    names, numbers = names.ravel(), numbers.ravel()
    tokens, _, _ = lookup_batch(names[None], numbers[None], np.zeros(1, dtype=np.int64),
                                n_names, n_numbers)  # fmt: skip
    return torch.from_numpy(tokens[0]).float(), names, numbers


def variance_explained(vectors, labels) -> float:
    """Share of the total variance explained by the group means (between / total).

    Parameters
    ----------
    vectors : array-like of shape (n, d)
    labels : int array-like of shape (n,)

    Returns
    -------
    float in [0, 1]
        1 when every group is a single point, 0 when all groups have the same mean.
    """
    x = vectors.detach().double().numpy() if isinstance(vectors, torch.Tensor) else vectors
    x = np.asarray(x, dtype=np.float64)
    labels = np.asarray(labels)
    if x.ndim != 2 or labels.shape != (x.shape[0],):
        raise ValueError(
            f"variance_explained: vectors must be (n, d) and labels (n,), got {x.shape} and "
            f"{labels.shape}"
        )
    centred = x - x.mean(axis=0)
    total = float((centred**2).sum())
    between = 0.0
    for lab in np.unique(labels):
        rows = centred[labels == lab]
        between += len(rows) * float((rows.mean(axis=0) ** 2).sum())
    return between / total if total > 0 else 0.0


def pca_2d(vectors: torch.Tensor) -> torch.Tensor:
    """Project (n, d) vectors on their two main directions (PCA by ``torch.linalg.svd``).

    Returns a (n, 2) tensor; the sign of each axis is fixed so that the largest-magnitude
    coordinate is positive (the picture does not flip between runs).
    """
    x = vectors.detach().double()
    x = x - x.mean(dim=0)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    p = x @ vh[:2].T  # (n, 2)
    idx = p.abs().argmax(dim=0)
    signs = torch.sign(p[idx, torch.arange(p.shape[1])])
    return p * torch.where(signs == 0, 1.0, signs)


# ----------------------------------------------------------------------------------------
# Many heads at once (lesson 05's width sweep), and views of a head that do not depend on
# how its keys and values are parametrised.
# ----------------------------------------------------------------------------------------


def fit_lookups(
    models,
    *,
    steps: int,
    batch: int,
    seq_k: int,
    n_names: int,
    n_numbers: int,
    seed: int,
    lr: float = 0.03,
    progress: bool = True,
    desc: str = "heads",
) -> np.ndarray:
    """Train several :class:`LookupAttention` heads side by side; each as if trained alone.

    The heads (any modes and widths) are laid side by side as one wide layer, the way
    multi-head attention lays out its heads: head ``m`` owns ``d_head`` columns of the
    stacked ``W_q``, ``W_k``, ``W_v``, its scores are summed over its own columns only
    (scaled by its own ``1/sqrt(d_head)``), and its read-out sees only its own columns (a
    block-diagonal ``W_o``). The summed loss gives every head the gradient of its own loss,
    and Adam works entry by entry, so each head follows the path :func:`fit_lookup` with the
    same ``seed`` gives it (up to float rounding) — in one training loop instead of one per
    head. The trained weights are copied back into ``models``.

    Parameters
    ----------
    models : sequence of LookupAttention
        All with the same ``d_model`` and number of outputs.
    steps, batch, seq_k, n_names, n_numbers, seed, lr
        As for :func:`fit_lookup`; every head sees the same batches.

    Returns
    -------
    ndarray of shape (len(models), steps)
        Each head's accuracy on each step's fresh batch.
    """
    fn = "fit_lookups"
    models = list(models)
    if not models:
        raise ValueError(f"{fn}: models is empty")
    for i, m in enumerate(models):
        check_instance(fn, f"models[{i}]", m, LookupAttention, "a LookupAttention")
    steps = check_int(fn, "steps", steps, minimum=1)
    d_model, n_out = models[0].W_q.in_features, models[0].W_o.out_features
    if any(m.W_q.in_features != d_model or m.W_o.out_features != n_out for m in models):
        raise ValueError(f"{fn}: every model must have the same d_model and n_out")
    n = len(models)
    cols = []  # the columns of head m: slice(start, start + d_head)
    for m in models:
        start = cols[-1].stop if cols else 0
        cols.append(slice(start, start + m.d_head))
    width = cols[-1].stop
    owner = torch.zeros(width, n)  # owner[j, m] = 1 if column j belongs to head m
    W_o_mask = torch.zeros(width, n * n_out)  # block diagonal: head m's read-out
    kind = torch.zeros(2, width)  # row 0: columns whose keys are their own (separate), 1: k = v
    W = {name: torch.zeros(d_model, width) for name in ("q", "k", "v")}
    W_o, b_o = torch.zeros(width, n * n_out), torch.zeros(n * n_out)
    with torch.no_grad():
        for i, (m, c) in enumerate(zip(models, cols, strict=True)):
            out = slice(i * n_out, (i + 1) * n_out)
            owner[c, i] = 1.0
            W_o_mask[c, out] = 1.0
            W["q"][:, c], W["v"][:, c] = m.W_q.weight.T, m.W_v.weight.T
            if m.mode == "separate":
                W["k"][:, c] = m.W_k.weight.T
                kind[0, c] = 1.0
            elif m.mode == "tied":
                kind[1, c] = 1.0
            W_o[c, out], b_o[out] = m.W_o.weight.T, m.W_o.bias
    W_q, W_k, W_v, W_o, b_o = (nn.Parameter(t) for t in (W["q"], W["k"], W["v"], W_o, b_o))
    scale = torch.tensor([m.d_head**-0.5 for m in models])  # (n,)
    g = np.random.default_rng(seed)
    loss_fn = nn.CrossEntropyLoss(reduction="none")

    def step(i):
        b = sample_lookup(batch, seq_k=seq_k, n_names=n_names, n_numbers=n_numbers, generator=g)
        q = b.query[:, 0] @ W_q  # (batch, width): every head's query side by side
        v = b.tokens @ W_v  # (batch, seq_k, width)
        k = kind[0] * (b.tokens @ W_k) + kind[1] * v  # uniform heads: k = 0
        s = (q[:, None, :] * k) @ owner * scale  # (batch, seq_k, n): one score per head
        weights = torch.softmax(s, dim=1)  # over the keys, per head
        out = ((weights @ owner.T) * v).sum(dim=1)  # (batch, width)
        logits = (out @ (W_o * W_o_mask) + b_o).view(batch, n, n_out)  # (batch, n, n_out)
        target = b.target[:, None].expand(batch, n)
        loss = loss_fn(logits.transpose(1, 2), target).mean(dim=0).sum()  # sum of n means
        acc = (logits.argmax(-1) == target).double().mean(dim=0)  # (n,)
        return loss, {f"accuracy/{j}": a for j, a in enumerate(acc.tolist())}

    params = [W_q, W_k, W_v, W_o, b_o]
    history = train(params, step, steps=steps, lr=lr, desc=desc, progress=progress, threads=1)
    with torch.no_grad():
        for i, (m, c) in enumerate(zip(models, cols, strict=True)):
            out = slice(i * n_out, (i + 1) * n_out)
            m.W_q.weight.copy_(W_q[:, c].T)
            m.W_v.weight.copy_(W_v[:, c].T)  # a tied head's W_k is this same module
            if m.mode == "separate":
                m.W_k.weight.copy_(W_k[:, c].T)
            m.W_o.weight.copy_(W_o[c, out].T)
            m.W_o.bias.copy_(b_o[out])
    return np.stack([history[f"accuracy/{j}"] for j in range(n)])


def first_step_at(accuracy, level: float = 0.95, window: int = 20) -> int | None:
    """First training step (1-based) at which the mean accuracy of the last ``window`` steps
    reaches ``level``; None if it never does."""
    a = np.asarray(accuracy, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"first_step_at: accuracy must be 1-D, got shape {a.shape}")
    if len(a) < window:
        return None
    means = np.convolve(a, np.ones(window) / window, mode="valid")  # means[i]: steps i..i+window-1
    hit = np.flatnonzero(means >= level)
    return int(hit[0]) + window if hit.size else None


def token_scores(model: LookupAttention, n_names: int, n_numbers: int) -> torch.Tensor:
    """The score every possible query gives every possible token: (n_tokens, n_names).

    Row ``t`` is token ``t`` of :func:`all_tokens`; column ``n`` is the query asking for
    name ``n``. Scores are what attention uses of the keys: replacing ``W_k`` by ``W_k A``
    and ``W_q`` by ``W_q A^{-T}`` (any invertible ``A``) changes the keys but not this table.
    """
    dtype = model.W_q.weight.dtype
    tokens = all_tokens(n_names, n_numbers)[0].to(dtype)  # (n_tokens, d_model)
    queries = torch.cat([torch.eye(n_names), torch.zeros(n_names, n_numbers)], dim=1).to(dtype)
    with torch.no_grad():
        q = model.W_q(queries)  # (n_names, d_head)
        k, _ = model.keys_values(tokens)  # (n_tokens, d_head)
        return k @ q.T / math.sqrt(model.d_head)  # (n_tokens, n_names)


def token_readout(model: LookupAttention, n_names: int, n_numbers: int) -> torch.Tensor:
    """What the read-out makes of each token's value: ``v_t W_o`` (n_tokens, n_numbers).

    The logits the head would produce if it put all its weight on token ``t`` (without the
    read-out's bias, the same for every token). Replacing ``W_v`` by ``W_v B`` and ``W_o``
    by ``B^{-1} W_o`` changes the values but not this table.
    """
    tokens = all_tokens(n_names, n_numbers)[0].to(model.W_v.weight.dtype)
    with torch.no_grad():
        _, v = model.keys_values(tokens)  # (n_tokens, d_head)
        return v @ model.W_o.weight.T  # (n_tokens, n_numbers)
