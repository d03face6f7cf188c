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
   without the cache, tokens/s and whether the characters are the same.

``--course`` also runs every lesson under strict nbval and reports the wall time and the
slowest lesson (minutes). ``--quick`` is a tiny configuration for tests.

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

from attnlib.timing import median_times
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
# 6. The course under strict nbval (optional).
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
    if args.course:
        print(flush=True)
        print(bench_course(course_root()), flush=True)
    print(f"\nbench finished in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
