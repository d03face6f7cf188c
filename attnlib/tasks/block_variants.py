"""What the parts of the block buy in training: four variants of the course's GPT (lesson 15).

The same :class:`attnlib.gpt.GPT` (:data:`CONFIG`: 6 blocks, d_model 64, context 128) is
trained as a character model of the plays (:mod:`attnlib.tasks.plays`' split: seven plays
train it, *The Tempest* is held out), once per :data:`VARIANTS` and peak learning rate
(:data:`LEARNING_RATES`; the eight runs are :data:`RUNS`):

* ``pre_ln`` — GPT-2's block: LayerNorm on what each sublayer reads, a final ``ln_f``;
* ``no_layernorm`` — no LayerNorm anywhere (``norm="none"``: no ``ln_1``, ``ln_2``, ``ln_f``);
* ``no_residual`` — GPT-2's block without its two additions (``residual=False``);
* ``post_ln`` — the 2017 Transformer's block, the stream normalised after each addition
  (``norm="post"``, no ``ln_f``).

Every run starts from GPT-2's initialisation with the same seed (the weights the variants
share are drawn equal), reads the same windows in the same order and follows the same
schedule (:data:`TRAINING`: Adam, linear warm-up, cosine decay, gradient clipping,
:func:`attnlib.tasks.plays.learning_rate`) to one of two peak rates: 1e-3, nanoGPT's for
its 6-layer character model (``config/train_shakespeare_char.py``), and 6e-3, the plays
model's (:data:`attnlib.tasks.plays.TRAINING`). One thread per run.

* :func:`train_variant` — one variant trained on one schedule: its log (training loss
  every step, validation loss on ``eval_windows`` windows of the held-out play every
  ``eval_every`` steps); :func:`train_run` — one run of :data:`RUNS`, both schedules;
* :func:`measure` — a trained model's validation loss on the whole held-out play and the
  spread of its attention scores in every block;
* :func:`write_log`, :func:`read_log`, :func:`write_results`, :func:`read_results` — the
  shipped files (``data/block_variants_log.tsv``, ``data/block_variants_short_log.tsv``,
  ``data/block_variants_results.tsv``); no weights are shipped: lesson 15 reads the curves.

Run ``python -m attnlib.tasks.block_variants --train`` to retrain the eight runs (two
processes of one thread each) and rewrite the three files (seeded; data/README.md states the
time).
"""

from __future__ import annotations

import copy
import functools
import multiprocessing
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from attnlib import __version__ as attnlib_version
from attnlib.core import scores, softmax
from attnlib.gpt import GPT
from attnlib.heads import split_heads
from attnlib.masks import causal_mask
from attnlib.tasks import plays
from attnlib.tasks.shipped import data_file, read_log_table, train_command
from attnlib.training import progress_bar, torch_threads

__all__ = [
    "CONFIG",
    "VARIANTS",
    "LABELS",
    "LEARNING_RATES",
    "RUNS",
    "TRAINING",
    "SHORT_TRAINING",
    "LOG_PATH",
    "SHORT_LOG_PATH",
    "RESULTS_PATH",
    "log_columns",
    "new_model",
    "train_variant",
    "train_run",
    "train_all",
    "measure",
    "write_log",
    "read_log",
    "write_results",
    "read_results",
]

