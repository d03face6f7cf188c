"""Keys built from another head's output: a two-layer attention-only model that learns an
induction head (lesson 13).

The task. A sequence is a start token ``BOS`` followed by ``length`` random tokens (drawn
from :data:`N_TOKENS` = 50, no token twice) and then *the same tokens again*::

    BOS  a b c d e   a b c d e              length = 5, seq = 1 + 2 * length
    pos  0 1 2 3 4 5 6 7 8 9 10

The model predicts every next token. In the first half almost nothing can be predicted
(a uniform guess costs log 50 = 3.91 nats; never guessing a token already seen in the half
gives about 3.81 on average); in the repeated half, from its second token on, every token is
"the one that followed the earlier occurrence of the current token" — an induction head's
rule. The control model is trained on the same first halves followed by *fresh* random
tokens, so it never sees a repeat. ``length`` is drawn anew for every training batch
(between :data:`MIN_LENGTH` and :data:`MAX_LENGTH`), so the distance to the earlier
occurrence is never the same: attending to a fixed offset cannot solve the task.

The model (row vectors throughout, ``x @ W``)::

    x0 = embed(token)                                         # (batch, seq, d_model)
    layer 0: 2 heads, rotary positions on q and k             # the only position signal
    x1 = x0 + o_0 + o_1            o_h = head h's output      # (batch, seq, d_model)
    layer 1: 2 heads, no positions; q, k, v read x1
    x2 = x1 + layer-1 outputs
    logits = unembed(x2)                                      # (batch, seq, VOCAB)

No MLPs, no layer norm: everything a layer-1 key knows about *order* has to come from a
layer-0 head's output. :meth:`InductionModel.run` returns every intermediate
(:class:`Run`) and can recompute layer 1's queries, keys or values from a residual
stream with some layer-0 heads removed (``remove={"k": [0]}``) — the key-side ablation
of the lesson. :func:`composition_scores` gives the Q-, K- and V-composition scores of
Elhage et al. (2021) for every pair of heads.

Run ``python -m attnlib.tasks.induction --train`` to retrain the two models and rewrite
``data/induction_model.pt``, ``data/induction_control.pt`` and ``data/induction_log.tsv``
(one thread, seeded; about 30-60 s on a laptop CPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attnlib._validate import check_int
from attnlib.core import attend
from attnlib.heads import split_heads
from attnlib.positions import apply_rotary
from attnlib.tasks.shipped import data_file, read_log_table, train_command
from attnlib.training import torch_threads

__all__ = [
    "N_TOKENS",
    "BOS",
    "VOCAB",
    "CONFIG",
    "TRAINING",
    "MIN_LENGTH",
    "MAX_LENGTH",
    "WEIGHTS_PATH",
    "CONTROL_PATH",
    "LOG_PATH",
    "CHANCE",
    "InductionModel",
    "Run",
    "make_sequences",
    "query_positions",
    "next_token_losses",
    "half_losses",
    "induction_accuracy",
    "previous_token_score",
    "induction_score",
    "qk_matrix",
    "ov_matrix",
    "composition_score",
    "composition_scores",
    "random_composition_baseline",
    "train_model",
    "train_both",
    "save_weights",
    "load_model",
    "write_log",
    "read_log",
    "running_mean",
    "phase_change_step",
]

N_TOKENS = 50  # random tokens 0..49
BOS = N_TOKENS  # the start token, id 50
VOCAB = N_TOKENS + 1
MIN_LENGTH, MAX_LENGTH = 1, 20
CONFIG = {"vocab": VOCAB, "d_model": 64, "n_heads": 2, "d_head": 16}
TRAINING = {"steps": 2000, "batch": 32, "lr": 3e-3, "seed": 3}
CHANCE = math.log(N_TOKENS)  # loss of a uniform guess over the 50 tokens, in nats

WEIGHTS_PATH = data_file("induction_model.pt")
CONTROL_PATH = data_file("induction_control.pt")
LOG_PATH = data_file("induction_log.tsv")
LOG_COLUMNS = ("step", "length", "first", "repeated", "control_first", "control_repeated")
TRAIN_COMMAND = "python -m attnlib.tasks.induction --train"


# ----------------------------------------------------------------------------------------
# The data.
# ----------------------------------------------------------------------------------------


def make_sequences(
    batch: int, length: int, *, repeat: bool = True, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``BOS``, ``length`` distinct random tokens, then the same tokens again.

    Parameters
    ----------
    batch, length : int
        ``1 <= length <= N_TOKENS``.
    repeat : bool, default True
        False gives the control: the second half is a fresh, independent draw (no repeat
        but by chance).
    generator : torch.Generator, optional

    Returns
    -------
    tokens : LongTensor of shape (batch, 1 + 2 * length)
    """
    fn = "make_sequences"
    batch = check_int(fn, "batch", batch, minimum=1)
    length = check_int(fn, "length", length, minimum=1, maximum=N_TOKENS)
    # a random permutation of the 50 tokens per row, cut to `length`: no token twice
    first = torch.rand(batch, N_TOKENS, generator=generator).argsort(1)[:, :length]
    if repeat:
        second = first
    else:
        second = torch.rand(batch, N_TOKENS, generator=generator).argsort(1)[:, :length]
    bos = torch.full((batch, 1), BOS, dtype=torch.long)
    return torch.cat([bos, first, second], 1)  # (batch, 1 + 2 * length)


