"""A tiny two-layer attention model for subject-verb agreement, and the tools to take it apart.

The task (lesson 09): the main verb of each sentence of :mod:`attnlib.tasks.corpus` is hidden
behind a ``[V]`` token, and the model must say whether it should be singular or plural.
The answer is the number of the subject head noun — not of the nearest noun, not of the
attractor inside the subject's modifier ("the key to the cabinets [V]"), and not of a
noun in a sentence-initial phrase ("near the doors the key [V]").

The model::

    x0 = embed(token) + embed(position)                       # (batch, seq, d_model)
    x1 = x0 + attention_1(x0)                                 # context: who am I near?
    k, v = W_k2 x1, W_v2 x1                                   # (batch, n_heads, seq, d_head)
    q = W_q2 x1[verb]                                         # only the [V] position asks
    out = W_o2 merge(attend(q, k, v))                         # (batch, d_model)
    logits = readout(out)                                     # (batch, 2): sg, pl

The decision reaches the readout *only* through the second layer's values at the
positions the verb attends to, so the second layer's keys (where to look) and values
(what is carried) can be probed and swapped one at a time. Run
``python -m attnlib.tasks.syntax --train --out data/syntax_model.pt`` to retrain the
weights shipped in ``data/``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attnlib._validate import check_int
from attnlib.core import attend
from attnlib.heads import merge_heads, split_heads
from attnlib.tasks.corpus import CORPUS_PATH, ROLES, Sentence, load_corpus, vocabulary
from attnlib.tasks.shipped import data_file
from attnlib.training import History, torch_threads, train

__all__ = [
    "WEIGHTS_PATH",
    "LOG_PATH",
    "write_log",
    "SPECIALS",
    "Encoded",
    "SyntaxModel",
    "encode",
    "split",
    "train_model",
    "load_model",
    "accuracy",
    "fit_probe",
    "probe_predict",
    "probe_accuracy",
    "majority_baseline",
    "attention_on",
    "per_token",
    "swap_keys",
    "patch_values",
]

WEIGHTS_PATH = data_file("syntax_model.pt")
LOG_PATH = data_file("syntax_log.tsv")  # the training run's loss and batch accuracy per step
LOG_COLUMNS = ("step", "loss", "accuracy")
SPECIALS = ("[PAD]", "[V]")
N_TRAIN = 2400  # sentences 0..2399 train, the rest are held out
CONFIG = {"d_model": 32, "n_heads": 4, "n_heads_1": 4, "max_len": 16}
TRAIN_SEED = 0
TRAIN_STEPS = 600


def _vocab() -> dict[str, int]:
    return {w: i for i, w in enumerate(SPECIALS + vocabulary())}


@dataclass
class Encoded:
    """A corpus as tensors; the main verb is replaced by ``[V]`` in ``tokens``.

    Attributes
    ----------
    tokens : LongTensor of shape (batch, seq)
        Word ids, ``[PAD]`` (0) after the end of each sentence.
    mask : BoolTensor of shape (batch, seq)
        True at real tokens (True = may attend).
    roles, numbers : LongTensor of shape (batch, seq)
        Role index into :data:`attnlib.tasks.corpus.ROLES` (-1 at padding); number 0 = sg,
        1 = pl, -1 = none.
    verb, subject, attractor : LongTensor of shape (batch,)
        Positions (attractor -1 when the sentence has none).
    label : LongTensor of shape (batch,)
        0 when the verb must be singular, 1 when plural.
    hard : BoolTensor of shape (batch,)
        An attractor of the other number stands in the sentence.
    words : list of tuple of str
        The surface words (with the real verb), for labelling plots.
    """

    tokens: torch.Tensor
    mask: torch.Tensor
    roles: torch.Tensor
    numbers: torch.Tensor
    verb: torch.Tensor
    subject: torch.Tensor
    attractor: torch.Tensor
    label: torch.Tensor
    hard: torch.Tensor
    words: list

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def subset(self, index) -> Encoded:
        """The sentences at ``index`` (a slice, bool mask or index tensor)."""
        idx = torch.arange(len(self))[index]
        fields = {k: getattr(self, k)[idx] for k in self.__dataclass_fields__ if k != "words"}
        return Encoded(**fields, words=[self.words[i] for i in idx.tolist()])


def encode(sentences: list[Sentence], max_len: int = CONFIG["max_len"]) -> Encoded:
    """Turn sentences into padded tensors (see :class:`Encoded`)."""
    max_len = check_int("encode", "max_len", max_len, minimum=1)
    vocab = _vocab()
    n = len(sentences)
    longest = max(len(s) for s in sentences)
    if longest > max_len:
        raise ValueError(f"encode: a sentence has {longest} tokens, max_len is {max_len}")
    # Filled as numpy arrays (element-wise writes into tensors are slow), then wrapped.
    tokens = np.zeros((n, max_len), dtype=np.int64)
    roles = np.full((n, max_len), -1, dtype=np.int64)
    numbers = np.full((n, max_len), -1, dtype=np.int64)
    num_id = {"sg": 0, "pl": 1, "-": -1}
    role_id = {r: i for i, r in enumerate(ROLES)}
    for i, s in enumerate(sentences):
        k = len(s)
        tokens[i, :k] = [vocab[w] for w in s.words]
        tokens[i, s.verb] = vocab["[V]"]
        roles[i, :k] = [role_id[r] for r in s.roles]
        numbers[i, :k] = [num_id[x] for x in s.numbers]
    tokens, roles, numbers = (torch.from_numpy(a) for a in (tokens, roles, numbers))
    return Encoded(
        tokens=tokens,
        mask=tokens != 0,
        roles=roles,
        numbers=numbers,
        verb=torch.tensor([s.verb for s in sentences]),
        subject=torch.tensor([s.subject for s in sentences]),
        attractor=torch.tensor([s.attractor for s in sentences]),
        label=torch.tensor([int(s.label == "pl") for s in sentences]),
        hard=torch.tensor([s.hard for s in sentences]),
        words=[s.words for s in sentences],
    )


def split(data: Encoded, n_train: int = N_TRAIN) -> tuple[Encoded, Encoded]:
    """The fixed train / held-out split: the first ``n_train`` sentences, and the rest."""
    return data.subset(slice(0, n_train)), data.subset(slice(n_train, None))


class SyntaxModel(nn.Module):
    """Embeddings, one self-attention layer, and one attention read-out from the verb.

    Parameters
    ----------
    vocab_size : int
    d_model : int
    n_heads : int
        Heads of the second layer (the one that is probed).
    n_heads_1 : int
        Heads of the first layer.
    max_len : int
    """

    def __init__(
        self,
        vocab_size: int = len(SPECIALS) + len(vocabulary()),
        d_model: int = CONFIG["d_model"],
        n_heads: int = CONFIG["n_heads"],
        n_heads_1: int = CONFIG["n_heads_1"],
        max_len: int = CONFIG["max_len"],
    ):
        super().__init__()
        fn = "SyntaxModel"
        vocab_size = check_int(fn, "vocab_size", vocab_size, minimum=1)
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        n_heads = check_int(fn, "n_heads", n_heads, minimum=1)
        n_heads_1 = check_int(fn, "n_heads_1", n_heads_1, minimum=1)
        max_len = check_int(fn, "max_len", max_len, minimum=1)
        for name, h in (("n_heads", n_heads), ("n_heads_1", n_heads_1)):
            if d_model % h:
                raise ValueError(f"SyntaxModel: d_model={d_model} not divisible by {name}={h}")
        self.d_model, self.n_heads, self.n_heads_1 = d_model, n_heads, n_heads_1
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.W_q1 = nn.Linear(d_model, d_model)
        self.W_k1 = nn.Linear(d_model, d_model)
        self.W_v1 = nn.Linear(d_model, d_model)
        self.W_o1 = nn.Linear(d_model, d_model)
        self.W_q2 = nn.Linear(d_model, d_model)
        self.W_k2 = nn.Linear(d_model, d_model)
        self.W_v2 = nn.Linear(d_model, d_model)
        self.W_o2 = nn.Linear(d_model, d_model)
        self.readout = nn.Linear(d_model, 2)

    def layer1(self, data: Encoded) -> torch.Tensor:
        """The contextual token vectors x1, shape (batch, seq, d_model)."""
        seq = data.tokens.shape[1]
        x0 = self.embed(data.tokens) + self.position(torch.arange(seq))  # (batch, seq, d_model)
        h = self.n_heads_1
        # each (batch, n_heads_1, seq, d_head)
        q, k, v = (split_heads(W(x0), h) for W in (self.W_q1, self.W_k1, self.W_v1))
        key_mask = data.mask[:, None, None, :]  # (batch, 1, 1, seq_k)
        out, _ = attend(q, k, v, key_mask)  # (batch, n_heads_1, seq, d_head)
        out = merge_heads(out)  # (batch, seq, d_model)
        return x0 + self.W_o1(out)

    def keys_values(self, data: Encoded) -> tuple[torch.Tensor, torch.Tensor]:
        """Second-layer keys and values, each of shape (batch, n_heads, seq, d_head)."""
        x1 = self.layer1(data)
        return split_heads(self.W_k2(x1), self.n_heads), split_heads(self.W_v2(x1), self.n_heads)

    def query(self) -> torch.Tensor:
        """The verb's second-layer query, shape (1, n_heads, 1, d_head).

        It is computed from the ``[V]`` embedding alone — no position, no context — so it
        is the same in every sentence: everything that makes the subject stand out has to
        be in the keys.
        """
        v_id = SPECIALS.index("[V]")
        x = self.embed.weight[v_id][None, None, :]  # (1, 1, d_model)
        return split_heads(self.W_q2(x), self.n_heads)  # (1, n_heads, 1, d_head)

    def forward(self, data: Encoded, *, keys=None, values=None):
        """Logits at the verb and the verb's second-layer attention weights.

        Parameters
        ----------
        data : Encoded
        keys, values : Tensor of shape (batch, n_heads, seq, d_head), optional
            Use these second-layer keys / values instead of the computed ones (for
            interventions: swap a key, patch a value).

        Returns
        -------
        logits : Tensor of shape (batch, 2)
            Scores for singular (0) and plural (1).
        weights : Tensor of shape (batch, n_heads, seq_k)
            How much the verb attends to each position, per head.
        """
        x1 = self.layer1(data)
        batch = x1.shape[0]
        q = self.query().expand(batch, -1, -1, -1)  # (batch, n_heads, 1, d_head)
        k = split_heads(self.W_k2(x1), self.n_heads) if keys is None else keys
        v = split_heads(self.W_v2(x1), self.n_heads) if values is None else values
        out, weights = attend(q, k, v, data.mask[:, None, None, :])  # (batch, n_heads, 1, d_head)
        out = merge_heads(out)[:, 0]  # (batch, d_model): the verb's one query position
        return self.readout(self.W_o2(out)), weights[:, :, 0, :]


def accuracy(model: SyntaxModel, data: Encoded) -> float:
    """Fraction of sentences whose verb number the model gets right."""
    with torch.no_grad():
        logits, _ = model(data)
    return float((logits.argmax(-1) == data.label).double().mean())


def train_model(
    steps: int = TRAIN_STEPS, seed: int = TRAIN_SEED, progress: bool = True, batch: int = 256
) -> tuple[SyntaxModel, History]:
    """Train a fresh :class:`SyntaxModel` on the training split of the shipped corpus.

    Returns the model (in eval mode) and the training :class:`attnlib.training.History`.
    """
    steps = check_int("train_model", "steps", steps, minimum=1)
    batch = check_int("train_model", "batch", batch, minimum=1)
    torch.manual_seed(seed)
    model = SyntaxModel()
    train_data, _ = split(encode(load_corpus(CORPUS_PATH)))
    gen = torch.Generator().manual_seed(seed)

    def step(i):
        idx = torch.randint(len(train_data), (batch,), generator=gen)
        part = train_data.subset(idx)
        logits, _ = model(part)
        loss = nn.functional.cross_entropy(logits, part.label)
        return loss, {"accuracy": float((logits.argmax(-1) == part.label).float().mean())}

    history = train(model.parameters(), step, steps=steps, lr=3e-3, progress=progress)
    return model.eval(), history


def write_log(history: History, path: str | Path) -> None:
    """The training log as tab-separated text: one line per step, numbers to 4 decimals."""
    lines = ["\t".join(LOG_COLUMNS)]
    for i, (loss, acc) in enumerate(zip(history["loss"], history["accuracy"], strict=True)):
        lines.append(f"{i}\t{float(loss):.4f}\t{float(acc):.4f}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def load_model(path: str | Path = WEIGHTS_PATH) -> SyntaxModel:
    """The trained model shipped in ``data/`` (see ``data/README.md`` to retrain it)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"load_model: {path} does not exist; train it with "
            "`python -m attnlib.tasks.syntax --train --out data/syntax_model.pt`"
        )
    model = SyntaxModel()
    model.load_state_dict(torch.load(path, weights_only=True))
    return model.eval()