# The model: attnlib.gpt.GPT's arguments but vocab_size (the corpus's 76 characters).
CONFIG = {"d_model": 64, "n_heads": 4, "n_layers": 6, "max_len": 128}
# The four variants: GPT's keyword arguments on top of CONFIG.
VARIANTS = {
    "pre_ln": {},
    "no_layernorm": {"norm": "none"},
    "no_residual": {"residual": False},
    "post_ln": {"norm": "post"},
}
LABELS = {
    "pre_ln": "pre-LN (GPT-2)",
    "no_layernorm": "no LayerNorm",
    "no_residual": "no residual path",
    "post_ln": "post-LN (2017)",
}
# The schedule of every run: 2000 steps of 16 windows of 129 characters. lr: the peak (one
# of LEARNING_RATES); warmup: steps of linear warm-up; final: the lr at the last step as a
# fraction of the peak (cosine in between); clip: the global gradient norm.
TRAINING = {
    "steps": 2000,
    "batch": 16,
    "lr": 1e-3,
    "warmup": 100,
    "final": 0.1,
    "clip": 1.0,
    "seed": 0,
    "eval_every": 50,
    "eval_windows": 64,  # the log's validation windows, evenly spaced in the held-out play
}
# The peak rates: nanoGPT's for its 6-layer character model, and the plays model's.
LEARNING_RATES = (1e-3, 6e-3)
# run name -> (variant, peak learning rate), e.g. "post_ln@0.006"
RUNS = {f"{v}@{lr:g}": (v, lr) for lr in LEARNING_RATES for v in VARIANTS}
# The shortened schedule `make test` retraces: the same models, code and data, 6 steps.
SHORT_TRAINING = {
    **TRAINING,
    **{"steps": 6, "batch": 2, "warmup": 3, "eval_every": 6, "eval_windows": 4},
}
SPREAD_WINDOWS = 8  # measure(): the windows the score spread is measured on

LOG_PATH = data_file("block_variants_log.tsv")
SHORT_LOG_PATH = data_file("block_variants_short_log.tsv")
RESULTS_PATH = data_file("block_variants_results.tsv")
TRAIN_COMMAND = "python -m attnlib.tasks.block_variants --train"
WORKERS = 2  # processes for the eight runs (each one thread): the numbers do not change


def log_columns(runs=tuple(RUNS)) -> tuple[str, ...]:
    """The log's header: ``step``, then ``loss/<run>`` and ``val_loss/<run>`` for every run
    (:data:`RUNS`)."""
    return ("step",) + tuple(f"{c}/{r}" for r in runs for c in ("loss", "val_loss"))


def _check_variant(fn: str, name) -> str:
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(f"{fn}: variant must be one of {list(VARIANTS)}, got {name!r}")
    return name


@functools.cache
def _tokens() -> tuple[torch.Tensor, torch.Tensor]:
    """The training plays and the held-out play as token ids (read once per process)."""
    return plays.training_tokens(), plays.validation_tokens()


def new_model(variant: str, vocab_size: int = 76, seed: int = TRAINING["seed"]) -> GPT:
    """A fresh variant of :data:`CONFIG` in GPT-2's initialisation, drawn after
    ``torch.manual_seed(seed)``: the four variants' shared weights come out equal."""
    _check_variant("new_model", variant)
    torch.manual_seed(seed)
    return GPT(vocab_size, **CONFIG, **VARIANTS[variant])