def query_positions(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The positions whose next-token prediction counts for each half.

    ``first``: positions 0 .. length-1 (BOS and the first half but its last token), whose
    next tokens are the first half's: unpredictable. ``repeated``: positions
    length+1 .. 2·length-1, the repeated tokens but the last; each predicts the token that
    followed its earlier occurrence. Position ``length`` (the last first-half token,
    followed by the start of the repeat, which nothing announces) counts for neither.
    """
    length = check_int("query_positions", "length", length, minimum=1)
    return torch.arange(0, length), torch.arange(length + 1, 2 * length)


def next_token_losses(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each next-token prediction, shape (batch, seq - 1), in nats.

    Entry ``[b, t]`` is the loss of the prediction made at position t of token t + 1.
    """
    batch, seq, vocab = logits.shape
    if tokens.shape != (batch, seq):
        raise ValueError(
            f"next_token_losses: logits {tuple(logits.shape)} and tokens "
            f"{tuple(tokens.shape)} must agree on (batch, seq)"
        )
    losses = nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1), reduction="none"
    )
    return losses.view(batch, seq - 1)  # (batch, seq - 1)


def half_losses(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[float, float]:
    """Mean loss on the first half and on the repeated half (see :func:`query_positions`)."""
    length = (tokens.shape[1] - 1) // 2
    first, repeated = query_positions(length)
    losses = next_token_losses(logits, tokens)
    return float(losses[:, first].mean()), float(losses[:, repeated].mean())


def induction_accuracy(logits: torch.Tensor, tokens: torch.Tensor) -> float:
    """Fraction of repeated-half predictions whose top token is the true next token."""
    length = (tokens.shape[1] - 1) // 2
    _, repeated = query_positions(length)
    guess = logits[:, repeated].argmax(-1)  # (batch, length - 1)
    return float((guess == tokens[:, repeated + 1]).double().mean())


# ----------------------------------------------------------------------------------------
# The model.
# ----------------------------------------------------------------------------------------


@dataclass
class Run:
    """Every intermediate of one forward pass (see :meth:`InductionModel.run`).

    Attributes
    ----------
    tokens : LongTensor of shape (batch, seq)
    x0 : Tensor of shape (batch, seq, d_model) — the embeddings.
    head_out0 : Tensor of shape (batch, n_heads, seq, d_model) — what each layer-0 head
        writes into the residual stream.
    x1 : Tensor of shape (batch, seq, d_model) — ``x0 + head_out0.sum(1)``.
    q1, k1, v1 : Tensor of shape (batch, n_heads, seq, d_head) — layer 1's queries, keys
        and values (after any removal).
    weights0, weights1 : Tensor of shape (batch, n_heads, seq_q, seq_k)
    head_out1 : Tensor of shape (batch, n_heads, seq, d_model)
    logits : Tensor of shape (batch, seq, vocab)
    """

    tokens: torch.Tensor
    x0: torch.Tensor
    head_out0: torch.Tensor
    x1: torch.Tensor
    q1: torch.Tensor
    k1: torch.Tensor
    v1: torch.Tensor
    weights0: torch.Tensor
    weights1: torch.Tensor
    head_out1: torch.Tensor
    logits: torch.Tensor


class InductionModel(nn.Module):
    """Two attention-only layers of ``n_heads`` causal heads on a residual stream.

    Layer 0 rotates its queries and keys by position (rotary embeddings,
    :func:`attnlib.positions.apply_rotary`); the embeddings carry no position, and layer 1
    sees none. Each head compares queries and keys in ``d_head`` dimensions and writes
    ``d_model`` numbers back (``n_heads * d_head`` need not equal ``d_model``). No biases.

    Parameters
    ----------
    vocab, d_model, n_heads, d_head : int
    """

    def __init__(
        self,
        vocab: int = CONFIG["vocab"],
        d_model: int = CONFIG["d_model"],
        n_heads: int = CONFIG["n_heads"],
        d_head: int = CONFIG["d_head"],
    ):
        super().__init__()
        fn = "InductionModel"
        for name, value in (("vocab", vocab), ("d_model", d_model), ("n_heads", n_heads)):
            check_int(fn, name, value, minimum=1)
        check_int(fn, "d_head", d_head, minimum=2)
        if d_head % 2:
            raise ValueError(f"{fn}: d_head must be even (rotary pairs), got {d_head}")
        self.vocab, self.d_model, self.n_heads, self.d_head = vocab, d_model, n_heads, d_head
        width = n_heads * d_head
        self.embed = nn.Embedding(vocab, d_model)
        for layer in (0, 1):
            for name in ("W_q", "W_k", "W_v"):
                setattr(self, f"{name}{layer}", nn.Linear(d_model, width, bias=False))
            setattr(self, f"W_o{layer}", nn.Linear(width, d_model, bias=False))
        self.unembed = nn.Linear(d_model, vocab, bias=False)
        # Every matrix starts N(0, 1/fan_in), so a random unit-length input keeps a length of
        # about 1 through each projection; embeddings start with length about 1 too.
        for name, p in self.named_parameters():
            fan_in = p.shape[1] if name != "embed.weight" else d_model
            nn.init.normal_(p, std=fan_in**-0.5)

    def weight(self, name: str, layer: int) -> torch.Tensor:
        """A projection as a row-vector matrix: ``W_q``, ``W_k``, ``W_v`` (d_model, width),
        ``W_o`` (width, d_model), where width = n_heads * d_head."""
        if name not in ("W_q", "W_k", "W_v", "W_o") or layer not in (0, 1):
            raise ValueError(f"weight: name must be W_q/W_k/W_v/W_o and layer 0 or 1, got {name}")
        return getattr(self, f"{name}{layer}").weight.T

    def _per_head_out(self, out: torch.Tensor, layer: int) -> torch.Tensor:
        """Each head's contribution to the residual stream: (batch, n_heads, seq, d_model)."""
        W_o = self.weight("W_o", layer).reshape(self.n_heads, self.d_head, self.d_model)
        return torch.einsum("bhtd,hdm->bhtm", out, W_o)

    def run(self, tokens: torch.Tensor, *, remove: dict | None = None) -> Run:
        """The forward pass with every intermediate (a :class:`Run`).

        Parameters
        ----------
        tokens : LongTensor of shape (batch, seq)
        remove : dict, optional
            ``{"q": heads, "k": heads, "v": heads}`` (any subset of the keys): layer 1's
            queries / keys / values are computed from ``x1`` minus the outputs of these
            layer-0 heads; everything else reads the intact ``x1``. ``{"k": [0]}``: keys
            without head 0's output, queries and values untouched.

        Runs on one thread (see :func:`attnlib.training.torch_threads`): the model is tiny,
        so this is faster than several, and the numbers do not depend on the core count.
        """
        with torch_threads(1):  # a tiny model: faster on one thread, same sums everywhere
            return self._run(tokens, remove)

    def _run(self, tokens: torch.Tensor, remove: dict | None) -> Run:
        if tokens.ndim != 2 or tokens.dtype != torch.long:
            raise ValueError(f"run: tokens must be a LongTensor (batch, seq), got {tokens.dtype}")
        remove = dict(remove or {})
        bad = set(remove) - {"q", "k", "v"}
        if bad:
            raise ValueError(f"run: remove's keys must be 'q', 'k' or 'v', got {sorted(bad)}")
        h = self.n_heads
        x0 = self.embed(tokens)  # (batch, seq, d_model)
        q, k, v = (split_heads(W(x0), h) for W in (self.W_q0, self.W_k0, self.W_v0))
        q, k = apply_rotary(q), apply_rotary(k)  # (batch, n_heads, seq, d_head)
        out0, weights0 = attend(q, k, v, causal=True)  # (batch, n_heads, seq, d_head)
        head_out0 = self._per_head_out(out0, 0)  # (batch, n_heads, seq, d_model)
        x1 = x0 + head_out0.sum(1)

        def stream(side):
            heads = list(remove.get(side, ()))
            for i in heads:
                check_int("run", f"remove[{side!r}] head", i, minimum=0, maximum=h - 1)
            return x1 - head_out0[:, heads].sum(1) if heads else x1

        q1 = split_heads(self.W_q1(stream("q")), h)
        k1 = split_heads(self.W_k1(stream("k")), h)
        v1 = split_heads(self.W_v1(stream("v")), h)
        out1, weights1 = attend(q1, k1, v1, causal=True)  # (batch, n_heads, seq, d_head)
        head_out1 = self._per_head_out(out1, 1)
        x2 = x1 + head_out1.sum(1)
        logits = self.unembed(x2)  # (batch, seq, vocab)
        return Run(tokens, x0, head_out0, x1, q1, k1, v1, weights0, weights1, head_out1, logits)

    def forward(self, tokens: torch.Tensor, *, remove: dict | None = None) -> torch.Tensor:
        """Logits of shape (batch, seq, vocab) (with an optional removal, see :meth:`run`)."""
        return self.run(tokens, remove=remove).logits


# ----------------------------------------------------------------------------------------
# Scores of heads.
# ----------------------------------------------------------------------------------------


def _check_weights(fn: str, weights) -> None:
    if not isinstance(weights, torch.Tensor) or weights.ndim != 4:
        raise ValueError(f"{fn}: weights must be a Tensor (batch, n_heads, seq_q, seq_k)")
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"{fn}: self-attention weights need seq_q == seq_k, got {weights.shape}")


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight each head puts on the position right before the query.

    Parameters
    ----------
    weights : Tensor of shape (batch, n_heads, seq, seq)
        Causal self-attention weights.

    Returns
    -------
    Tensor of shape (n_heads,)
        The mean over the batch and over query positions 1 .. seq-1 (position 0 has no
        previous position) of ``weights[b, h, t, t - 1]``.
    """
    _check_weights("previous_token_score", weights)
    seq = weights.shape[-1]
    t = torch.arange(1, seq)
    return weights[:, :, t, t - 1].mean(dim=(0, 2))  # (n_heads,)


def induction_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight each head puts on the token after the earlier occurrence of the query's.

    For a query at repeated position t (length+1 .. 2·length-1) that is position
    ``t - length + 1``. ``weights`` of shape (batch, n_heads, seq, seq) with
    seq = 1 + 2·length; returns shape (n_heads,).
    """
    _check_weights("induction_score", weights)
    length = (weights.shape[-1] - 1) // 2
    _, t = query_positions(length)
    return weights[:, :, t, t - length + 1].mean(dim=(0, 2))  # (n_heads,)


