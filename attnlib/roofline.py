"""Decoding is reading memory: the bytes and FLOPs of a step, and a roofline (lesson 17).

A decoding step computes one new token per sequence. To do it, the model multiplies one
vector by every weight matrix once: two FLOPs (a multiply and an add) for each weight it
reads. It also reads the keys and values of every earlier position, once per step. So a
step does about one or two FLOPs per **byte** it reads from memory, while a CPU can do tens
of FLOPs in the time one byte arrives: the step waits for memory. Its time is about

    seconds ≈ bytes read / memory bandwidth        (the roofline's memory side)

Prefill (the prompt, ``n`` tokens at once) reads the same weights once for all ``n``
tokens, so its FLOPs per byte — its **arithmetic intensity** — grow with ``n`` until the
arithmetic, not the memory, sets its speed. That is why a prompt is read fast and an answer
is written slowly, and why keeping fewer keys (grouped-query attention, multi-query
attention, latent attention: lessons 10 and 14) makes a step *faster*, not only the cache
smaller: a step that reads fewer bytes waits less.

What is counted (a model's own work; small terms are left out and named):

* **bytes**: every parameter once (an embedding table included, though a step needs only
  its rows; in a model with tied embeddings the unembedding reads the whole table anyway),
  plus the keys and values of the ``seq_k`` positions attended to (:func:`kv_cache_bytes`);
  activations, a few times ``d_model`` numbers per token, are left out;
* **FLOPs**: ``2 ·`` (weights of every ``nn.Linear``) per token, plus the attention:
  ``2 · n_heads · (d_k + d_v)`` per query and key it sees (the scores ``q · k`` and the
  weighted sum of values); LayerNorm, softmax, biases and GELU, a few FLOPs per number of a
  token, are left out.

* :func:`weight_bytes`, :func:`cache_bytes_per_token` — the two kinds of bytes;
* :class:`StepCost`, :func:`step_cost`, :func:`decode_cost`, :func:`prefill_cost` — what
  a step (or a prefill) reads and computes, for an :class:`attnlib.gpt.GPT` or an
  :class:`attnlib.decoder.TinyDecoder` (with ``n_kv_heads`` key/value heads);
* :func:`arithmetic_intensity` — FLOPs per byte;
* :func:`measure_bandwidth` — this machine's memory bandwidth, by copying a large tensor;
* :func:`predict_step_seconds` — bytes / bandwidth, the roofline's prediction;
* :func:`time_decode_step` — the measured side: the fastest cached decoding step.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import torch
from torch import nn

from attnlib._validate import check_instance, check_int, check_number, type_name, validated
from attnlib.decoder import TinyDecoder
from attnlib.gpt import GPT
from attnlib.kv_cache import kv_cache_bytes

__all__ = [
    "weight_bytes",
    "cache_bytes_per_token",
    "StepCost",
    "step_cost",
    "decode_cost",
    "prefill_cost",
    "arithmetic_intensity",
    "measure_bandwidth",
    "predict_step_seconds",
    "time_decode_step",
]


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _check_dtype(fn: str, name: str, dtype) -> torch.dtype | None:
    if dtype is not None:
        check_instance(fn, name, dtype, torch.dtype, "a torch.dtype or None")
    return dtype


def _check_module(fn: str, model) -> nn.Module:
    return check_instance(fn, "model", model, nn.Module, "a torch nn.Module")


def weight_bytes(model: nn.Module, *, dtype: torch.dtype | None = None) -> int:
    """Bytes of a model's parameters, each tensor counted once (tied weights once).

    Parameters
    ----------
    model : nn.Module
    dtype : torch.dtype, optional
        Count every parameter at this dtype's size (e.g. ``torch.bfloat16``, 2 bytes)
        instead of its own.

    Returns
    -------
    nbytes : int

    Examples
    --------
    >>> from attnlib.gpt import GPT
    >>> model = GPT(vocab_size=10, d_model=8, n_heads=2, n_layers=1, max_len=16)
    >>> n_params = sum(p.numel() for p in model.parameters())   # wte and lm_head once
    >>> weight_bytes(model) == 4 * n_params                     # float32: 4 bytes a number
    True
    >>> weight_bytes(model, dtype=torch.bfloat16) == 2 * n_params
    True
    """
    fn = "weight_bytes"
    _check_module(fn, model)
    _check_dtype(fn, "dtype", dtype)
    return sum(
        p.numel() * (p.element_size() if dtype is None else _element_size(dtype))
        for p in model.parameters()  # parameters() yields a shared tensor once
    )


def cache_bytes_per_token(
    *,
    n_layers: int,
    n_kv_heads: int | None = None,
    d_k: int | None = None,
    d_v: int | None = None,
    d_latent: int | None = None,
    d_rope: int = 0,
    dtype: torch.dtype = torch.float32,
) -> int:
    """Bytes one more token adds to the cache of one sequence, over all layers.

    ``n_layers · n_kv_heads · (d_k + d_v) · bytes`` for multi-head attention
    (``n_kv_heads = n_heads``), grouped-query (fewer) and multi-query (one) attention;
    ``n_layers · (d_latent + d_rope) · bytes`` for latent attention. A decoding step reads
    this many bytes for every position it attends to.

    Parameters
    ----------
    n_layers : int
    n_kv_heads, d_k : int
        Key/value heads and key width; not with ``d_latent``.
    d_v : int, optional
        Value width, default ``d_k``.
    d_latent : int, optional
        Latent width of multi-head latent attention.
    d_rope : int, default 0
        The decoupled rotary key cached beside the latent.
    dtype : torch.dtype, default torch.float32

    Returns
    -------
    nbytes : int

    See Also
    --------
    attnlib.kv_cache.kv_cache_bytes : the same formula for a whole batch and sequence.

    Examples
    --------
    >>> mha = cache_bytes_per_token(n_layers=2, n_kv_heads=4, d_k=16)
    >>> mqa = cache_bytes_per_token(n_layers=2, n_kv_heads=1, d_k=16)
    >>> mha, mqa, cache_bytes_per_token(n_layers=2, d_latent=16, dtype=torch.bfloat16)
    (1024, 256, 64)
    """
    fn = "cache_bytes_per_token"
    check_int(fn, "n_layers", n_layers, minimum=1)
    check_instance(fn, "dtype", dtype, torch.dtype, "a torch.dtype")
    sizes = dict(n_kv_heads=n_kv_heads, d_k=d_k, d_v=d_v, d_latent=d_latent, d_rope=d_rope)
    try:
        return kv_cache_bytes(n_layers=n_layers, batch=1, seq=1, dtype=dtype, **sizes)
    except (TypeError, ValueError) as e:  # the same check, named by the door called
        raise type(e)(str(e).replace("kv_cache_bytes", fn, 1)) from None


class StepCost(NamedTuple):
    """What one forward step of a decoder reads and computes (see :func:`step_cost`)."""

    flops: int  # multiply-adds of the matrix products and the attention, ×2
    weight_bytes: int  # every parameter once
    cache_bytes: int  # keys and values of the seq_k positions attended to

    @property
    def nbytes(self) -> int:
        """Bytes read: weights plus cache."""
        return self.weight_bytes + self.cache_bytes

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte read."""
        return self.flops / self.nbytes