def train_variant(variant: str, training: dict = TRAINING, *, progress: bool = False):
    """Train one variant on the training plays.

    Each step takes ``batch`` windows of ``max_len + 1`` characters at random starts
    (:func:`attnlib.tasks.plays.training_batch`, a generator seeded with ``seed + 1``: the
    same windows for every variant) and minimises the
    mean next-character loss with Adam (β = 0.9, 0.95), the plays recipe's learning rate
    (:func:`attnlib.tasks.plays.learning_rate`) and gradient clipping. Every ``eval_every``
    steps, after the first and at the last, the validation loss on ``eval_windows`` evenly
    spaced windows of the held-out play. One thread. A loss that stops being finite ends the run
    (the rest of the log stays ``nan``).

    Parameters
    ----------
    variant : str
        A key of :data:`VARIANTS`.
    training : dict
        :data:`TRAINING` (the shipped run) or :data:`SHORT_TRAINING` (`make test`'s).
    progress : bool, default False

    Returns
    -------
    model : GPT (eval mode)
    rows : dict ``lr``, ``loss``, ``val_loss`` -> ndarray of shape (steps,)
    seconds : float
        Wall time of the training loop.
    """
    _check_variant("train_variant", variant)
    missing = {"steps", "batch", "lr", "warmup", "final", "clip", "seed", "eval_every"}
    missing |= {"eval_windows"}
    missing -= set(training)
    if missing:
        raise ValueError(f"train_variant: training lacks {sorted(missing)}")
    train_tokens, val = _tokens()
    seq = CONFIG["max_len"]
    eval_windows = plays.validation_windows(val, seq, training["eval_windows"])
    steps = training["steps"]
    rows = {c: np.full(steps, np.nan) for c in ("lr", "loss", "val_loss")}
    t0 = time.perf_counter()
    with torch_threads(1):
        model = new_model(variant, plays.vocabulary().size, training["seed"])
        opt = torch.optim.Adam(model.parameters(), lr=training["lr"], betas=(0.9, 0.95))
        gen = torch.Generator().manual_seed(training["seed"] + 1)
        model.train()
        with progress_bar(steps, LABELS[variant], progress) as bar:
            for i in range(steps):
                lr = plays.learning_rate(i, training)
                for group in opt.param_groups:
                    group["lr"] = lr
                # (batch, seq + 1): the inputs and their next-character targets
                x = plays.training_batch(train_tokens, training["batch"], seq, gen)
                logits = model(x[:, :-1])  # (batch, seq, vocab)
                loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
                rows["lr"][i], rows["loss"][i] = lr, loss.item()
                if not torch.isfinite(loss):
                    break
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), training["clip"])
                opt.step()
                if i == 0 or (i + 1) % training["eval_every"] == 0 or i == steps - 1:
                    rows["val_loss"][i] = plays.validation_loss(model, eval_windows)
                    model.train()
                bar.update(1)
    return model.eval(), rows, time.perf_counter() - t0


def measure(model: GPT) -> dict[str, float]:
    """What ``block_variants_results.tsv`` holds for a trained variant.

    ``val_loss``: the mean next-character loss (nats) on the whole held-out play in windows
    of ``max_len`` (:func:`attnlib.tasks.plays.validation_loss`); ``score_std/<block>``: the
    standard deviation of block ``block``'s scaled scores ``q·k/√d_head`` over the causal
    entries of :data:`SPREAD_WINDOWS` windows of the held-out play (float64; blocks from 1);
    ``peak_weight/<block>``: the mean over queries of their largest attention weight there.
    """
    val = _tokens()[1]
    out = {"val_loss": plays.validation_loss(model, plays.validation_windows(val, model.max_len))}
    tokens = plays.validation_windows(val, model.max_len - 1, SPREAD_WINDOWS)
    m = copy.deepcopy(model).double()
    reads = []  # what each block's attention reads: (batch, seq, d_model)
    hooks = [b.attn.register_forward_pre_hook(lambda mod, a: reads.append(a[0])) for b in m.h]
    causal = torch.as_tensor(causal_mask(tokens.shape[1]))  # (seq, seq), True = may attend
    with torch.no_grad(), torch_threads(1):
        m.eval()(tokens)
        for h in hooks:
            h.remove()
        for i, (block, x) in enumerate(zip(m.h, reads, strict=True)):
            q = split_heads(block.attn.W_q(x), m.n_heads)  # (batch, n_heads, seq, d_head)
            k = split_heads(block.attn.W_k(x), m.n_heads)
            s = scores(q, k)  # (batch, n_heads, seq, seq), divided by √d_head
            out[f"score_std/{i + 1}"] = float(s[..., causal].std())
            w = softmax(s, mask=causal)
            out[f"peak_weight/{i + 1}"] = float(w.amax(-1).mean())
    return out


# ----------------------------------------------------------------------------------------
# The shipped files.
# ----------------------------------------------------------------------------------------


