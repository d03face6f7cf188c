"""attnlib._validate — one rule, one exception type per kind of mistake, across attnlib.

* a bool, float or str where a size goes is a ``TypeError``; a negative size a ``ValueError``;
  both name the function and the argument — for every public function that takes sizes;
* a non-tensor where a tensor goes is a ``TypeError``; a float mask is a ``TypeError`` in
  ``attend`` and in the modules built on it alike;
* types are printed by name (``list``, ``numpy.ndarray``), never as ``<class '...'>``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import attnlib
from attnlib import _validate as V
from attnlib.backprop import fit_attention_pattern
from attnlib.blockwise import blockwise_attend
from attnlib.decoder import TinyDecoder, generate
from attnlib.explorers import head_state, mask_state, query_state
from attnlib.explorers.scale import explorer_state
from attnlib.heads import split_heads
from attnlib.kv_cache import KVCache, RollingKVCache, grouped_attend, kv_cache_bytes
from attnlib.latent import LatentAttention, LatentCache
from attnlib.mask_conventions import from_torch_attn_mask, to_torch_attn_mask
from attnlib.mha import FusedQKVAttention, MultiHeadAttention
from attnlib.positions import (
    apply_rotary,
    rotary_angles,
    rotary_frequencies,
    sinusoidal_positions,
)
from attnlib.projections import QKVProjection
from attnlib.selection import Indexer, topk_mask
from attnlib.tasks import corpus, lookup, scaling, syntax, two_heads
from attnlib.timing import median_times
from attnlib.torch_mha import unpack_mha
from attnlib.training import torch_threads, train
from attnlib.windows import sliding_window_mask

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------
# Every public function that takes a size: (function name, argument name, call(size)).
# ---------------------------------------------------------------------------------------


def _param():
    return torch.nn.Parameter(torch.zeros(2))


def _step(p):
    return lambda i: (p**2).sum()


def _threads(n):
    with torch_threads(n):
        pass


_MODEL = TinyDecoder(vocab_size=7, d_model=8, n_heads=2, n_layers=1, max_len=8)
_WEIGHTS = np.full((2, 3, 3), 1 / 3)  # (n_heads, seq_q, seq_k), rows sum to 1
_X, _W = torch.zeros(1, 3, 4), torch.zeros(4, 2)

SIZED = [
    ("sliding_window_mask", "window", lambda n: sliding_window_mask(3, window=n)),
    ("RollingKVCache", "window", lambda n: RollingKVCache(1, 1, 4, window=n)),
    ("LatentAttention", "d_latent", lambda n: LatentAttention(8, 2, n)),
    ("LatentCache", "d_latent", lambda n: LatentCache(1, n)),
    ("Indexer", "d_index", lambda n: Indexer(8, 2, n)),
    ("topk_mask", "n_keep", lambda n: topk_mask(torch.zeros(2, 3), n)),
    ("TinyDecoder", "window", lambda n: TinyDecoder(window=n)),
    ("causal_mask", "seq_q", lambda n: attnlib.causal_mask(n)),
    ("causal_mask", "seq_k", lambda n: attnlib.causal_mask(3, n)),
    ("padding_mask", "seq_k", lambda n: attnlib.padding_mask([1], n)),
    ("split_heads", "n_heads", lambda n: split_heads(np.zeros((1, 2, 4)), n)),
    ("MultiHeadAttention", "d_model", lambda n: MultiHeadAttention(n, 1)),
    ("MultiHeadAttention", "n_heads", lambda n: MultiHeadAttention(4, n)),
    ("FusedQKVAttention", "n_heads", lambda n: FusedQKVAttention(4, n)),
    ("to_torch_attn_mask", "n_heads", lambda n: to_torch_attn_mask(np.ones((1, 2, 3, 3), bool), n)),
    (
        "from_torch_attn_mask",
        "n_heads",
        lambda n: from_torch_attn_mask(np.ones((2, 3, 3), bool), n),
    ),
    ("QKVProjection", "d_model", lambda n: QKVProjection(n, 2)),
    ("QKVProjection", "d_k", lambda n: QKVProjection(4, n)),
    ("QKVProjection", "d_v", lambda n: QKVProjection(4, 2, n)),
    ("KVCache", "batch", lambda n: KVCache(n, 1, 4)),
    ("KVCache", "n_kv_heads", lambda n: KVCache(1, n, 4)),
    ("KVCache", "d_k", lambda n: KVCache(1, 1, n)),
    ("KVCache", "d_v", lambda n: KVCache(1, 1, 4, n)),
    ("KVCache", "max_len", lambda n: KVCache(1, 1, 4, max_len=n)),
    ("KVCache.truncate", "length", lambda n: KVCache(1, 1, 4).truncate(n)),
    (
        "kv_cache_bytes",
        "seq",
        lambda n: kv_cache_bytes(n_layers=1, batch=1, n_kv_heads=1, seq=n, d_k=4),
    ),
    ("TinyDecoder", "n_layers", lambda n: TinyDecoder(vocab_size=7, d_model=8, n_layers=n)),
    (
        "CausalSelfAttention",
        "n_kv_heads",
        lambda n: TinyDecoder(d_model=8, n_heads=2, n_kv_heads=n),
    ),
    ("generate", "n_new", lambda n: generate(_MODEL, torch.tensor([[1, 2]]), n)),
    ("sinusoidal_positions", "seq", lambda n: sinusoidal_positions(n, 4)),
    ("sinusoidal_positions", "d_model", lambda n: sinusoidal_positions(3, n)),
    ("rotary_frequencies", "d_k", lambda n: rotary_frequencies(n)),
    ("rotary_angles", "d_k", lambda n: rotary_angles([0, 1], n)),
    ("blockwise_attend", "block_q", lambda n: blockwise_attend(*[np.zeros((2, 4))] * 3, block_q=n)),
    ("blockwise_attend", "block_k", lambda n: blockwise_attend(*[np.zeros((2, 4))] * 3, block_k=n)),
    ("train", "steps", lambda n: (p := _param(), train([p], _step(p), steps=n, progress=False))),
    ("torch_threads", "n", _threads),
    ("seed_everything", "seed", lambda n: attnlib.seed_everything(n)),
    ("median_times", "repeats", lambda n: median_times({"f": lambda: None}, repeats=n)),
    (
        "fit_attention_pattern",
        "steps",
        lambda n: fit_attention_pattern(_X, _W, _W, steps=n, progress=False),
    ),
    ("predicted_score_variance", "d_k", lambda n: scaling.predicted_score_variance(n)),
    (
        "sample_dot_products",
        "n",
        lambda n: scaling.sample_dot_products(4, n, rng=np.random.default_rng(0)),
    ),
    (
        "sample_dot_products",
        "chunk",
        lambda n: scaling.sample_dot_products(4, 8, rng=np.random.default_rng(0), chunk=n),
    ),
    ("variance_tolerance", "n", lambda n: scaling.variance_tolerance(n)),
    ("draw_rows", "n_rows", lambda n: scaling.draw_rows(4, n, 3, rng=np.random.default_rng(0))),
    ("make_retrieval_task", "steps", lambda n: scaling.make_retrieval_task(steps=n)),
    (
        "train_retrieval",
        "d_k",
        lambda n: scaling.train_retrieval(scaling.make_retrieval_task(steps=1), 0.1, d_k=n),
    ),
    ("HeadsTask", "seq", lambda n: two_heads.HeadsTask(seq=n)),
    ("HeadsTask", "n_letters", lambda n: two_heads.HeadsTask(n_letters=n)),
    (
        "make_batch",
        "batch",
        lambda n: two_heads.make_batch(two_heads.HeadsTask(), n, torch.Generator()),
    ),
    (
        "train_heads_model",
        "steps",
        lambda n: two_heads.train_heads_model(two_heads.HeadsTask(), 2, steps=n, progress=False),
    ),
    ("lookup_batch", "n_names", lambda n: lookup.lookup_batch([[0]], [[0]], [0], n, 2)),
    (
        "sample_lookup",
        "batch",
        lambda n: lookup.sample_lookup(
            n, seq_k=2, n_names=3, n_numbers=3, generator=np.random.default_rng(0)
        ),
    ),
    ("LookupAttention", "d_head", lambda n: lookup.LookupAttention(6, n, 3)),
    (
        "fit_lookup",
        "steps",
        lambda n: lookup.fit_lookup(
            lookup.LookupAttention(6, 4, 3),
            steps=n,
            batch=2,
            seq_k=2,
            n_names=3,
            n_numbers=3,
            seed=0,
            progress=False,
        ),
    ),
    ("generate", "n_sentences", lambda n: corpus.generate(n)),
    ("encode", "max_len", lambda n: syntax.encode([], max_len=n)),
    ("train_model", "steps", lambda n: syntax.train_model(steps=n, progress=False)),
    ("SyntaxModel", "d_model", lambda n: syntax.SyntaxModel(d_model=n)),
    ("fit_probe", "n_classes", lambda n: syntax.fit_probe(np.ones((2, 2)), np.zeros(2, int), n)),
    ("query_state", "d_k", lambda n: query_state(0.0, n)),
    ("query_state", "seq_k", lambda n: query_state(0.0, seq_k=n)),
    ("mask_state", "seq", lambda n: mask_state("none", seq=n)),
    ("mask_state", "length", lambda n: mask_state("padding", n)),
    ("head_state", "head", lambda n: head_state(_WEIGHTS, n)),
    ("explorer_state", "d_k", lambda n: explorer_state(n, 0.1)),
]
SIZED_IDS = [f"{fn}-{name}" for fn, name, _ in SIZED]


@pytest.mark.parametrize(("fn", "name", "call"), SIZED, ids=SIZED_IDS)
@pytest.mark.parametrize(
    ("bad", "shown"), [(True, "bool True"), (2.0, "float 2.0"), ("2", "str '2'")], ids=str
)
def test_a_size_of_the_wrong_type_is_a_type_error_naming_the_argument(fn, name, call, bad, shown):
    with pytest.raises(TypeError, match=re.escape(f"{fn}: {name} must be an int, got {shown}")):
        call(bad)


@pytest.mark.parametrize(("fn", "name", "call"), SIZED, ids=SIZED_IDS)
def test_a_negative_size_is_a_value_error_naming_the_argument(fn, name, call):
    with pytest.raises(ValueError, match=re.escape(f"{fn}: {name} must be")) as info:
        call(-1)
    assert "-1" in str(info.value)


def test_numpy_integers_are_sizes_too():
    assert attnlib.causal_mask(np.int64(3)).shape == (3, 3)
    assert KVCache(np.int32(1), 1, 4).batch == 1
    assert type(KVCache(np.int32(1), 1, 4).batch) is int


# ---------------------------------------------------------------------------------------
# Tensors and masks.
# ---------------------------------------------------------------------------------------

_q = torch.zeros(1, 2, 3, 4)  # (batch, n_heads, seq_q, d_k)
_kv = torch.zeros(1, 1, 5, 4)  # (batch, n_kv_heads, seq_k, d_k)


@pytest.mark.parametrize("which", ["q", "k", "v"])
@pytest.mark.parametrize(
    ("bad", "shown"), [(np.zeros((1, 2, 3, 4)), "numpy.ndarray"), ([[0.0]], "list")], ids=str
)
def test_grouped_attend_refuses_a_non_tensor_with_a_type_error(which, bad, shown):
    args = {"q": _q, "k": _kv, "v": _kv} | {which: bad}
    with pytest.raises(
        TypeError, match=f"grouped_attend: {which} must be a torch.Tensor, got {shown}"
    ):
        grouped_attend(**args)


def test_grouped_attend_refuses_a_wrong_rank_with_a_value_error():
    with pytest.raises(ValueError, match=r"grouped_attend: k \(torch.Tensor, shape \(5, 4\)"):
        grouped_attend(_q, _kv[0, 0], _kv)


def _float_mask_calls():
    q = torch.zeros(2, 3, 8)  # (batch, seq, d_model)
    mask = torch.ones(3, 3)  # float 0/1: would block nothing if added to the scores
    heads = torch.zeros(2, 2, 3, 4)
    return [
        ("attend", lambda: attnlib.attend(q, q, q, mask)),
        ("softmax", lambda: attnlib.softmax(torch.zeros(3, 3), mask=mask)),
        ("MultiHeadAttention", lambda: MultiHeadAttention(8, 2)(q, q, q, mask=mask)),
        ("MultiHeadAttention", lambda: MultiHeadAttention(8, 2)(q, q, q, mask=mask.numpy())),
        ("FusedQKVAttention", lambda: FusedQKVAttention(8, 2)(q, mask=mask)),
        ("grouped_attend", lambda: grouped_attend(heads, heads, heads, mask)),
        ("check_bool_mask", lambda: attnlib.mask_conventions.check_bool_mask(mask)),
    ]


@pytest.mark.parametrize(
    ("fn", "call"), _float_mask_calls(), ids=[f for f, _ in _float_mask_calls()]
)
def test_a_float_mask_is_a_type_error_everywhere(fn, call):
    with pytest.raises(TypeError, match=rf"{fn}: mask \(.*float.*\) must be boolean") as info:
        call()
    assert "added to the scores" in str(info.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda: attnlib.attend(*[torch.zeros(3, 4)] * 3, [[True] * 3] * 3),
        lambda: MultiHeadAttention(4, 2)(*[torch.zeros(1, 3, 4)] * 3, mask=[[True] * 3] * 3),
    ],
    ids=["attend", "MultiHeadAttention"],
)
def test_a_list_mask_is_a_type_error_naming_the_type(call):
    with pytest.raises(TypeError, match=r"mask must be a boolean numpy.ndarray .* got list$"):
        call()


def test_the_mha_mask_shape_message_is_its_own():
    q = torch.zeros(2, 3, 8)
    with pytest.raises(ValueError, match=r"MultiHeadAttention: mask of shape \(5,\) does not fit"):
        MultiHeadAttention(8, 2)(q, q, q, mask=torch.ones(5, dtype=torch.bool))


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: apply_rotary([[0.0, 1.0]]), "apply_rotary: x must be a numpy.ndarray or a torch"),
        (
            lambda: apply_rotary(np.zeros((3, 4), int)),
            r"apply_rotary: x \(numpy.ndarray, shape \(3, 4\), int64\) must have a floating",
        ),
        (
            lambda: KVCache(1, 1, 4).append([0.0], [0.0]),
            "KVCache.append: k must be a torch.Tensor, got list",
        ),
        (
            lambda: generate(_MODEL, [[1, 2]], 1),
            "generate: prompt must be a torch.Tensor, got list",
        ),
        (lambda: blockwise_attend(*[np.zeros((2, 4))] * 2, [[0.0]]), "blockwise_attend: v must be"),
        (lambda: scaling.softmax_jacobian([0.5, 0.5]), "softmax_jacobian: p must be a numpy"),
        (
            lambda: lookup.sample_lookup(1, seq_k=1, n_names=2, n_numbers=2, generator=0),
            "sample_lookup: generator must be a numpy.random.Generator, got int",
        ),
        (
            lambda: unpack_mha(MultiHeadAttention(2, 1)),
            "unpack_mha: mha must be a torch.nn.MultiheadAttention, got attnlib.MultiHeadAttention",
        ),
        (
            lambda: scaling.row_stats([[0.0]], [[[0.0]]], 1.0, [[0.0]]),
            "row_stats: q must be a numpy",
        ),
        (
            lambda: scaling.row_stats(
                *scaling.draw_rows(2, 1, 2, rng=np.random.default_rng(0)), "1", np.zeros((1, 2))
            ),
            "row_stats: scale must be a number, got str",
        ),
        (
            lambda: train([_param()], _step(_param()), steps=1, lr=True),
            "train: lr must be a number, got bool",
        ),
        (
            lambda: attnlib.attend(*[torch.zeros(2, 4)] * 3, scale=np.bool_(True)),
            "attend: scale must be a number",
        ),
        (
            lambda: query_state(0.0, temperature="1"),
            "query_state: temperature must be a number, got str",
        ),
        (lambda: explorer_state(4, None), "explorer_state: scale must be a number, got NoneType"),
        (
            lambda: two_heads.HeadsTask(p_marker="0.5"),
            "HeadsTask: p_marker must be a number, got str",
        ),
        (
            lambda: sinusoidal_positions(3, 4, base="1e4"),
            "sinusoidal_positions: base must be a number",
        ),
    ],
)
def test_wrong_types_are_type_errors(call, pattern):
    with pytest.raises(TypeError, match=pattern):
        call()


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (
            lambda: lookup.LookupAttention(6, 4, 3, mode="shared"),
            "LookupAttention: mode must be one of 'separate', 'tied', 'uniform', got 'shared'",
        ),
        (lambda: mask_state("future"), "mask_state: mode must be one of 'none', 'causal'"),
        (
            lambda: attnlib.causal_mask(2, align="left"),
            "causal_mask: align must be 'top_left' or 'bottom_right', got 'left'",
        ),
        (
            lambda: train([_param()], _step(_param()), steps=1, optimizer="rmsprop"),
            "train: optimizer must be 'adam' or 'sgd', got 'rmsprop'",
        ),
        (
            lambda: query_state(0.0, temperature=-1.0),
            "query_state: temperature must be finite and > 0",
        ),
        (
            lambda: sinusoidal_positions(3, 4, base=0.0),
            "sinusoidal_positions: base must be finite and > 0",
        ),
        (
            lambda: scaling.make_retrieval_task(steps=1, noise=math.nan),
            "make_retrieval_task: noise must be finite and >= 0, got nan",
        ),
    ],
)
def test_wrong_values_are_value_errors(call, pattern):
    with pytest.raises(ValueError, match=re.escape(pattern)):
        call()


# ---------------------------------------------------------------------------------------
# The helpers themselves.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "name"),
    [
        ([1], "list"),
        (None, "NoneType"),
        (np.zeros(2), "numpy.ndarray"),
        (np.float64(1.0), "numpy.float64"),
        (torch.zeros(2), "torch.Tensor"),
        (1.5, "float"),
        (torch.nn.Linear(1, 1), "torch.nn.Linear"),
        (np.random.default_rng(0), "numpy.random.Generator"),
        (MultiHeadAttention(2, 1), "attnlib.MultiHeadAttention"),
    ],
    ids=str,
)
def test_type_name(x, name):
    assert V.type_name(x) == name


def test_check_int_bounds_and_result():
    assert V.check_int("f", "n", np.int16(3), minimum=0, maximum=3) == 3
    with pytest.raises(ValueError, match=re.escape("f: n must be <= 3, got 4")):
        V.check_int("f", "n", 4, maximum=3)
    with pytest.raises(TypeError, match=re.escape("f: n must be an int, got numpy.bool")):
        V.check_int("f", "n", np.bool_(True))


def test_check_number():
    assert V.check_number("f", "x", 2) == 2.0 and type(V.check_number("f", "x", 2)) is float
    assert V.check_number("f", "x", None, none_ok=True) is None
    assert V.check_number("f", "x", 0.0, minimum=0) == 0.0
    for bad, pattern in [(math.inf, "finite, got inf"), (-1, "finite and > 0, got -1")]:
        with pytest.raises(ValueError, match=re.escape(f"f: x must be {pattern}")):
            V.check_number("f", "x", bad, positive=True if bad == -1 else False)
    with pytest.raises(TypeError, match=re.escape("f: x must be a number or None, got list [1]")):
        V.check_number("f", "x", [1], none_ok=True)


def test_check_choice_refuses_lookalikes():
    assert V.check_choice("f", "mode", "a", ("a", "b")) == "a"
    for bad in (["a"], np.array(["a", "b"]), True):
        with pytest.raises(ValueError, match="f: mode must be 'a' or 'b'"):
            V.check_choice("f", "mode", bad, ("a", "b"))


# ---------------------------------------------------------------------------------------
# No copies left: the checks live in attnlib/_validate.py only.
# ---------------------------------------------------------------------------------------


def _sources():
    return [p for p in sorted((ROOT / "attnlib").rglob("*.py")) if p.name != "_validate.py"]


def test_no_module_writes_its_own_int_check():
    bad = []
    for path in _sources():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"isinstance\(\w+, \(?bool\b", line) or re.search(
                r"int\(\w+\) != \w+", line
            ):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "use attnlib._validate.check_int:\n" + "\n".join(bad)


def test_no_message_prints_a_raw_type():
    bad = []
    for path in _sources():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\{type\(\w+\)(\.__name__)?\}", line):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "use attnlib._validate.type_name:\n" + "\n".join(bad)