def _attention_shape(fn: str, model) -> tuple[int, int, int, int]:
    """``(n_layers, n_heads, n_kv_heads, d_head)`` of a GPT or a plain/grouped TinyDecoder."""
    if not isinstance(model, (GPT, TinyDecoder)):
        raise TypeError(
            f"{fn}: model must be an attnlib.gpt.GPT or an attnlib.decoder.TinyDecoder, got "
            f"{type_name(model)}"
        )
    if isinstance(model, TinyDecoder):
        options = {
            "d_latent": model.d_latent is not None,
            "window": model.window is not None,
            "kv_share": any(src != i for i, src in enumerate(model.kv_share)),
        }
        used = [name for name, on in options.items() if on]
        if used:
            raise ValueError(
                f"{fn}: model uses {', '.join(used)}; step_cost counts full and grouped "
                f"attention only (cache_bytes_per_token gives a latent cache's bytes)"
            )
    n_kv_heads = getattr(model, "n_kv_heads", model.n_heads)  # GPT: one K/V head per head
    return model.n_layers, model.n_heads, n_kv_heads, model.d_head


def step_cost(
    model: nn.Module,
    *,
    seq_k: int,
    n_new: int = 1,
    batch: int = 1,
    cache_dtype: torch.dtype | None = None,
    weight_dtype: torch.dtype | None = None,
) -> StepCost:
    """FLOPs and bytes of one forward step: ``n_new`` new tokens, ``seq_k`` positions in all.

    The new tokens are the last ``n_new`` of the ``seq_k`` positions, and each sees itself
    and every earlier position (causal): the new token at position ``p`` (counting from 0)
    attends to ``p + 1`` keys. With ``L`` layers, ``H`` query heads of width ``d_head``,
    ``P`` weights in linear maps (``lm_head`` included) and ``keys = Σ (p + 1)`` over the
    new positions:

        flops = batch · (2 · P · n_new + L · 2 · H · 2 · d_head · keys)
        bytes = weight_bytes(model) + batch · seq_k · cache_bytes_per_token(...)

    Parameters
    ----------
    model : attnlib.gpt.GPT or attnlib.decoder.TinyDecoder
        A TinyDecoder may have ``n_kv_heads < n_heads`` (grouped keys read fewer bytes, for
        the same FLOPs), but no latent attention, window or shared keys.
    seq_k : int >= 1
        Positions held after the step (the cache's length, new tokens included).
    n_new : int, default 1
        Tokens computed by this step, ``1 <= n_new <= seq_k``: 1 for a decoding step,
        ``seq_k`` for a prefill from an empty cache.
    batch : int, default 1
        Sequences stepped together: they share one read of the weights, each reads its own
        cache.
    cache_dtype, weight_dtype : torch.dtype, optional
        Bytes per number of the cache and of the weights; default the weights' own dtype.

    Returns
    -------
    StepCost
        ``(flops, weight_bytes, cache_bytes)``, with ``.nbytes`` and ``.intensity``.

    See Also
    --------
    decode_cost, prefill_cost : the two usual cases.

    Examples
    --------
    >>> from attnlib.gpt import GPT
    >>> model = GPT(vocab_size=10, d_model=8, n_heads=2, n_layers=1, max_len=16)
    >>> cost = step_cost(model, seq_k=5)
    >>> cost.flops == 2 * (12 * 8 * 8 + 10 * 8) + 2 * 2 * (4 + 4) * 5
    True
    >>> cost.cache_bytes                     # 5 positions · 2 heads · (4 + 4) numbers · 4 bytes
    320
    """
    return _step_cost("step_cost", model, seq_k, n_new, batch, cache_dtype, weight_dtype)