def write_log(logs: dict[str, dict], path: str | Path) -> None:
    """The runs' logs (run name -> :func:`train_variant`'s rows) side by side as
    tab-separated text, one line per step (:func:`log_columns`): losses (nats) to 4
    decimals, ``nan`` where a run did not evaluate (or had stopped)."""
    runs = tuple(logs)
    steps = len(next(iter(logs.values()))["loss"])
    lines = ["\t".join(log_columns(runs))]
    for i in range(steps):
        vals = [str(i)]
        for r in runs:
            vals += [f"{float(logs[r][c][i]):.4f}" for c in ("loss", "val_loss")]
        lines.append("\t".join(vals))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_log(path: str | Path = LOG_PATH) -> dict[str, np.ndarray]:
    """A shipped log (default the full runs'; :data:`SHORT_LOG_PATH` for the short ones) as
    a dict of column name (:func:`log_columns`) -> array, one entry per step."""
    log = read_log_table(path, TRAIN_COMMAND, log_columns())
    log["step"] = log["step"].astype(int)
    return log


def write_results(results: dict[str, dict], provenance: dict[str, str], path) -> None:
    """``name<TAB>value`` lines: ``<run>/<measure>`` to 4 decimals (``train_seconds`` to
    1), then ``#``-lines of provenance (what made the file)."""
    lines = ["name\tvalue"]
    for r, res in results.items():
        for k, x in res.items():
            lines.append(f"{r}/{k}\t{x:.1f}" if k == "train_seconds" else f"{r}/{k}\t{x:.4f}")
    lines += [f"# {k}: {x}" for k, x in provenance.items()]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_results(path: str | Path = RESULTS_PATH) -> dict[str, dict[str, float]]:
    """The shipped measurements as ``{run: {measure: value}}`` (:func:`measure`, plus
    ``train_seconds``; runs as in :data:`RUNS`); the provenance lines are left out."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"read_results: {path} does not exist; run `{TRAIN_COMMAND}`")
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines[:1] != ["name\tvalue"]:
        raise ValueError(f"read_results: {path} does not start with the header 'name<TAB>value'")
    out: dict[str, dict[str, float]] = {}
    for ln in lines[1:]:
        if ln.startswith("#"):
            continue
        name, value = ln.split("\t")
        run, key = name.split("/", 1)
        out.setdefault(run, {})[key] = float(value)
    return out


def train_run(run: str, progress: bool = False) -> tuple[dict, dict, dict, float]:
    """One run of :data:`RUNS`: its short schedule's log, its full schedule's log, the
    trained model's :func:`measure` and the full training loop's seconds."""
    if run not in RUNS:
        raise ValueError(f"train_run: run must be one of {list(RUNS)}, got {run!r}")
    variant, lr = RUNS[run]
    _, short, _ = train_variant(variant, {**SHORT_TRAINING, "lr": lr}, progress=progress)
    model, rows, seconds = train_variant(variant, {**TRAINING, "lr": lr}, progress=progress)
    return short, rows, measure(model), seconds


def train_all(out: str | Path, progress: bool = False, workers: int = WORKERS) -> str:
    """Train every run of :data:`RUNS` (its short schedule, then its full one), write the
    three files into the folder ``out`` and return one line per run of what was measured."""
    from attnlib.tasks import block_variants  # the importable module, also under `python -m`

    out = Path(out)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        jobs = {r: pool.submit(block_variants.train_run, r, progress) for r in RUNS}
        done = {r: job.result() for r, job in jobs.items()}
    write_log({r: d[0] for r, d in done.items()}, out / SHORT_LOG_PATH.name)
    write_log({r: d[1] for r, d in done.items()}, out / LOG_PATH.name)
    results = {r: {**d[2], "train_seconds": d[3]} for r, d in done.items()}
    provenance = {
        "command": TRAIN_COMMAND,
        "attnlib": attnlib_version,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": f"1 per run, {workers} processes",
    }
    write_results(results, provenance, out / RESULTS_PATH.name)
    top = f"score_std/{CONFIG['n_layers']}"
    return "\n".join(
        f"{LABELS[RUNS[r][0]]}, peak lr {RUNS[r][1]:g}: validation loss {x['val_loss']:.4f} "
        f"nats, last block's score std {x[top]:.3g}, training loop {x['train_seconds']:.0f} s"
        for r, x in results.items()
    )


def _main(argv=None) -> None:
    train_command(
        argv, __doc__, "train the eight runs and save their logs", LOG_PATH.parent, train_all
    )


if __name__ == "__main__":
    _main()