def attention_on(weights: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Mean weight each head gives one position per sentence (e.g. the subject).

    Parameters
    ----------
    weights : Tensor of shape (batch, n_heads, seq_k)
        The verb's attention weights (from :meth:`SyntaxModel.forward`).
    positions : LongTensor of shape (batch,)
        One key position per sentence.

    Returns
    -------
    Tensor of shape (n_heads,)
    """
    if weights.ndim != 3 or positions.shape != weights.shape[:1]:
        raise ValueError(
            f"attention_on: weights must be (batch, n_heads, seq_k) and positions (batch,); "
            f"got {tuple(weights.shape)} and {tuple(positions.shape)}"
        )
    batch = torch.arange(weights.shape[0])
    return weights[batch, :, positions].mean(0)  # (n_heads,)


def per_token(x: torch.Tensor, data: Encoded) -> np.ndarray:
    """Second-layer keys or values of every real token, heads side by side.

    Parameters
    ----------
    x : Tensor of shape (batch, n_heads, seq, d_head)
    data : Encoded

    Returns
    -------
    ndarray of shape (n_tokens, n_heads * d_head), float64
        Rows in reading order (sentence by sentence); ``data.roles[data.mask]`` and
        ``data.numbers[data.mask]`` are the matching labels.
    """
    x = merge_heads(x.detach())  # (batch, seq, n_heads * d_head)
    return x[data.mask].double().numpy()


def swap_keys(model: SyntaxModel, data: Encoded, i, j) -> torch.Tensor:
    """Second-layer keys with the keys at positions ``i`` and ``j`` exchanged.

    ``i`` and ``j`` are LongTensors of shape (batch,): one position each per sentence
    (e.g. ``data.subject`` and ``data.attractor``). Returns keys of shape (batch, n_heads,
    seq, d_head), to pass as ``model(data, keys=...)``.
    """
    with torch.no_grad():
        keys, _ = model.keys_values(data)
    batch = torch.arange(len(data))
    swapped = keys.clone()
    swapped[batch, :, i] = keys[batch, :, j]
    swapped[batch, :, j] = keys[batch, :, i]
    return swapped


def patch_values(model: SyntaxModel, data: Encoded, donor: Encoded, positions) -> torch.Tensor:
    """Second-layer values of ``data`` with some positions taken from a ``donor`` run.

    ``donor`` is the same sentences with one change (e.g. the subject in the other number,
    :func:`attnlib.tasks.corpus.swap_subject_number`). ``positions`` is a LongTensor of shape
    (batch,) or a BoolTensor of shape (batch, seq) marking the positions to patch.
    Returns values of shape (batch, n_heads, seq, d_head), to pass as
    ``model(data, values=...)``.
    """
    if donor.tokens.shape != data.tokens.shape:
        raise ValueError(
            f"patch_values: donor tokens {tuple(donor.tokens.shape)} must match data "
            f"tokens {tuple(data.tokens.shape)}"
        )
    with torch.no_grad():
        _, values = model.keys_values(data)
        _, donor_values = model.keys_values(donor)
    if positions.dtype != torch.bool:
        where = torch.zeros_like(data.mask)
        where[torch.arange(len(data)), positions] = True
    else:
        where = positions
    where = where[:, None, :, None]  # (batch, 1, seq, 1)
    return torch.where(where, donor_values, values)


# ----------------------------------------------------------------------------------------
# Probes: least-squares linear classifiers, closed form, no training loop.
# ----------------------------------------------------------------------------------------


def _check_xy(fn: str, X, y) -> tuple[np.ndarray, np.ndarray]:
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
    if X.ndim != 2:
        raise ValueError(f"{fn}: X must be 2-D (n_samples, n_features), got shape {X.shape}")
    if y.shape != (X.shape[0],):
        raise ValueError(f"{fn}: y must have shape ({X.shape[0]},) to match X, got {y.shape}")
    return X, y


def fit_probe(X, y, n_classes: int) -> np.ndarray:
    """Fit a linear probe: least squares from ``[X, 1]`` to one-hot labels.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)
    y : int array of shape (n_samples,)
        Class labels in ``0 .. n_classes - 1``.
    n_classes : int

    Returns
    -------
    W : ndarray of shape (n_features + 1, n_classes)
        The last row is the bias.
    """
    n_classes = check_int("fit_probe", "n_classes", n_classes, minimum=1)
    X, y = _check_xy("fit_probe", X, y)
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(f"fit_probe: labels must lie in 0..{n_classes - 1}")
    Xb = np.hstack([X, np.ones((X.shape[0], 1))])  # (n_samples, n_features + 1)
    Y = np.eye(n_classes)[y]  # (n_samples, n_classes)
    W, *_ = np.linalg.lstsq(Xb, Y, rcond=None)
    return W


def probe_predict(W: np.ndarray, X) -> np.ndarray:
    """Predicted classes of a probe from :func:`fit_probe`, shape (n_samples,)."""
    X = np.asarray(X, dtype=np.float64)
    return (np.hstack([X, np.ones((X.shape[0], 1))]) @ W).argmax(-1)


def probe_accuracy(X_train, y_train, X_test, y_test) -> float:
    """Fit a probe on the training rows, return its accuracy on the test rows."""
    X_train, y_train = _check_xy("probe_accuracy", X_train, y_train)
    X_test, y_test = _check_xy("probe_accuracy", X_test, y_test)
    n_classes = int(max(y_train.max(), y_test.max())) + 1
    W = fit_probe(X_train, y_train, n_classes)
    return float((probe_predict(W, X_test) == y_test).mean())


def majority_baseline(groups_train, y_train, groups_test, y_test) -> float:
    """Accuracy of predicting, for each group (e.g. word type), its most common label.

    Groups unseen in training get the overall most common label.
    """
    groups_train, y_train = np.asarray(groups_train), np.asarray(y_train)
    overall = np.bincount(y_train).argmax()
    best = {}
    for g in np.unique(groups_train):
        best[g] = np.bincount(y_train[groups_train == g]).argmax()
    pred = np.array([best.get(g, overall) for g in np.asarray(groups_test)])
    return float((pred == np.asarray(y_test)).mean())


def _main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="train and save the weights")
    parser.add_argument("--out", default=str(WEIGHTS_PATH), help="where to save the weights")
    parser.add_argument("--steps", type=int, default=TRAIN_STEPS)
    parser.add_argument(
        "--log", default=None, help="where to write the training log (default: beside --out)"
    )
    args = parser.parse_args(argv)
    if not args.train:
        parser.error("nothing to do: pass --train")
    with torch_threads(1):  # the same arithmetic on every machine
        model, history = train_model(steps=args.steps)
        _, test = split(encode(load_corpus()))
        acc, hard = accuracy(model, test), accuracy(model, test.subset(test.hard))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out)
    log = Path(args.log) if args.log else Path(args.out).parent / LOG_PATH.name
    write_log(history, log)
    print(f"held-out accuracy {acc:.3f} (hard cases {hard:.3f}); saved {args.out} and {log}")
    assert math.isfinite(history.last("loss"))


if __name__ == "__main__":
    _main()