def _step_cost(fn, model, seq_k, n_new, batch, cache_dtype, weight_dtype) -> StepCost:
    """:func:`step_cost`, its arguments checked in the name of ``fn``."""
    n_layers, n_heads, n_kv_heads, d_head = _attention_shape(fn, model)
    seq_k = check_int(fn, "seq_k", seq_k, minimum=1)
    n_new = check_int(fn, "n_new", n_new, minimum=1)
    batch = check_int(fn, "batch", batch, minimum=1)
    if n_new > seq_k:
        raise ValueError(f"{fn}: n_new={n_new} new tokens cannot exceed seq_k={seq_k} positions")
    _check_dtype(fn, "cache_dtype", cache_dtype)
    _check_dtype(fn, "weight_dtype", weight_dtype)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    keys = n_new * seq_k - n_new * (n_new - 1) // 2  # Σ (p + 1), p = seq_k - n_new .. seq_k - 1
    attention = n_layers * 2 * n_heads * 2 * d_head * keys  # q · k and w · v of every head
    flops = batch * (2 * linear * n_new + attention)
    # Checked above: the counts below trust their inputs (one validation per public call).
    own = next(model.parameters()).dtype
    per_token = n_layers * n_kv_heads * 2 * d_head * _element_size(cache_dtype or own)  # K and V
    weights = sum(
        p.numel() * (p.element_size() if weight_dtype is None else _element_size(weight_dtype))
        for p in model.parameters()  # as weight_bytes counts them: a shared tensor once
    )
    return StepCost(flops, weights, batch * seq_k * per_token)


