"""``make bench`` / ``python -m kvstaff.bench``: the course's performance table.

Measured in one run, on this machine, printed as plain-text tables:

1. attention time — ``scaled_dot_product_attention`` (torch's fused kernel) vs
   :func:`attnlib.attend` (the explicit path in torch) vs the numpy path vs
   :func:`attnlib.blockwise.blockwise_attend`, batch 8 × heads 8 × d_k 64, seq 128–2048;
2. peak memory of the explicit and the blockwise path (numpy, traced with tracemalloc:
   deterministic), seq 512–4096;
3. decoding with and without the KV cache (tokens/s, speedup) at 256 and 1024 new tokens;
4. lesson 14's variants (full, grouped, latent, windowed, hybrid, top-k selected and shared
   keys): cache bytes per token and decoding tokens/s with each one's cache;
5. lesson 16's model of real text (the shipped plays model): greedy decoding with and
   without the cache, tokens/s and whether the characters are the same;
6. lesson 17, decoding is reading memory: the copy bandwidth, a decoding step against the
   roofline (bytes read / bandwidth) and prefill per token, for the plays model and a GPT
   too large for the CPU's caches; MHA, GQA, MQA and latent caches' step times;
7. lesson 17's paged cache (memory reserved for mixed lengths) and quantised caches (bytes
   per token, attention error, held-out loss at 8 and 4 bits);
8. lesson 17's FlexAttention, eager and compiled (compile time stated), against SDPA.

``--course`` also runs every lesson under strict nbval and reports the wall time and the
slowest lesson (minutes). ``--quick`` is a tiny configuration for tests (no compilation);
``--no-compile`` leaves out the compiled FlexAttention (tens of seconds per mask).

Timing rules (the machine may be shared): every figure is the median of several repeats;
variants compared in one row are run interleaved (A, B, A, B, ...) so their ratio is a
paired ratio, which is far steadier than absolute seconds.

The timing helper is :func:`attnlib.timing.median_times`, the one lessons 10 and 11 use.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from attnlib.timing import median_times, min_times
from attnlib.training import torch_threads
from kvstaff.lessons import course_root

__all__ = ["machine_info", "main"]


# ----------------------------------------------------------------------------------------
# Timing helpers.
# ----------------------------------------------------------------------------------------


def machine_info() -> str:
    cores = os.cpu_count()
    return (
        f"machine: {platform.machine()}, {cores} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), numpy {np.__version__}, "
        f"python {platform.python_version()}"
    )


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, sep, *body])


def _ms(t: float) -> str:
    return f"{t * 1e3:.1f}"


# ----------------------------------------------------------------------------------------
# 1. Attention time.
# ----------------------------------------------------------------------------------------


def _attention_fns(q, k, v, *, causal):
    from attnlib.blockwise import blockwise_attend
    from attnlib.core import attend

    return {
        "sdpa": functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
        "attend": functools.partial(attend, q, k, v, causal=causal),
        "blockwise": functools.partial(blockwise_attend, q, k, v, causal=causal),
    }


def _attention_row(seq: str, variant: str, t: dict[str, float]) -> list[str]:
    has_numpy = "numpy" in t
    return [
        seq,
        variant,
        _ms(t["sdpa"]),
        _ms(t["attend"]),
        _ms(t["blockwise"]),
        _ms(t["numpy"]) if has_numpy else "-",
        f"{t['attend'] / t['sdpa']:.2f}",
        f"{t['blockwise'] / t['attend']:.2f}",
        f"{t['numpy'] / t['sdpa']:.1f}" if has_numpy else "-",
    ]


def bench_attention(seqs, *, batch=8, heads=8, d_k=64, numpy_max=512, causal_at=(1024,)):
    from attnlib.core import attend

    rows = []
    gen = torch.Generator().manual_seed(0)
    for n in seqs:
        q, k, v = (torch.randn(batch, heads, n, d_k, generator=gen) for _ in range(3))
        repeats = 5 if n <= 256 else 3 if n <= 1024 else 2
        fns = _attention_fns(q, k, v, causal=False)
        if n <= numpy_max:
            qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
            fns["numpy"] = functools.partial(attend, qn, kn, vn)
        rows.append(_attention_row(str(n), "", median_times(fns, repeats=repeats)))
        if n in causal_at:
            t = median_times(_attention_fns(q, k, v, causal=True), repeats=repeats)
            rows.append(_attention_row(str(n), "causal", t))
        del q, k, v
    headers = [
        "seq",
        "mask",
        "sdpa ms",
        "attend ms",
        "blockwise ms",
        "numpy ms",
        "attend/sdpa",
        "blockwise/attend",
        "numpy/sdpa",
    ]
    title = f"Attention time, fp32, batch {batch} x heads {heads} x d_k {d_k} (median)"
    return title + "\n" + _table(headers, rows)


# ----------------------------------------------------------------------------------------
# 2. Peak memory: explicit vs blockwise (numpy + tracemalloc, deterministic).
# ----------------------------------------------------------------------------------------


def bench_memory(seqs, *, d_k=64):
    from attnlib.blockwise import blockwise_attend, explicit_attend, peak_bytes

    rows = []
    rng = np.random.default_rng(0)
    for n in seqs:
        q, k, v = (rng.standard_normal((1, n, d_k), dtype=np.float32) for _ in range(3))
        explicit = peak_bytes(explicit_attend, q, k, v)
        block = peak_bytes(blockwise_attend, q, k, v)
        floor = n * n * 4  # one fp32 score matrix: the least an explicit path must hold
        rows.append(
            [
                str(n),
                f"{explicit / 2**20:.1f}",
                f"{block / 2**20:.2f}",
                f"{explicit / block:.1f}",
                f"{floor / block:.1f}",
            ]
        )
    headers = ["seq", "explicit MiB", "blockwise MiB", "explicit/blockwise", "1 score matrix/bw"]
    title = (
        f"Peak memory per (batch, head), fp32, d_k {d_k}, 256 x 256 tiles "
        f"(numpy, tracemalloc; scales linearly with batch x heads)"
    )
    return title + "\n" + _table(headers, rows)


# ----------------------------------------------------------------------------------------
# 3. Decoding with and without the cache.
# ----------------------------------------------------------------------------------------

DECODER = {"vocab_size": 256, "d_model": 256, "n_heads": 8, "n_layers": 2}


def _decode_model(config, max_len):
    from attnlib.decoder import TinyDecoder

    torch.manual_seed(0)
    return TinyDecoder(**config, max_len=max_len).eval()


@torch.no_grad()
def bench_decoding(news, *, config=None, prompt_len=16, sample_above=256, samples=16):
    """Tokens/s with and without the cache. Without the cache, runs longer than
    ``sample_above`` new tokens are estimated: the cost of the step at length T is a
    forward pass over T tokens, timed at ``samples`` evenly spaced T and interpolated."""
    from attnlib.decoder import generate

    config = dict(DECODER if config is None else config)
    rows = []
    model = _decode_model(config, prompt_len + max(news))
    prompt = torch.randint(0, config["vocab_size"], (1, prompt_len), generator=None)
    with torch_threads(1):
        for n in news:
            if n <= sample_above:
                t = median_times(
                    {
                        "cache": functools.partial(generate, model, prompt, n, use_cache=True),
                        "full": functools.partial(generate, model, prompt, n, use_cache=False),
                    },
                    repeats=2,
                    warmup=0,
                )
                t_cache, t_full, how = t["cache"], t["full"], "measured"
                a = generate(model, prompt, n, use_cache=True).tokens
                b = generate(model, prompt, n, use_cache=False).tokens
                same = "yes" if torch.equal(a, b) else "NO"
            else:
                t_cache = median_times(
                    {"cache": functools.partial(generate, model, prompt, n, use_cache=True)},
                    repeats=1,
                    warmup=0,
                )["cache"]
                lengths = np.linspace(prompt_len, prompt_len + n - 1, samples).round().astype(int)
                gen = torch.Generator().manual_seed(1)
                per_step = []
                for T in lengths:
                    toks = torch.randint(0, config["vocab_size"], (1, int(T)), generator=gen)
                    per_step.append(
                        median_times({"f": functools.partial(model, toks)}, repeats=3)["f"]
                    )
                all_T = np.arange(prompt_len, prompt_len + n)
                t_full = float(np.interp(all_T, lengths, per_step).sum())
                how, same = f"full: {samples} sampled steps", "-"
            rows.append(
                [
                    str(n),
                    f"{n / t_cache:.0f}",
                    f"{n / t_full:.1f}",
                    f"{t_full / t_cache:.1f}",
                    same,
                    how,
                ]
            )
    headers = ["new tokens", "cache tok/s", "no cache tok/s", "speedup", "same tokens", "how"]
    title = (
        f"Greedy decoding, TinyDecoder d_model {config['d_model']}, {config['n_heads']} heads, "
        f"{config['n_layers']} layers, batch 1, prompt {prompt_len}, 1 torch thread"
    )
    return title + "\n" + _table(headers, rows)


# ----------------------------------------------------------------------------------------
# 4. Fewer keys to keep (lesson 14): cache bytes and decoding speed of each variant.
# ----------------------------------------------------------------------------------------

# Lesson 14's variants at the decoder's size: the same kinds of keys as the trained task
# (attnlib.tasks.recall.VARIANTS), with sizes scaled to d_model 256 (8 heads of 32).
FEWER_KEYS_SIZES = {
    "gqa": {"n_kv_heads": 2},
    "latent_large": {"d_latent": 128},
    "latent_small": {"d_latent": 16},
    "window": {"window": 64},
    "hybrid": {"window": 64},
    "topk": {"top_k": 64, "n_index_heads": 4, "d_index": 16},
}


def fewer_keys_variants(sizes=None) -> list:
    """The lesson-14 variants (:class:`attnlib.tasks.recall.Variant`) resized for the bench."""
    import dataclasses

    from attnlib.tasks.recall import VARIANTS

    sizes = FEWER_KEYS_SIZES if sizes is None else sizes
    out = []
    for name, v in VARIANTS.items():
        v = dataclasses.replace(v, **sizes.get(name, {}))
        label = {
            "gqa": f"GQA, {v.n_kv_heads} KV heads",
            "latent_large": f"latent, {v.d_latent} numbers",
            "latent_small": f"latent, {v.d_latent} numbers",
            "window": f"window {v.window}",
            "hybrid": f"window {v.window} + 1 global",
            "topk": f"top-{v.top_k} selection",
        }.get(name, v.label)
        out.append(dataclasses.replace(v, label=label))
    return out


@torch.no_grad()
def bench_fewer_keys(new_tokens, *, config=None, prompt_len=16, sizes=None, repeats=2):
    """Greedy decoding with each variant's cache: cache bytes per token after the whole
    run (the formula, and the bytes the caches actually hold) and tokens/s, on
    :class:`attnlib.tasks.recall.RecallModel` at the decoder's sizes (untrained: the
    speed and the memory do not depend on the weights). Variants are timed interleaved."""
    from attnlib.decoder import generate
    from attnlib.tasks.recall import RecallModel

    config = dict(DECODER if config is None else config)
    seq = prompt_len + new_tokens
    dims = {
        "vocab": config["vocab_size"],
        "d_model": config["d_model"],
        "n_heads": config["n_heads"],
        "n_layers": config["n_layers"],
        "max_len": seq,
    }
    variants = fewer_keys_variants(sizes)
    models = {}
    for v in variants:
        torch.manual_seed(0)
        models[v.name] = RecallModel(v, **dims).eval()
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, config["vocab_size"], (1, prompt_len), generator=gen)
    with torch_threads(1):
        t = median_times(
            {n: functools.partial(generate, m, prompt, new_tokens) for n, m in models.items()},
            repeats=repeats,
            warmup=1,
        )
    rows = []
    for v in variants:
        m = models[v.name]
        caches = generate(m, prompt, new_tokens).caches
        held = sum(c.nbytes for c in caches if c is not None)
        formula = m.cache_bytes(seq)
        rows.append(
            [
                v.label,
                f"{formula / seq:.0f}",
                f"{held / seq:.0f}",
                f"{formula / models['mha'].cache_bytes(seq):.3f}",
                f"{new_tokens / t[v.name]:.0f}",
                f"{t['mha'] / t[v.name]:.2f}",
            ]
        )
    headers = ["variant", "cache B/token", "held B/token", "cache / MHA", "tok/s", "speed / MHA"]
    title = (
        f"Fewer keys to keep (lesson 14): greedy decoding of {new_tokens} tokens after a "
        f"prompt of {prompt_len} with each variant's cache, attention-only decoder d_model "
        f"{config['d_model']}, {config['n_heads']} heads, {config['n_layers']} layers, fp32, "
        f"batch 1, 1 torch thread; cache bytes per token after {seq} tokens"
    )
    return title + "\n" + _table(headers, rows)


# ----------------------------------------------------------------------------------------
# 5. The model of real text (lesson 16).
# ----------------------------------------------------------------------------------------


@torch.no_grad()
def bench_plays(news, *, prompt_text="MIRANDA.\n", repeats=3):
    """Tokens/s of the shipped plays model (:func:`attnlib.tasks.plays.load_model`) decoding
    greedily with and without the cache, interleaved, for each number of new characters."""
    from attnlib.decoder import generate
    from attnlib.tasks import plays

    model, vocab = plays.load_model(), plays.vocabulary()
    prompt = vocab.encode(prompt_text)[None]  # (1, prompt_len)
    rows = []
    with torch_threads(1):
        for n in news:
            t = median_times(
                {
                    "cache": functools.partial(generate, model, prompt, n, use_cache=True),
                    "full": functools.partial(generate, model, prompt, n, use_cache=False),
                },
                repeats=repeats,
                warmup=1,
            )
            a = generate(model, prompt, n, use_cache=True).tokens
            b = generate(model, prompt, n, use_cache=False).tokens
            rows.append(
                [
                    str(n),
                    f"{n / t['cache']:.0f}",
                    f"{n / t['full']:.0f}",
                    f"{t['full'] / t['cache']:.1f}",
                    "yes" if torch.equal(a, b) else "NO",
                ]
            )
    headers = ["new characters", "cache tok/s", "no cache tok/s", "speedup", "same characters"]
    n_params = sum(p.numel() for p in model.parameters())
    title = (
        f"The model of real text (lesson 16): the shipped plays model ({model.n_layers} blocks, "
        f"{model.n_heads} heads, d_model {model.d_model}, {n_params:,} parameters), greedy "
        f"decoding after {prompt.shape[1]} characters, batch 1, 1 torch thread"
    )
    return title + "\n" + _table(headers, rows)


# ----------------------------------------------------------------------------------------
# 6. Decoding is reading memory (lesson 17): the roofline, prefill against decode, and
#    fewer key/value heads.
# ----------------------------------------------------------------------------------------

# A GPT large enough that its weights (78 MB in float32) do not fit in the CPU's caches, as
# a served model's never do; the plays model (0.5 MB) fits in the L2 cache.
SERVING_GPT = {"vocab_size": 256, "d_model": 512, "n_heads": 8, "n_layers": 6, "max_len": 1024}
# TinyDecoder (it has n_kv_heads and d_latent) at the same width, a batch of long caches.
KV_HEADS_DECODER = {"vocab_size": 256, "d_model": 512, "n_heads": 8, "n_layers": 4}
KV_HEADS_VARIANTS = {
    "MHA": {},
    "GQA": {"n_kv_heads": 2},
    "MQA": {"n_kv_heads": 1},
    "latent 64": {"d_latent": 64},
}


def copy_bandwidth(nbytes: int = 2**27, repeats: int = 5) -> float:
    """Bytes/s of a tensor copy on one torch thread (the decoding timings' thread)."""
    from attnlib.roofline import measure_bandwidth

    with torch_threads(1):
        return measure_bandwidth(nbytes=nbytes, repeats=repeats)


@torch.no_grad()
def bench_roofline(lengths, *, serving=None, bandwidth=None, repeats=15, prefill_repeats=3):
    """For the plays model and a serving-size GPT, at each cache length ``seq_k``: the
    bytes a decoding step reads, the roofline's time (bytes / copy bandwidth), the measured
    step (fastest of ``repeats``), and a prefill of ``seq_k`` tokens per token.
    ``lengths``: {"plays": (...), "serving": (...)}."""
    from attnlib.gpt import GPT
    from attnlib.roofline import decode_cost, predict_step_seconds, time_decode_step
    from attnlib.tasks import plays

    bandwidth = copy_bandwidth() if bandwidth is None else bandwidth
    torch.manual_seed(0)
    models = {"plays": plays.load_model(), "serving": GPT(**(serving or SERVING_GPT)).eval()}
    rows = []
    with torch_threads(1):
        for name, model in models.items():
            for n in lengths[name]:
                cost = decode_cost(model, n)
                step = time_decode_step(model, n, repeats=repeats)
                tokens = torch.zeros(1, n, dtype=torch.long)
                prefill = min_times(
                    {"p": functools.partial(model, tokens)}, repeats=prefill_repeats, warmup=1
                )["p"]
                predicted = predict_step_seconds(cost.nbytes, bandwidth)
                read = [f"{cost.nbytes / 1e6:.2f}", f"{cost.cache_bytes / cost.nbytes:.2f}"]
                ms = [f"{x * 1e3:.3f}" for x in (predicted, step)]
                ratios = [f"{step / predicted:.1f}", f"{prefill / n * 1e3:.3f}"]
                ratios.append(f"{step / (prefill / n):.1f}")
                rows.append([name, str(n), *read, f"{cost.intensity:.2f}", *ms, *ratios])
    headers = ["model", "seq_k", "MB read", "cache share", "FLOP/B", "roofline ms"]
    headers += ["decode ms", "decode/roofline", "prefill ms/token", "decode/prefill"]
    sizes = {k: f"{sum(p.numel() for p in m.parameters()):,}" for k, m in models.items()}
    s = serving or SERVING_GPT
    title = (
        f"Decoding is reading memory (lesson 17): copy bandwidth {bandwidth / 1e9:.1f} GB/s "
        f"(1 torch thread, fastest copy). One cached decoding step (batch 1, fastest of "
        f"{repeats}) against the roofline (bytes read / bandwidth), and a prefill of seq_k "
        f"tokens per token (fastest of {prefill_repeats}); fp32, 1 torch thread. plays: the "
        f"shipped model ({sizes['plays']} parameters, fits in the L2 cache); serving: a GPT "
        f"d_model {s['d_model']}, {s['n_heads']} heads, {s['n_layers']} layers "
        f"({sizes['serving']} parameters, untrained)"
    )
    return title + "\n" + _table(headers, rows)


@torch.no_grad()
def bench_kv_heads(seq_k, *, batch=8, config=None, variants=None, bandwidth=None, repeats=7):
    """One cached decoding step of a batch of ``seq_k``-long caches, with ``n_kv_heads`` key
    /value heads (MHA, GQA, MQA) and with a latent cache: measured against the roofline."""
    from attnlib.decoder import TinyDecoder
    from attnlib.roofline import (
        cache_bytes_per_token,
        predict_step_seconds,
        time_decode_step,
        weight_bytes,
    )

    config = dict(KV_HEADS_DECODER if config is None else config)
    n_heads = config["n_heads"]
    variants = variants or KV_HEADS_VARIANTS
    bandwidth = copy_bandwidth() if bandwidth is None else bandwidth
    rows, times = [], {}
    with torch_threads(1):
        for label, extra in variants.items():
            torch.manual_seed(0)
            model = TinyDecoder(**config, **extra, max_len=seq_k).eval()
            times[label] = time_decode_step(model, seq_k, batch=batch, repeats=repeats)
            if "d_latent" in extra:
                shape = {"d_latent": extra["d_latent"]}
            else:
                shape = {"n_kv_heads": model.n_kv_heads, "d_k": model.d_head}
            cache = cache_bytes_per_token(n_layers=model.n_layers, **shape) * batch * seq_k
            nbytes = weight_bytes(model) + cache
            predicted = predict_step_seconds(nbytes, bandwidth)
            kv = "-" if "d_latent" in extra else str(extra.get("n_kv_heads", n_heads))
            mib = [f"{cache / 2**20:.3g}", f"{nbytes / 2**20:.3g}"]
            ms = [f"{predicted * 1e3:.3g}", f"{times[label] * 1e3:.3g}"]
            rows.append([label, kv, *mib, *ms, f"{times[label] / predicted:.1f}"])
    first = next(iter(times))
    for row, label in zip(rows, times, strict=True):
        row.append(f"{times[first] / times[label]:.2f}")
    headers = ["variant", "KV heads", "cache MiB", "MiB read", "roofline ms", "step ms"]
    headers += ["step/roofline", f"speed / {first}"]
    title = (
        f"Fewer key/value heads make a step faster: one cached decoding step (fastest of "
        f"{repeats}), batch {batch}, seq_k {seq_k}, TinyDecoder d_model {config['d_model']}, "
        f"{n_heads} query heads, {config['n_layers']} layers (untrained), fp32, 1 torch "
        f"thread (SDPA with enable_gqa; the latent layer rebuilds keys and values from the "
        f"latents at every step: its cache is small, its FLOPs are not)"
    )
    return title + "\n" + _table(headers, rows)


# ----------------------------------------------------------------------------------------
# 7. Paged and quantised caches (lesson 17).
# ----------------------------------------------------------------------------------------

PAGED_LENGTHS = (37, 250, 40, 128, 64, 201, 45, 90)  # a batch of answers of mixed lengths


def bench_paged(lengths=PAGED_LENGTHS, *, page_size=16, max_len=256, shared_prefix=32):
    """Memory reserved for a batch of sequences of mixed lengths at the plays model's
    shape: contiguous rows of ``max_len`` against pages (the formula, and the bytes a
    :class:`attnlib.paged_cache.PagedKVCache` actually reserves after the same appends)."""
    from attnlib.paged_cache import PagedKVCache, compare_reserved_bytes
    from attnlib.tasks.plays import CONFIG

    n_layers, n_kv = CONFIG["n_layers"], CONFIG["n_heads"]
    d_k = CONFIG["d_model"] // n_kv
    rows = []
    for prefix in (0, shared_prefix):
        shape = dict(page_size=page_size, n_kv_heads=n_kv, d_k=d_k, max_len=max_len)
        m = compare_reserved_bytes(list(lengths), **shape, shared_prefix=prefix)
        cache = PagedKVCache(sum(-(-n // page_size) for n in lengths), page_size, n_kv, d_k)
        if prefix:  # the prompt, written once by sequence 0 and forked to the others
            cache.append(0, *(torch.zeros(n_kv, prefix, d_k),) * 2)
            for i in range(1, len(lengths)):
                cache.fork(0, i)
        for i, n in enumerate(lengths):  # each sequence's own tokens (keys, values)
            cache.append(i, *(torch.zeros(n_kv, n - prefix, d_k),) * 2)
        kib = [f"{n_layers * b / 2**10:.0f}" for b in (m.used, m.contiguous, m.paged)]
        same = "yes" if cache.reserved_bytes == m.paged else "NO"
        ratios = [f"{m.contiguous / m.used:.2f}", f"{m.paged / m.used:.2f}"]
        rows.append([f"shared prompt {prefix}" if prefix else "no prompt", *kib, *ratios, same])
    headers = ["batch", "used KiB", "contiguous KiB", "paged KiB", "contiguous/used"]
    headers += ["paged/used", "cache = formula"]
    title = (
        f"A paged cache (lesson 17): {len(lengths)} sequences of lengths "
        f"{', '.join(map(str, lengths))}, contiguous rows of {max_len} positions against "
        f"pages of {page_size}, plays model's shape ({n_layers} layers x {n_kv} KV heads x "
        f"d_k {d_k}, fp32)"
    )
    return title + "\n" + _table(headers, rows)


QUANT_VARIANTS = (  # (label, bits, key axis, value axis); None: the float cache
    ("float32", None, None, None),
    ("int8, K/channel V/token", 8, "channel", "token"),
    ("int4, K/channel V/token", 4, "channel", "token"),
    ("int4, K/token V/token", 4, "token", "token"),
)


@torch.no_grad()
def bench_quant(*, windows=8, length=256, group=32):
    """The plays model with each quantised cache on ``windows`` held-out windows: bytes per
    token, the relative error of each layer's attention output (same input, float cache
    against quantised) and the held-out loss of a prefill through the quantised caches."""
    from attnlib.kv_cache import KVCache
    from attnlib.quant_cache import QuantKVCache
    from attnlib.tasks import plays

    model = plays.load_model()
    w = plays.validation_windows(plays.validation_tokens(), length, n=windows)
    tokens, targets = w[:, :-1], w[:, 1:]  # (windows, length)
    inputs = []
    hooks = [b.attn.register_forward_pre_hook(lambda m, a: inputs.append(a[0])) for b in model.h]
    model(tokens)
    for h in hooks:
        h.remove()
    shape = (windows, model.n_heads)

    def new_cache(bits, k_axis, v_axis):
        if bits is None:
            return KVCache(*shape, d_k=model.d_head, max_len=length)
        axes = dict(key_axis=k_axis, value_axis=v_axis, group=group, max_len=length)
        return QuantKVCache(*shape, d_k=model.d_head, bits=bits, **axes)

    pairs = zip(model.h, inputs, strict=True)
    reference = [b.attn(x, new_cache(None, None, None)) for b, x in pairs]
    rows, float_loss, float_held = [], None, None
    for label, *how in QUANT_VARIANTS:
        errors = []
        for b, x, ref in zip(model.h, inputs, reference, strict=True):
            out = b.attn(x, new_cache(*how))
            errors.append(float((out - ref).norm() / ref.norm()))
        caches = [new_cache(*how) for _ in model.h]
        logits = model(tokens, caches)
        loss = float(F.cross_entropy(logits.flatten(0, 1), targets.flatten()))
        held = sum(getattr(c, "used_bytes", c.nbytes) for c in caches) / (windows * length)
        float_loss, float_held = float_loss or loss, float_held or held  # the first row's
        error, dloss = f"{max(errors):.1e}", f"{loss - float_loss:+.4f}"
        rows.append([label, f"{held:.0f}", f"{held / float_held:.3f}", error, f"{loss:.4f}", dloss])
    headers = ["cache", "B/token", "vs float", "attn rel. error (max layer)", "loss", "d loss"]
    title = (
        f"A quantised cache (lesson 17): the plays model on {windows} held-out windows of "
        f"{length} characters; bytes per token over its {model.n_layers} layers (codes, "
        f"scales and zero points; per channel in groups of {group} tokens), each layer's "
        f"attention output against the float cache's (same input, ||out - ref|| / ||ref||), "
        f"held-out loss (nats) of a prefill through the caches"
    )
    return title + "\n" + _table(headers, rows)


# ----------------------------------------------------------------------------------------
# 8. Masks as functions: FlexAttention eager and compiled against SDPA (lesson 17).
# ----------------------------------------------------------------------------------------


@torch.no_grad()
def bench_flex(
    seq=1024, *, batch=1, heads=4, d_k=64, window=128, n_docs=4, compile=True, repeats=5
):
    """SDPA with the mask as a matrix, ``flex_attention`` eager (:func:`attnlib.flex.
    flex_attend`) and compiled (``torch.compile(flex_attention, dynamic=False)``, compiled
    once per mask, its compile time stated), for causal, sliding-window and document masks.
    A failed compilation is printed and the table goes on."""
    from torch.nn.attention.flex_attention import flex_attention

    from attnlib import flex as FX

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, d_k, generator=gen) for _ in range(3))
    docs = [seq // n_docs] * (n_docs - 1) + [seq - (n_docs - 1) * (seq // n_docs)]
    masks = {
        "causal": FX.causal_mask_mod(),
        f"window {window}": FX.sliding_window_mask_mod(window),
        f"{n_docs} documents": FX.document_mask_mod(FX.document_ids(docs)),
    }
    rows, notes = [], []
    for label, mask_mod in masks.items():
        block_mask = FX.build_block_mask(mask_mod, seq)
        dense = FX.dense_mask(mask_mod, seq)  # (seq, seq), True = may attend
        fns = {
            "sdpa": functools.partial(F.scaled_dot_product_attention, q, k, v, attn_mask=dense),
            "eager": functools.partial(FX.flex_attend, q, k, v, block_mask=block_mask),
        }
        compile_s, err = "-", "-"
        if compile:
            try:
                compiled = torch.compile(flex_attention, dynamic=False)
                t0 = time.perf_counter()
                out = compiled(q, k, v, block_mask=block_mask)
                compile_s = f"{time.perf_counter() - t0:.1f}"
                ref = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
                err = f"{float((out - ref).abs().max()):.1e}"
                fns["compiled"] = functools.partial(compiled, q, k, v, block_mask=block_mask)
            except Exception as e:  # noqa: BLE001 - the bench reports it and goes on
                notes.append(f"  {label}: compilation failed: {type(e).__name__}: {e}"[:300])
        t = min_times(fns, repeats=repeats, warmup=1)
        tiles = FX.tile_counts(block_mask)
        has = "compiled" in t
        ms = [_ms(t["sdpa"]), _ms(t["eager"]), _ms(t["compiled"]) if has else "-"]
        ratios = [f"{t['eager'] / t['sdpa']:.1f}"]
        ratios.append(f"{t['compiled'] / t['sdpa']:.2f}" if has else "-")
        rows.append([label, f"{tiles.skipped / tiles.total:.2f}", *ms, *ratios, compile_s, err])
    headers = ["mask", "tiles skipped", "sdpa ms", "flex eager ms", "flex compiled ms"]
    headers += ["eager/sdpa", "compiled/sdpa", "compile s", "max |compiled - sdpa|"]
    title = (
        f"Masks as functions (lesson 17): FlexAttention eager (the reference path: every "
        f"score) and compiled (skips empty 128 x 128 tiles) against SDPA with the mask as a "
        f"matrix; batch {batch} x heads {heads} x seq {seq} x d_k {d_k}, fp32, fastest of "
        f"{repeats}, {torch.get_num_threads()} torch threads. Kept small: compiling takes "
        f"tens of seconds per mask on a CPU (compile s: the first call, cold or from "
        f"inductor's cache)"
    )
    return "\n".join([title, _table(headers, rows), *notes])


# ----------------------------------------------------------------------------------------
# 9. The course under strict nbval (optional).
# ----------------------------------------------------------------------------------------


def bench_course(root: Path) -> str:
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile"]
    cmd += ["--durations=0", "-p", "no:randomly", "notebooks"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    per_nb: dict[str, float] = {}
    for m in re.finditer(r"^\s*([\d.]+)s \w+\s+(notebooks/[\w.]+\.ipynb)", proc.stdout, re.M):
        per_nb[m.group(2)] = per_nb.get(m.group(2), 0.0) + float(m.group(1))
    status = "passed" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
    lines = [f"Course under strict nbval (-n 2 --dist loadfile): {wall:.1f} s wall, {status}"]
    for nb, t in sorted(per_nb.items(), key=lambda kv: -kv[1])[:5]:
        lines.append(f"  {t:6.1f} s  {nb}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvstaff.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    parser.add_argument("--course", action="store_true", help="also time every lesson")
    parser.add_argument("--no-compile", action="store_true", help="no compiled FlexAttention")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    print(machine_info(), flush=True)
    print(flush=True)
    if args.quick:
        print(bench_attention((64, 128), batch=2, heads=2, numpy_max=128, causal_at=(128,)))
        print()
        print(bench_memory((256, 512)))
        print()
        config = {"vocab_size": 32, "d_model": 32, "n_heads": 4, "n_layers": 1}
        print(bench_decoding((8, 24), config=config, prompt_len=4, sample_above=8, samples=4))
        print()
        sizes = {"latent_large": {"d_latent": 8}, "latent_small": {"d_latent": 2}}
        sizes |= {"window": {"window": 4}, "hybrid": {"window": 4}, "topk": {"top_k": 4}}
        sizes |= {"gqa": {"n_kv_heads": 2}}
        config = config | {"n_layers": 2}  # two layers: one to share keys with the other
        print(bench_fewer_keys(12, config=config, prompt_len=4, sizes=sizes, repeats=1))
        print()
        print(bench_plays((8,), repeats=1))
        tiny = config | {"n_layers": 1}
        bw = copy_bandwidth(2**20, 1)
        lengths = {"plays": (8,), "serving": (8,)}
        print(
            "\n" + bench_roofline(lengths, serving=tiny | {"max_len": 8}, bandwidth=bw, repeats=2)
        )
        kinds = {"MHA": {}, "MQA": {"n_kv_heads": 1}, "latent 8": {"d_latent": 8}}
        small = tiny | {"d_model": 64}
        print("\n" + bench_kv_heads(64, batch=4, config=small, variants=kinds, bandwidth=bw))
        print("\n" + bench_paged() + "\n\n" + bench_quant(windows=2, length=64))
        print("\n" + bench_flex(256, heads=1, d_k=8, window=32, compile=False, repeats=1))
    else:
        print(bench_attention((128, 256, 512, 1024, 2048)), flush=True)
        print(flush=True)
        print(bench_memory((512, 1024, 2048, 4096)), flush=True)
        print(flush=True)
        print(bench_decoding((256, 1024)), flush=True)
        print(flush=True)
        print(bench_fewer_keys(512), flush=True)
        print(flush=True)
        print(bench_plays((64, 240)), flush=True)
        bw = copy_bandwidth()
        lengths = {"plays": (16, 128, 256), "serving": (16, 256, 1024)}
        print("\n" + bench_roofline(lengths, bandwidth=bw), flush=True)
        print("\n" + bench_kv_heads(1024, bandwidth=bw), flush=True)
        print("\n" + bench_paged() + "\n\n" + bench_quant(), flush=True)
        print("\n" + bench_flex(512, compile=not args.no_compile), flush=True)
    if args.course:
        print(flush=True)
        print(bench_course(course_root()), flush=True)
    print(f"\nbench finished in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
