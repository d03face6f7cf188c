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

from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from attnlib._validate import check_choice, check_int, type_name
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
    if not isinstance(generator, np.random.Generator):
        raise TypeError(
            f"{fn}: generator must be a numpy.random.Generator, got {type_name(generator)}"
        )
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
