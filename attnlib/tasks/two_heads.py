"""A generated task that needs two heads: look back one step *and* find the last marker.

A sequence is made of letters; some of them are **markers**, written in capitals
(``a b C d E f``). Position 0 always holds a marker. At every position i ≥ 1 the model
must name two letters:

1. the letter of the **previous token** (position i - 1), and
2. the letter of the **most recent marker** at a position < i.

A token is embedded as *letter + marker flag + position*: ``C`` and ``c`` share the
letter part. Each rule is easy for one head — "previous token" is a fixed offset in
position, "last marker" is a match on the flag with a preference for recent positions.
But one head has one softmax: to serve both it must blend the two positions' values, and
a blend of "letter c" and "letter e" no longer says which letter was the previous token
and which the marker. Two heads, each half as wide, take one rule each and hand their
values to ``W_o`` side by side.

* :func:`make_batch` — seeded tokens and targets;
* :class:`HeadsTaskModel` — embeddings, one :class:`~attnlib.mha.MultiHeadAttention`
  layer that only looks at earlier positions, two linear read-outs; its parameter count
  does not depend on ``n_heads``;
* :func:`train_heads_model` — trains one model with :func:`attnlib.training.train`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnlib._validate import check_instance, check_int, check_number
from attnlib.mha import MultiHeadAttention
from attnlib.training import History, train

__all__ = [
    "HeadsTask",
    "Batch",
    "make_batch",
    "HeadsTaskModel",
    "train_heads_model",
    "attention_shares",
]


@dataclass(frozen=True)
class HeadsTask:
    """Sizes of the task.

    Parameters
    ----------
    n_letters : int
        Letters ``a ..``; token ids ``0 .. n_letters - 1`` are ordinary letters and
        ``n_letters .. 2 * n_letters - 1`` the same letters as markers.
    seq : int
        Sequence length.
    p_marker : float
        Probability that a position after the first holds a marker.
    """

    n_letters: int = 6
    seq: int = 10
    p_marker: float = 0.25

    def __post_init__(self) -> None:
        fn = "HeadsTask"
        check_int(fn, "n_letters", self.n_letters, minimum=1, maximum=26)  # letters a .. z
        check_int(fn, "seq", self.seq, minimum=2)
        if not 0.0 <= check_number(fn, "p_marker", self.p_marker) <= 1.0:
            raise ValueError(f"{fn}: p_marker must be in [0, 1], got {self.p_marker}")

    @property
    def vocab(self) -> int:
        return 2 * self.n_letters

    def token_names(self) -> list[str]:
        """Names of the token ids: ``a, b, ...`` then the markers ``A, B, ...``."""
        lower = [chr(ord("a") + i) for i in range(self.n_letters)]
        return lower + [c.upper() for c in lower]

    def decode(self, tokens) -> list[str]:
        """Token names of one sequence (LongTensor or list of ids)."""
        names = self.token_names()
        return [names[int(t)] for t in tokens]


@dataclass(frozen=True)
class Batch:
    """One batch of the task.

    ``tokens`` : LongTensor of shape (batch, seq). ``prev`` and ``marker`` : LongTensor of
    shape (batch, seq), the letter (0 .. n_letters - 1) of the previous token and of the
    last earlier marker. Position 0 has no target: -100 there (ignored by
    ``cross_entropy``).
    """

    tokens: torch.Tensor
    prev: torch.Tensor
    marker: torch.Tensor


def make_batch(task: HeadsTask, batch: int, generator: torch.Generator) -> Batch:
    """Draw ``batch`` sequences and their targets.

    Parameters
    ----------
    task : HeadsTask
    batch : int
    generator : torch.Generator
        Seeded by the caller: the same seed gives the same batch.

    Returns
    -------
    Batch
    """
    check_instance("make_batch", "generator", generator, torch.Generator, "a torch.Generator")
    batch = check_int("make_batch", "batch", batch, minimum=1)
    n, seq = task.n_letters, task.seq
    letters = torch.randint(0, n, (batch, seq), generator=generator)  # (batch, seq)
    is_marker = torch.rand((batch, seq), generator=generator) < task.p_marker  # (batch, seq)
    is_marker[:, 0] = True  # a marker to find always exists
    tokens = letters + n * is_marker.long()  # (batch, seq)

    pos = torch.arange(seq).expand(batch, seq)  # (batch, seq)
    marker_pos = torch.where(is_marker, pos, 0).cummax(dim=1).values  # last marker <= i
    ignore = torch.full((batch, 1), -100)
    prev = torch.cat([ignore, letters[:, :-1]], dim=1)  # (batch, seq)
    last = letters.gather(1, marker_pos[:, :-1])  # last marker <= i - 1, for i = 1 .. seq - 1
    marker = torch.cat([ignore, last], dim=1)  # (batch, seq)
    return Batch(tokens, prev, marker)


def _last_marker_before(task: HeadsTask, tokens: torch.Tensor) -> torch.Tensor:
    """(batch, seq) position of the last marker at a position < i (0 for i = 0)."""
    batch, seq = tokens.shape
    pos = torch.arange(seq).expand(batch, seq)  # (batch, seq)
    marker_pos = torch.where(tokens >= task.n_letters, pos, 0).cummax(dim=1).values
    return torch.cat([torch.zeros(batch, 1, dtype=torch.long), marker_pos[:, :-1]], dim=1)


def attention_shares(task: HeadsTask, tokens: torch.Tensor, weights: torch.Tensor) -> dict:
    """How much weight each head puts on the previous token and on the last marker.

    Only positions i ≥ 1 whose previous token is *not* the last marker count, so the two
    places differ and a head cannot score on both at once.

    Parameters
    ----------
    task : HeadsTask
    tokens : LongTensor of shape (batch, seq)
    weights : Tensor of shape (batch, n_heads, seq, seq)

    Returns
    -------
    dict with ``"prev"`` and ``"marker"``: numpy arrays of shape (n_heads,), the mean
    weight each head gives to that place.
    """
    batch, n_heads, seq, _ = weights.shape
    i = torch.arange(1, seq)  # query positions with a target
    last = _last_marker_before(task, tokens)[:, 1:]  # (batch, seq - 1)
    differ = last != (i - 1)  # (batch, seq - 1)
    w = weights[:, :, 1:, :].detach()  # (batch, n_heads, seq - 1, seq)
    on_prev = w.gather(3, (i - 1).expand(batch, n_heads, seq - 1)[..., None])[..., 0]
    on_marker = w.gather(3, last[:, None, :, None].expand(batch, n_heads, seq - 1, 1))[..., 0]
    return {
        "prev": on_prev.permute(1, 0, 2)[:, differ].mean(dim=1).numpy(),
        "marker": on_marker.permute(1, 0, 2)[:, differ].mean(dim=1).numpy(),
    }


class HeadsTaskModel(nn.Module):
    """Embeddings -> one :class:`MultiHeadAttention` over earlier positions -> two read-outs.

    There is no residual connection: everything the read-outs see was fetched by
    attention. The parameter count is the same for every ``n_heads`` dividing ``d_model``.

    Parameters
    ----------
    task : HeadsTask
    d_model : int
    n_heads : int
    """

    def __init__(self, task: HeadsTask, d_model: int = 16, n_heads: int = 2):
        super().__init__()
        self.task = task
        self.letter = nn.Embedding(task.n_letters, d_model)
        self.flag = nn.Embedding(2, d_model)  # 0 = ordinary letter, 1 = marker
        self.pos = nn.Embedding(task.seq, d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.read_prev = nn.Linear(d_model, task.n_letters)
        self.read_marker = nn.Linear(d_model, task.n_letters)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, seq) token ids -> (batch, seq, d_model): letter + flag + position."""
        n = self.task.n_letters
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.letter(tokens % n) + self.flag(tokens // n) + self.pos(positions)

    def forward(self, tokens: torch.Tensor):
        """Logits for both targets, and the attention weights.

        Parameters
        ----------
        tokens : LongTensor of shape (batch, seq)

        Returns
        -------
        prev_logits : Tensor of shape (batch, seq, n_letters)
        marker_logits : Tensor of shape (batch, seq, n_letters)
        weights : Tensor of shape (batch, n_heads, seq, seq)
        """
        seq = tokens.shape[1]
        x = self.embed(tokens)  # (batch, seq, d_model)
        # Only strictly earlier positions: the targets are about the past. Row 0 (no
        # target) may see itself, so that no row is empty.
        earlier = torch.ones(seq, seq, dtype=torch.bool, device=tokens.device).tril(-1)
        earlier[0, 0] = True  # (seq_q, seq_k)
        h, weights = self.attn(x, x, x, mask=earlier)  # (batch, seq, d_model)
        return self.read_prev(h), self.read_marker(h), weights

    def loss_and_accuracy(self, batch: Batch) -> tuple[torch.Tensor, float]:
        """Summed cross-entropy of both targets, and the share of positions with both right."""
        prev_logits, marker_logits, _ = self(batch.tokens)
        ce = nn.functional.cross_entropy
        loss = ce(prev_logits.flatten(0, 1), batch.prev.flatten()) + ce(
            marker_logits.flatten(0, 1), batch.marker.flatten()
        )
        with torch.no_grad():
            both = (prev_logits[:, 1:].argmax(-1) == batch.prev[:, 1:]) & (
                marker_logits[:, 1:].argmax(-1) == batch.marker[:, 1:]
            )
            acc = float(both.float().mean())
        return loss, acc


def train_heads_model(
    task: HeadsTask,
    n_heads: int,
    *,
    seed: int = 0,
    d_model: int = 16,
    steps: int = 300,
    batch: int = 32,
    lr: float = 2e-2,
    progress: bool = True,
) -> tuple[HeadsTaskModel, History]:
    """Train a :class:`HeadsTaskModel` from a seeded start on fresh seeded batches.

    Returns
    -------
    model : HeadsTaskModel
    history : History
        ``loss`` and ``accuracy`` per step (``accuracy`` = share of positions with both
        letters right on that step's batch).

    Notes
    -----
    Training runs on one CPU thread (the previous thread count is restored afterwards):
    for a model this small, extra threads only add synchronisation, and the result no
    longer depends on the machine's thread count (float sums are added in one order).
    """
    fn = "train_heads_model"
    steps = check_int(fn, "steps", steps, minimum=1)
    batch = check_int(fn, "batch", batch, minimum=1)
    torch.manual_seed(seed)
    model = HeadsTaskModel(task, d_model=d_model, n_heads=n_heads)
    gen = torch.Generator().manual_seed(10_000 + seed)

    def step(i: int):
        loss, accuracy = model.loss_and_accuracy(make_batch(task, batch, gen))
        return loss, {"accuracy": accuracy}

    history = train(
        model.parameters(),
        step,
        steps=steps,
        lr=lr,
        desc=f"{n_heads} head(s)",
        progress=progress,
        threads=1,  # a model this small is fastest (and steadiest) on one thread
    )
    return model, history