def qk_matrix(model: InductionModel, layer: int, head: int) -> torch.Tensor:
    """``W_QK = W_Q W_Kᵀ`` of one head, (d_model, d_model): score = x_q W_QK x_kᵀ / √d_head.

    (For layer 0 the rotary rotation sits between W_Q and W_Kᵀ; this is its value at
    offset 0.)
    """
    s = slice(head * model.d_head, (head + 1) * model.d_head)
    return model.weight("W_q", layer)[:, s] @ model.weight("W_k", layer)[:, s].T


def ov_matrix(model: InductionModel, layer: int, head: int) -> torch.Tensor:
    """``W_OV = W_V W_O`` of one head, (d_model, d_model): the head writes a · W_OV,
    where a is the weighted sum of the residual vectors it attends to."""
    s = slice(head * model.d_head, (head + 1) * model.d_head)
    return model.weight("W_v", layer)[:, s] @ model.weight("W_o", layer)[s, :]


def composition_score(product: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> float:
    """``‖product‖_F / (‖left‖_F ‖right‖_F)``, between 0 and 1 when product = left @ right."""
    norm = torch.linalg.matrix_norm
    return float(norm(product.double()) / (norm(left.double()) * norm(right.double())))


def composition_scores(model: InductionModel) -> dict[str, np.ndarray]:
    """Q-, K- and V-composition of every layer-0 head with every layer-1 head.

    With row vectors, a layer-0 head adds ``a W_OV`` to the residual stream. Read by a
    layer-1 key that term scores ``x_q W_QK (a W_OV)ᵀ``: the product ``W_QK W_OVᵀ``
    (K-composition). Read by a query: ``W_OV W_QK`` (Q-composition). Read by a value:
    ``W_OV W_OV'`` (V-composition).

    Returns
    -------
    dict with keys "q", "k", "v" of ndarray (n_heads_layer0, n_heads_layer1)
        Entry [i, j]: how strongly layer-0 head i composes with layer-1 head j.
    """
    h = model.n_heads
    out = {side: np.zeros((h, h)) for side in "qkv"}
    with torch.no_grad(), torch_threads(1):
        for i in range(h):
            ov = ov_matrix(model, 0, i)
            for j in range(h):
                qk, ov1 = qk_matrix(model, 1, j), ov_matrix(model, 1, j)
                out["k"][i, j] = composition_score(qk @ ov.T, qk, ov)
                out["q"][i, j] = composition_score(ov @ qk, ov, qk)
                out["v"][i, j] = composition_score(ov @ ov1, ov, ov1)
    return out


def random_composition_baseline(
    d_model: int = CONFIG["d_model"], d_head: int = CONFIG["d_head"], n: int = 200, seed: int = 0
) -> float:
    """Mean composition score of two unrelated heads: random Gaussian W_Q W_Kᵀ and W_V W_O
    of the model's shapes (rank d_head each)."""
    gen = torch.Generator().manual_seed(seed)
    with torch_threads(1):
        total = _baseline_sum(gen, n, d_model, d_head)
    return total / n


def _baseline_sum(gen, n, d_model, d_head) -> float:
    total = 0.0
    for _ in range(n):
        a, b, c, d = (
            torch.randn(shape, generator=gen, dtype=torch.float64)
            for shape in ((d_model, d_head), (d_head, d_model)) * 2
        )
        left, right = a @ b, c @ d
        total += composition_score(left @ right.T, left, right)
    return total


# ----------------------------------------------------------------------------------------
# Training, shipping, loading.
# ----------------------------------------------------------------------------------------


def train_model(
    repeat: bool = True,
    *,
    steps: int = TRAINING["steps"],
    batch: int = TRAINING["batch"],
    lr: float = TRAINING["lr"],
    seed: int = TRAINING["seed"],
    progress: bool = False,
):
    """Train a fresh :class:`InductionModel` (on one thread, seeded).

    Each step draws ``length`` uniformly from MIN_LENGTH..MAX_LENGTH and a batch of
    :func:`make_sequences` (``repeat=False``: the control). The model and the control
    start from the same weights and see the same first halves.

    Returns
    -------
    model : InductionModel (eval mode)
    history : attnlib.training.History
        Per step: ``loss`` (all predictions), ``first`` and ``repeated`` (the two halves,
        :func:`half_losses`), ``length``.
    """
    from attnlib.training import train

    with torch_threads(1):
        torch.manual_seed(seed)
        model = InductionModel()
        gen = torch.Generator().manual_seed(seed + 1)

        def step(i):
            length = int(torch.randint(MIN_LENGTH, MAX_LENGTH + 1, (1,), generator=gen))
            tokens = make_sequences(batch, length, repeat=repeat, generator=gen)
            losses = next_token_losses(model(tokens), tokens)  # (batch, seq - 1)
            first, rep = query_positions(length)
            extras = {
                "first": losses[:, first].mean().item(),
                # length 1 ("BOS a a") has no repeated-half prediction: NaN in the log
                "repeated": losses[:, rep].mean().item() if rep.numel() else math.nan,
                "length": length,
            }
            return losses.mean(), extras

        desc = "induction model" if repeat else "control model"
        history = train(
            model.parameters(), step, steps=steps, lr=lr, desc=desc, progress=progress, threads=1
        )
    return model.eval(), history


def train_both(steps: int = TRAINING["steps"], progress: bool = False):
    """The induction model and its control, and the log rows (see :func:`write_log`)."""
    model, hist = train_model(True, steps=steps, progress=progress)
    control, chist = train_model(False, steps=steps, progress=progress)
    rows = {
        "step": np.arange(steps),
        "length": hist["length"].astype(int),
        "first": hist["first"],
        "repeated": hist["repeated"],
        "control_first": chist["first"],
        "control_repeated": chist["repeated"],
    }
    return model, control, rows


def save_weights(model: InductionModel, path: str | Path) -> None:
    """Save the state dict in float16 (half the bytes; the lesson computes in float32)."""
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    torch.save(state, path)


def load_model(path: str | Path = WEIGHTS_PATH) -> InductionModel:
    """A shipped model (default: the induction model; ``CONTROL_PATH`` for the control),
    in float32 and eval mode."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"load_model: {path} does not exist; run `{TRAIN_COMMAND}`")
    state = torch.load(path, weights_only=True)
    model = InductionModel()
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    return model.eval()


def write_log(rows: dict, path: str | Path) -> None:
    """The training log as tab-separated text: one line per step, losses to 4 decimals."""
    lines = ["\t".join(LOG_COLUMNS)]
    for i in range(len(rows["step"])):
        vals = [str(int(rows["step"][i])), str(int(rows["length"][i]))]
        vals += [f"{float(rows[c][i]):.4f}" for c in LOG_COLUMNS[2:]]
        lines.append("\t".join(vals))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_log(path: str | Path = LOG_PATH) -> dict[str, np.ndarray]:
    """The shipped training log: a dict of column name -> array (one entry per step)."""
    log = read_log_table(path, TRAIN_COMMAND, LOG_COLUMNS)
    log["step"], log["length"] = log["step"].astype(int), log["length"].astype(int)
    return log


def running_mean(x, window: int) -> np.ndarray:
    """Mean of the last ``window`` entries at every step (fewer at the start); NaN entries
    (steps without a value) are left out of the means."""
    window = check_int("running_mean", "window", window, minimum=1)
    x = np.asarray(x, dtype=np.float64)
    have = np.isfinite(x)
    total = np.concatenate([[0.0], np.cumsum(np.where(have, x, 0.0))])
    count = np.concatenate([[0], np.cumsum(have)])
    idx = np.arange(1, len(x) + 1)
    lo = np.maximum(idx - window, 0)
    n = count[idx] - count[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (total[idx] - total[lo]) / np.maximum(n, 1), np.nan)


def phase_change_step(log: dict, column: str = "repeated", window: int = 50) -> int:
    """First step at which the running mean (``window`` steps) of ``column`` falls below
    half of chance (log 50 / 2); -1 if it never does."""
    below = np.nonzero(running_mean(log[column], window) < CHANCE / 2)[0]
    return int(below[0]) if below.size else -1


def _train_and_save(out: Path, progress: bool) -> str:
    model, control, rows = train_both(progress=progress)
    save_weights(model, out / WEIGHTS_PATH.name)
    save_weights(control, out / CONTROL_PATH.name)
    write_log(rows, out / LOG_PATH.name)
    shipped = load_model(out / WEIGHTS_PATH.name)
    tokens = make_sequences(500, 20, generator=torch.Generator().manual_seed(12345))
    with torch.no_grad():
        acc = induction_accuracy(shipped(tokens), tokens)
    return (
        f"induction accuracy {acc:.3f} (500 held-out sequences, length 20); phase change at "
        f"step {phase_change_step(read_log(out / LOG_PATH.name))}"
    )


def _main(argv=None) -> None:
    train_command(
        argv, __doc__, "train both models and save them", WEIGHTS_PATH.parent, _train_and_save
    )


if __name__ == "__main__":
    _main()