def decode_cost(
    model: nn.Module,
    seq_k: int,
    *,
    batch: int = 1,
    cache_dtype: torch.dtype | None = None,
    weight_dtype: torch.dtype | None = None,
) -> StepCost:
    """One decoding step: one new token per sequence, ``seq_k`` positions after it.

    :func:`step_cost` with ``n_new=1``.
    Its intensity stays near ``2 / bytes per weight`` (0.5 FLOP a byte in float32) however
    long the cache: both the FLOPs and the bytes of the attention grow with ``seq_k``.

    Examples
    --------
    >>> from attnlib.gpt import GPT
    >>> model = GPT(vocab_size=64, d_model=64, n_heads=4, n_layers=2, max_len=256)
    >>> [round(decode_cost(model, n).intensity, 2) for n in (1, 64, 256)]
    [0.42, 0.43, 0.45]
    """
    return _step_cost("decode_cost", model, seq_k, 1, batch, cache_dtype, weight_dtype)


def prefill_cost(
    model: nn.Module,
    n: int,
    *,
    batch: int = 1,
    cache_dtype: torch.dtype | None = None,
    weight_dtype: torch.dtype | None = None,
) -> StepCost:
    """A prefill: ``n`` prompt tokens at once into an empty cache (:func:`step_cost` with
    ``seq_k = n_new = n``). The weights are read once for all ``n`` tokens, so the intensity
    grows about ``n``-fold over a decoding step's.

    Examples
    --------
    >>> from attnlib.gpt import GPT
    >>> model = GPT(vocab_size=64, d_model=64, n_heads=4, n_layers=2, max_len=256)
    >>> [round(prefill_cost(model, n).intensity) for n in (1, 16, 256)]
    [0, 7, 93]
    """
    _attention_shape("prefill_cost", model)
    n = check_int("prefill_cost", "n", n, minimum=1)
    return _step_cost("prefill_cost", model, n, n, batch, cache_dtype, weight_dtype)


def arithmetic_intensity(flops, nbytes) -> float:
    """FLOPs per byte read from memory: ``flops / nbytes``.

    Below the machine's balance (its FLOPs per second / its bytes per second), a step
    waits for memory; above it, for arithmetic.

    Examples
    --------
    >>> arithmetic_intensity(2_000, 4_000)
    0.5
    """
    fn = "arithmetic_intensity"
    flops = check_number(fn, "flops", flops, minimum=0)
    nbytes = check_number(fn, "nbytes", nbytes, positive=True)
    return flops / nbytes


def measure_bandwidth(*, nbytes: int = 2**27, repeats: int = 5) -> float:
    """This machine's memory bandwidth (bytes/s), from copying a large float32 tensor.

    ``dst.copy_(src)`` reads ``nbytes`` and writes ``nbytes``: the bandwidth is
    ``2 · nbytes / seconds`` of the fastest of ``repeats`` copies (a busy machine only
    ever slows a copy down). Take ``nbytes`` well above the last-level cache (tens of MiB),
    or the copy measures the cache instead. It uses torch's threads
    (``torch.get_num_threads()``), as a model's step would.

    Parameters
    ----------
    nbytes : int, default 2**27 (128 MiB)
        Size of the tensor copied (rounded down to whole float32 numbers).
    repeats : int, default 5
        Timed copies, after one untimed copy.

    Returns
    -------
    bandwidth : float
        Bytes per second.

    Examples
    --------
    >>> bw = measure_bandwidth(nbytes=2**20, repeats=2)      # 1 MiB: this measures a cache
    >>> isinstance(bw, float) and bw > 0                      # bytes/s (GB/s: bw / 1e9)
    True
    """
    fn = "measure_bandwidth"
    nbytes = check_int(fn, "nbytes", nbytes, minimum=4)
    repeats = check_int(fn, "repeats", repeats, minimum=1)
    src = torch.ones(nbytes // 4)  # float32
    dst = torch.empty_like(src)
    dst.copy_(src)  # untimed: pages touched, caches warm
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / max(best, 1e-9)


def predict_step_seconds(nbytes, bandwidth) -> float:
    """The roofline's time for a memory-bound step: ``nbytes / bandwidth`` seconds.

    A lower bound: a step cannot be faster than reading its bytes once. What a small
    model adds on top (Python, launching each operation) makes the measured step slower;
    the ratio measured / predicted says how far from the memory roof it runs.

    Parameters
    ----------
    nbytes : number > 0
        Bytes the step reads (``StepCost.nbytes``).
    bandwidth : number > 0
        Bytes per second (:func:`measure_bandwidth`).

    Examples
    --------
    >>> predict_step_seconds(2e9, 10e9)
    0.2
    """
    fn = "predict_step_seconds"
    nbytes = check_number(fn, "nbytes", nbytes, positive=True)
    bandwidth = check_number(fn, "bandwidth", bandwidth, positive=True)
    return nbytes / bandwidth


def _check_time_decode_step(model, seq_k, *, batch=1, repeats=7) -> None:
    fn = "time_decode_step"
    if not isinstance(model, (GPT, TinyDecoder)):
        raise TypeError(
            f"{fn}: model must be an attnlib.gpt.GPT or an attnlib.decoder.TinyDecoder, got "
            f"{type_name(model)}"
        )
    check_int(fn, "seq_k", seq_k, minimum=2)
    if seq_k > model.max_len:
        raise ValueError(f"{fn}: seq_k={seq_k} exceeds the model's max_len={model.max_len}")
    check_int(fn, "batch", batch, minimum=1)
    check_int(fn, "repeats", repeats, minimum=1)


@validated(_check_time_decode_step)
@torch.no_grad()
def time_decode_step(model: nn.Module, seq_k: int, *, batch: int = 1, repeats: int = 7) -> float:
    """Seconds of one cached decoding step: the fastest of ``repeats`` (after 2 untimed).

    The caches are filled with ``seq_k - 1`` positions of random numbers (a step's time
    does not depend on what they hold), then each round appends position ``seq_k`` for
    every sequence of the batch and rewinds the caches, so that every round does the same
    work: the step :func:`decode_cost` counts. Run it under
    ``attnlib.training.torch_threads(1)`` for a number that does not depend on free cores.

    Parameters
    ----------
    model : attnlib.gpt.GPT or attnlib.decoder.TinyDecoder
        Latent layers (``d_latent``) included.
    seq_k : int, 2 <= seq_k <= model.max_len
        Positions attended to by the new token, itself included.
    batch : int, default 1
    repeats : int, default 7

    Returns
    -------
    seconds : float

    See Also
    --------
    predict_step_seconds : the roofline's time for the same step.

    Examples
    --------
    >>> model = GPT(vocab_size=10, d_model=16, n_heads=2, n_layers=1, max_len=32).eval()
    >>> 0 < time_decode_step(model, 32, repeats=2) < 1
    True
    """
    held = seq_k - 1
    caches = model.new_caches(batch, max_len=seq_k)
    gen = torch.Generator().manual_seed(0)
    dtype = next(model.parameters()).dtype
    for c in caches:
        if c is None:  # a layer that reads another layer's keys and values
            continue
        if hasattr(c, "d_latent"):  # attnlib.latent.LatentCache
            shapes = ((batch, held, c.d_latent), (batch, held, c.d_rope))
        else:
            shapes = ((batch, c.n_kv_heads, held, c.d_k), (batch, c.n_kv_heads, held, c.d_v))
        c.append(*(torch.randn(s, generator=gen, dtype=dtype) for s in shapes))
    token = torch.zeros(batch, 1, dtype=torch.long)

    best = float("inf")
    for round_ in range(2 + repeats):  # 2 untimed rounds first: memory touched, caches warm
        t0 = time.perf_counter()
        model(token, caches)
        if round_ >= 2:
            best = min(best, time.perf_counter() - t0)
        for c in caches:
            if c is not None:
                c.length = held  # rewind: the next round writes the same position
    return best
