"""KVCache, kv_cache_bytes, grouped_attend and the tiny decoder (lesson 10).

Oracles: torch's scaled_dot_product_attention (with enable_gqa=True for shared keys), and
full recomputation of the whole sequence for cached decoding, in fp64 and fp32.
"""

from __future__ import annotations

import pytest
import torch
from cache_helpers import one_thread, rand  # noqa: F401 (one_thread: a fixture)
from torch.nn import functional as F

import attnlib
from attnlib.decoder import TinyDecoder, generate
from attnlib.kv_cache import KVCache, grouped_attend, kv_cache_bytes

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- KVCache ------------------------------------------------------------------------------


def test_append_returns_everything_cached_in_order_and_grows():
    cache = KVCache(batch=2, n_kv_heads=3, d_k=4, d_v=5, max_len=2, dtype=torch.float64)
    ks, vs = [], []
    for i, n in enumerate((1, 3, 2)):  # 6 positions: more than max_len, so it must grow
        k, v = rand(2, 3, n, 4, seed=i), rand(2, 3, n, 5, seed=10 + i)
        ks.append(k)
        vs.append(v)
        k_all, v_all = cache.append(k, v)
    assert cache.length == len(cache) == 6 and cache.capacity >= 6
    assert torch.equal(k_all, torch.cat(ks, 2)) and torch.equal(v_all, torch.cat(vs, 2))
    r_k, r_v = cache.read()
    assert torch.equal(r_k, k_all) and torch.equal(r_v, v_all)


def test_nbytes_is_the_storage_actually_held():
    cache = KVCache(batch=1, n_kv_heads=2, d_k=8, max_len=10)
    assert cache.nbytes == 2 * (1 * 2 * 10 * 8 * 4)  # keys + values, fp32
    cache.append(torch.zeros(1, 2, 11, 8), torch.zeros(1, 2, 11, 8))
    assert cache.nbytes == 2 * (1 * 2 * 20 * 8 * 4)  # doubled capacity


@pytest.mark.parametrize(
    ("n_layers", "batch", "n_heads", "n_kv_heads", "seq"),
    [(1, 1, 4, 4, 17), (2, 3, 8, 2, 40), (3, 2, 8, 1, 9)],
)
def test_formula_matches_the_bytes_of_a_filled_cache(n_layers, batch, n_heads, n_kv_heads, seq):
    model = TinyDecoder(
        vocab_size=11, d_model=32, n_heads=n_heads, n_kv_heads=n_kv_heads, n_layers=n_layers
    )
    caches = model.new_caches(batch, seq)
    model(torch.zeros(batch, seq, dtype=torch.long), caches)
    measured = sum(c.nbytes for c in caches)
    d_k = 32 // n_heads
    want = kv_cache_bytes(n_layers=n_layers, batch=batch, n_kv_heads=n_kv_heads, seq=seq, d_k=d_k)
    assert measured == want == n_layers * batch * n_kv_heads * seq * 2 * d_k * 4
    assert all(c.length == seq for c in caches)


def test_cache_errors_name_the_argument_and_shapes():
    cache = KVCache(batch=1, n_kv_heads=2, d_k=4)
    with pytest.raises(ValueError, match=r"k has shape \(1, 3, 1, 4\)"):
        cache.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(TypeError, match="dtype torch.float64"):
        cache.append(torch.zeros(1, 2, 1, 4, dtype=torch.float64), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="seq_new"):
        cache.append(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="batch must be >= 1"):
        KVCache(batch=0, n_kv_heads=1, d_k=4)


# ---- grouped keys ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_attend_matches_sdpa_enable_gqa(n_kv_heads, causal):
    q = rand(2, 8, 5, 6, seed=1)  # (batch, n_heads, seq_q, d_k)
    k, v = rand(2, n_kv_heads, 5, 6, seed=2), rand(2, n_kv_heads, 5, 3, seed=3)
    out, w = grouped_attend(q, k, v, causal=causal)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 8, 5, dtype=torch.float64))


def test_grouped_attend_bottom_right_causal_matches_sdpa_with_a_mask():
    q, k, v = rand(1, 4, 3, 8, seed=4), rand(1, 2, 7, 8, seed=5), rand(1, 2, 7, 8, seed=6)
    out, _ = grouped_attend(q, k, v, causal=True, align="bottom_right")
    mask = torch.ones(3, 7, dtype=torch.bool).tril(diagonal=4)  # query i sees keys 0..4+i
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    # torch's own lower-right causal bias is the same mask
    from torch.nn.attention.bias import causal_lower_right  # imports torch._dynamo: ~1 s

    bias = causal_lower_right(3, 7)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("seq_q", "seq_k"), [(3, 7), (6, 4), (1, 5)])
def test_causal_means_the_same_in_grouped_attend_attend_and_causal_mask(align, seq_q, seq_k):
    """One keyword, one meaning: causal=True with align= is causal_mask(..., align=)."""
    q = rand(2, 6, seq_q, 8, seed=13)  # (batch, n_heads, seq_q, d_k)
    k, v = rand(2, 3, seq_k, 8, seed=14), rand(2, 3, seq_k, 5, seed=15)  # 3 key/value heads
    mask = attnlib.causal_mask(seq_q, seq_k, align=align, like=q)  # (seq_q, seq_k)
    k_rep, v_rep = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)  # one per query head
    want, want_w = attnlib.attend(q, k_rep, v_rep, mask)
    out, w = grouped_attend(q, k, v, causal=True, align=align)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, want_w, rtol=1e-12, atol=1e-12)
    same, _ = attnlib.attend(q, k_rep, v_rep, causal=True, align=align)
    torch.testing.assert_close(same, want, rtol=0, atol=0)


def test_grouped_attend_default_alignment_is_top_left():
    q, k, v = rand(1, 2, 3, 4, seed=16), rand(1, 1, 6, 4, seed=17), rand(1, 1, 6, 4, seed=18)
    out, w = grouped_attend(q, k, v, causal=True)
    assert not w[..., 3:].any()  # query i sees keys 0..i only
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_groups_equal_to_heads_is_ordinary_multi_head_attention():
    q, k, v = rand(2, 4, 6, 8, seed=7), rand(2, 4, 6, 8, seed=8), rand(2, 4, 6, 8, seed=9)
    out, w = grouped_attend(q, k, v, causal=True)
    want, want_w = attnlib.attend(q, k, v, causal=True)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-14)
    torch.testing.assert_close(w, want_w, rtol=0, atol=1e-14)


def test_grouped_attend_equals_attend_with_repeated_keys():
    q, k, v = rand(1, 6, 4, 8, seed=10), rand(1, 2, 4, 8, seed=11), rand(1, 2, 4, 8, seed=12)
    out, _ = grouped_attend(q, k, v)
    want, _ = attnlib.attend(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1))
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_grouped_attend_refuses_heads_that_do_not_divide():
    with pytest.raises(ValueError, match="n_heads=6.*n_kv_heads=4"):
        grouped_attend(rand(1, 6, 2, 4), rand(1, 4, 2, 4), rand(1, 4, 2, 4))


# ---- decoding -------------------------------------------------------------------------------


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])  # MHA, GQA, MQA
def test_cached_decoding_equals_full_recomputation_fp64(n_kv_heads):
    torch.manual_seed(0)
    model = TinyDecoder(vocab_size=13, d_model=32, n_heads=4, n_kv_heads=n_kv_heads).double()
    prompt = torch.randint(0, 13, (2, 5))
    a = generate(model, prompt, 12, use_cache=True)
    b = generate(model, prompt, 12, use_cache=False)
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.logits, b.logits, rtol=0, atol=1e-10)
    assert a.caches[0].length == 5 + 12 - 1  # the last token is chosen, never fed
    assert b.caches is None


def test_cached_decoding_fp32_tokens_identical_logits_close():
    torch.manual_seed(1)
    model = TinyDecoder(vocab_size=50, d_model=64, n_heads=4, n_kv_heads=2)
    prompt = torch.randint(0, 50, (1, 8))
    a = generate(model, prompt, 24, use_cache=True)
    b = generate(model, prompt, 24, use_cache=False)
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.logits, b.logits, rtol=1e-4, atol=1e-4)
    assert not torch.equal(a.tokens[:, 8:], a.tokens[:, 8:].roll(1, 1))  # not a constant run


def test_cache_filled_in_chunks_equals_one_forward_pass():
    torch.manual_seed(2)
    model = TinyDecoder(vocab_size=13, d_model=32, n_heads=4, n_kv_heads=2).double()
    tokens = torch.randint(0, 13, (2, 11))
    full = model(tokens)
    caches = model.new_caches(2, 4)  # too small on purpose: the caches grow
    parts = [model(tokens[:, i:j], caches) for i, j in ((0, 3), (3, 4), (4, 11))]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-10)


def test_sdpa_and_attnlib_attention_give_the_same_model():
    torch.manual_seed(3)
    model = TinyDecoder(vocab_size=13, d_model=32, n_heads=4, n_kv_heads=1).double()
    tokens = torch.randint(0, 13, (2, 9))
    fast = model(tokens)
    for block in model.blocks:
        block.attn.use_sdpa = False
    torch.testing.assert_close(model(tokens), fast, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_sdpa_and_attnlib_attention_agree_with_a_cache(n_kv_heads):
    """seq_q != seq_k: both paths must align the causal mask bottom-right."""
    torch.manual_seed(5)
    model = TinyDecoder(vocab_size=13, d_model=32, n_heads=4, n_kv_heads=n_kv_heads).double()
    tokens = torch.randint(0, 13, (2, 10))
    runs = []
    for use_sdpa in (True, False):
        for block in model.blocks:
            block.attn.use_sdpa = use_sdpa
        caches = model.new_caches(2, 10)
        chunks = [model(tokens[:, i:j], caches) for i, j in ((0, 4), (4, 7), (7, 10))]
        runs.append(torch.cat(chunks, 1))  # (batch, seq, vocab_size)
    torch.testing.assert_close(runs[1], runs[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(runs[0], model(tokens), rtol=0, atol=1e-10)


def test_the_cache_actually_changes_the_output():
    """Guards against a decoder that silently ignores its cache."""
    torch.manual_seed(4)
    model = TinyDecoder(vocab_size=13, d_model=32, n_heads=4).double()
    caches = model.new_caches(1, 8)
    model(torch.tensor([[1, 2, 3]]), caches)
    with_past = model(torch.tensor([[4]]), caches)
    without = model(torch.tensor([[4]]))
    assert (with_past - without).abs().max() > 1e-3


def test_generate_errors_and_edge_cases():
    model = TinyDecoder(vocab_size=7, d_model=16, n_heads=2, max_len=6)
    g = generate(model, torch.tensor([[1, 2]]), 0)
    assert g.tokens.tolist() == [[1, 2]] and g.logits.shape == (1, 0, 7)
    with pytest.raises(ValueError, match="prompt must be"):
        generate(model, torch.tensor([1, 2]), 3)
    with pytest.raises(ValueError, match="exceeds max_len=6"):
        generate(model, torch.tensor([[1, 2]]), 10, use_cache=False)


# ---- positions with a cache: RoPE ----------------------------------------------------------


def _rope_full(q, k, v):
    """Oracle: rotate every position at once, then causal SDPA over the whole sequence."""
    from attnlib.positions import apply_rotary

    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(
        apply_rotary(q), apply_rotary(k), v, is_causal=True, enable_gqa=gqa
    )


@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(4, 4), (4, 2), (4, 1)])
def test_rotary_decode_step_token_by_token_equals_the_whole_sequence(n_heads, n_kv_heads):
    from attnlib.kv_cache import rotary_decode_step
    from attnlib.positions import apply_rotary

    q, k, v = (
        rand(2, n_heads, 9, 8, seed=1),
        rand(2, n_kv_heads, 9, 8),
        rand(2, n_kv_heads, 9, 5),
    )
    cache = KVCache(batch=2, n_kv_heads=n_kv_heads, d_k=8, d_v=5, max_len=9, dtype=torch.float64)
    outs = [rotary_decode_step(q[:, :, :4], k[:, :, :4], v[:, :, :4], cache)]  # a 4-token prompt
    for t in range(4, 9):  # then one token at a time
        outs.append(
            rotary_decode_step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], cache)
        )
    torch.testing.assert_close(torch.cat(outs, 2), _rope_full(q, k, v), rtol=1e-12, atol=1e-12)
    k_cached, v_cached = cache.read()
    torch.testing.assert_close(k_cached, apply_rotary(k), rtol=0, atol=1e-14)  # stored rotated
    torch.testing.assert_close(v_cached, v, rtol=0, atol=0)  # values are never rotated


def test_rotary_decode_step_with_the_wrong_start_position_differs():
    from attnlib.kv_cache import rotary_decode_step

    q, k, v = rand(1, 2, 6, 8, seed=2), rand(1, 2, 6, 8, seed=3), rand(1, 2, 6, 4, seed=4)
    cache = KVCache(batch=1, n_kv_heads=2, d_k=8, d_v=4, max_len=6, dtype=torch.float64)
    rotary_decode_step(q[:, :, :3], k[:, :, :3], v[:, :, :3], cache)
    wrong = rotary_decode_step(q[:, :, 3:4], k[:, :, 3:4], v[:, :, 3:4], cache, start=0)
    right = _rope_full(q[:, :, :4], k[:, :, :4], v[:, :, :4])[:, :, 3:4]
    assert (wrong - right).abs().max() > 1e-3
    cache.truncate(3)
    explicit = rotary_decode_step(q[:, :, 3:4], k[:, :, 3:4], v[:, :, 3:4], cache, start=3)
    torch.testing.assert_close(explicit, right, rtol=1e-12, atol=1e-12)


def test_rotary_decode_step_errors():
    from attnlib.kv_cache import rotary_decode_step

    cache = KVCache(batch=1, n_kv_heads=1, d_k=4, max_len=4, dtype=torch.float64)
    q, k, v = rand(1, 1, 2, 4), rand(1, 1, 2, 4), rand(1, 1, 2, 4)
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        rotary_decode_step(q, k, v, None)
    with pytest.raises(ValueError, match="same seq_new"):
        rotary_decode_step(q, k[:, :, :1], v, cache)
    with pytest.raises(ValueError, match="start must be >= 0"):
        rotary_decode_step(q, k, v, cache, start=-1)
    with pytest.raises(TypeError, match="start must be an int"):
        rotary_decode_step(q, k, v, cache, start=1.0)
    with pytest.raises(TypeError, match="q_new"):
        rotary_decode_step(q.numpy(), k, v, cache)


# ---- lesson 14: fewer keys to keep -----------------------------------------------------------
# Oracles: the lesson-10 decoder itself (same seed, same weights), a forward pass written out
# by hand with F.layer_norm and scaled_dot_product_attention, uncached recomputation, and the
# published numbers multiplied out by hand.


def _tokens(batch, seq, vocab=13, seed=0):
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_kv_share_with_every_layer_its_own_equals_the_plain_decoder(n_kv_heads):
    """The proof of lesson 14: the sharing machinery, used trivially, changes nothing."""
    config = dict(vocab_size=13, d_model=32, n_heads=4, n_kv_heads=n_kv_heads, n_layers=3)
    torch.manual_seed(0)
    plain = TinyDecoder(**config).double()
    torch.manual_seed(1)  # other weights on purpose: they are copied over
    own = TinyDecoder(**config, kv_share=[0, 1, 2]).double()
    own.load_state_dict(plain.state_dict())
    tokens = _tokens(2, 9)
    assert torch.equal(own(tokens), plain(tokens))
    prompt = tokens[:, :3]
    a, b = generate(own, prompt, 8), generate(plain, prompt, 8)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logits, b.logits)
    assert [c.nbytes for c in a.caches] == [c.nbytes for c in b.caches]


def _by_hand(model, tokens):
    """The decoder's forward pass written out, layer by layer, with torch's own pieces."""
    pos = torch.arange(tokens.shape[1])
    x = model.tok.weight[tokens] + model.pos.weight[pos]  # (batch, seq, d_model)
    heads = lambda t, n: t.unflatten(-1, (n, -1)).transpose(1, 2)  # noqa: E731
    kv = {}
    for i, block in enumerate(model.blocks):
        a = block.attn
        h = F.layer_norm(x, x.shape[-1:], block.norm1.weight, block.norm1.bias)
        q = heads(h @ a.W_q.weight.T, a.n_heads)
        if model.kv_share[i] == i:
            kv[i] = heads(h @ a.W_k.weight.T, a.n_kv_heads), heads(h @ a.W_v.weight.T, a.n_kv_heads)
        k, v = kv[model.kv_share[i]]
        seq = x.shape[1]
        band = torch.ones(seq, seq, dtype=torch.bool).tril()
        if a.window is not None:
            band &= ~torch.ones(seq, seq, dtype=torch.bool).tril(-a.window)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=band, enable_gqa=True)
        x = x + o.transpose(1, 2).flatten(2) @ a.W_o.weight.T
        x = x + block.mlp(F.layer_norm(x, x.shape[-1:], block.norm2.weight, block.norm2.bias))
    return model.head(model.norm(x))


@pytest.mark.parametrize(
    "options",
    [
        dict(kv_share=[0, 0, 2, 2]),
        dict(kv_share=[0, 0, 0, 0], n_kv_heads=1),
        dict(window=3),
        dict(window=3, global_layers=[2]),
        dict(window=4, global_layers=[0, 1], kv_share=[0, 0, 2, 2]),
        dict(window=2, global_layers=[0], kv_share=[0, 0, 0, 3]),  # windowed reads global
    ],
)
def test_sharing_and_windows_match_a_forward_pass_written_by_hand(options):
    options = dict(options)
    n_kv_heads = options.pop("n_kv_heads", 2)
    torch.manual_seed(3)
    model = TinyDecoder(13, 32, 4, n_kv_heads, n_layers=4, **options).double()
    tokens = _tokens(2, 10, seed=1)
    torch.testing.assert_close(model(tokens), _by_hand(model, tokens), rtol=0, atol=1e-12)
    for block in model.blocks:
        block.attn.use_sdpa = False  # attnlib's grouped_attend: the same numbers
    torch.testing.assert_close(model(tokens), _by_hand(model, tokens), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "options",
    [
        dict(kv_share=[0, 0, 2]),
        dict(kv_share=[0, 0, 0], n_kv_heads=1),
        dict(window=4),
        dict(window=1),
        dict(window=3, global_layers=[1]),
        dict(window=3, global_layers=[0], kv_share=[0, 0, 2]),
        dict(d_latent=8),
        dict(d_latent=8, d_rope=4),
    ],
)
def test_cached_decoding_equals_uncached_for_every_lesson_14_option(options):
    options = dict(options)
    n_kv_heads = options.pop("n_kv_heads", 2)
    torch.manual_seed(4)
    model = TinyDecoder(13, 32, 4, n_kv_heads, n_layers=3, **options).double()
    prompt = _tokens(2, 5, seed=2)
    a = generate(model, prompt, 12, use_cache=True)
    b = generate(model, prompt, 12, use_cache=False)
    assert torch.equal(a.tokens, b.tokens)
    assert (a.logits - b.logits).abs().max().item() <= 1e-10
    # prefill in chunks, then one token at a time, equals one forward pass
    tokens = _tokens(2, 13, seed=3)
    caches = model.new_caches(2, 4)  # growing caches too small on purpose
    parts = [model(tokens[:, i:j], caches) for i, j in ((0, 6), (6, 7), (7, 9), (9, 13))]
    assert (torch.cat(parts, 1) - model(tokens)).abs().max().item() <= 1e-10


def test_sharing_layers_have_no_kv_weights_and_store_nothing():
    torch.manual_seed(0)
    model = TinyDecoder(13, 32, 4, 2, n_layers=4, kv_share=[0, 0, 2, 2])
    assert [b.attn.W_k is None for b in model.blocks] == [False, True, False, True]
    assert [b.attn.W_v is None for b in model.blocks] == [False, True, False, True]
    caches = model.new_caches(3, 20)
    assert [c is None for c in caches] == [False, True, False, True]
    model(_tokens(3, 20), caches)
    held = sum(c.nbytes for c in caches if c is not None)
    formula = kv_cache_bytes(n_layers=4, batch=3, seq=20, n_kv_heads=2, d_k=8, n_kv_layers=2)
    assert held == formula == model.cache_bytes(20, batch=3) == 2 * 3 * 2 * 20 * 16 * 4
    plain = sum(c.nbytes for c in TinyDecoder(13, 32, 4, 2, n_layers=4).new_caches(3, 20))
    assert held * 2 == plain


def test_a_sharing_layer_really_uses_the_other_layers_keys():
    """Guards against a sharing layer that silently computes its own K/V from somewhere."""
    torch.manual_seed(5)
    model = TinyDecoder(13, 32, 4, n_layers=2, kv_share=[0, 0]).double()
    tokens = _tokens(1, 6)
    before = model(tokens)
    with torch.no_grad():
        model.blocks[0].attn.W_k.weight.mul_(2.0)  # layer 1's scores change with layer 0's keys
    changed = model(tokens)
    with torch.no_grad():
        model.blocks[0].attn.W_k.weight.div_(2.0)
    assert (changed - before).abs().max() > 1e-4


def test_one_windowed_layer_cannot_see_past_its_window():
    torch.manual_seed(6)
    model = TinyDecoder(13, 32, 4, n_layers=1, window=3).double()
    tokens = _tokens(1, 9)
    other = tokens.clone()
    other[0, 0] = (tokens[0, 0] + 1) % 13  # change the first token only
    a, b = model(tokens), model(other)
    assert (a[:, :3] - b[:, :3]).abs().max() > 1e-4  # positions 0..2 see it
    assert torch.equal(a[:, 3:], b[:, 3:])  # positions 3.. do not: it left their window
    full = TinyDecoder(13, 32, 4, n_layers=1, window=9).double()
    full.load_state_dict(model.state_dict())
    plain = TinyDecoder(13, 32, 4, n_layers=1).double()
    plain.load_state_dict(model.state_dict())
    assert torch.equal(full(tokens), plain(tokens))  # a window as long as the sequence: causal


def test_windowed_caches_hold_window_positions_and_match_the_formula():
    torch.manual_seed(7)
    model = TinyDecoder(13, 32, 4, 2, n_layers=3, window=5, global_layers=[2])
    caches = model.new_caches(2, 30)
    assert [type(c).__name__ for c in caches] == ["RollingKVCache", "RollingKVCache", "KVCache"]
    model(_tokens(2, 30), caches)
    held = sum(c.nbytes for c in caches)
    formula = kv_cache_bytes(
        n_layers=3, batch=2, seq=30, n_kv_heads=2, d_k=8, window=5, n_local_layers=2
    )
    assert held == formula == model.cache_bytes(30, batch=2) == 2 * 2 * 16 * 4 * (2 * 5 + 30)


def test_latent_decoder_caches_match_the_formula():
    torch.manual_seed(8)
    model = TinyDecoder(13, 32, 4, n_layers=2, d_latent=6, d_rope=2)
    caches = model.new_caches(2, 11)
    model(_tokens(2, 11), caches)
    held = sum(c.nbytes for c in caches)
    assert held == model.cache_bytes(11, batch=2) == 2 * 2 * 11 * (6 + 2) * 4


def test_decoder_option_errors():
    with pytest.raises(ValueError, match=r"layer 1 reads layer 2"):
        TinyDecoder(n_layers=3, kv_share=[0, 2, 2])
    with pytest.raises(ValueError, match=r"layer 2 reads layer 1"):
        TinyDecoder(n_layers=3, kv_share=[0, 0, 1])  # layer 1 has no K/V of its own
    with pytest.raises(ValueError, match="kv_share has 2 entries for n_layers=3"):
        TinyDecoder(n_layers=3, kv_share=[0, 0])
    with pytest.raises(ValueError, match="kv_share entry must be <= 2"):
        TinyDecoder(n_layers=3, kv_share=[0, 0, 5])
    with pytest.raises(
        ValueError, match="layer 1 sees every position but reads the K/V of layer 0"
    ):
        TinyDecoder(n_layers=2, window=4, global_layers=[1], kv_share=[0, 0])
    with pytest.raises(ValueError, match="TinyDecoder: window must be >= 1"):
        TinyDecoder(window=0)
    with pytest.raises(ValueError, match="global_layers entry must be <= 1"):
        TinyDecoder(window=3, global_layers=[2])
    with pytest.raises(ValueError, match="d_latent is not combined"):
        TinyDecoder(d_latent=4, window=3)
    with pytest.raises(ValueError, match="pass kv"):
        TinyDecoder(n_layers=2, kv_share=[0, 0]).blocks[1].attn(torch.zeros(1, 2, 64))


# ---- the cache formula for every variant, and published models -------------------------------


def test_formula_options_multiply_out_as_documented():
    base = dict(n_layers=10, batch=2, seq=100, dtype=torch.bfloat16)
    gqa = kv_cache_bytes(**base, n_kv_heads=4, d_k=64)
    assert gqa == 10 * 2 * 4 * 100 * 128 * 2
    assert kv_cache_bytes(**base, n_kv_heads=4, d_k=64, d_v=32) == 10 * 2 * 4 * 100 * 96 * 2
    assert kv_cache_bytes(**base, d_latent=96, d_rope=32) == 10 * 2 * 100 * 128 * 2
    assert kv_cache_bytes(**base, n_kv_heads=4, d_k=64, window=30) == gqa * 30 // 100
    assert kv_cache_bytes(**base, n_kv_heads=4, d_k=64, window=300) == gqa  # seq < window
    mixed = kv_cache_bytes(**base, n_kv_heads=4, d_k=64, window=30, n_local_layers=8)
    assert mixed == 2 * 4 * 128 * 2 * (8 * 30 + 2 * 100)
    assert kv_cache_bytes(**base, n_kv_heads=4, d_k=64, n_kv_layers=5) == gqa // 2
    shared_local = kv_cache_bytes(
        **base, n_kv_heads=4, d_k=64, n_kv_layers=5, window=30, n_local_layers=4
    )
    assert shared_local == 2 * 4 * 128 * 2 * (4 * 30 + 1 * 100)
    assert kv_cache_bytes(**base, d_latent=96, d_rope=32, d_index=16) == 10 * 2 * 100 * 144 * 2
    fp8 = dict(index_dtype=torch.float8_e4m3fn, index_block=8)  # 16 bytes + 2 scales of 4
    per_token = 128 * 2 + 16 * 1 + 2 * 4
    assert (
        kv_cache_bytes(**base, d_latent=96, d_rope=32, d_index=16, **fp8)
        == 10 * 2 * 100 * per_token
    )


def test_formula_errors():
    with pytest.raises(TypeError, match="give n_kv_heads and d_k"):
        kv_cache_bytes(n_layers=1, batch=1, seq=4, n_kv_heads=2)
    with pytest.raises(ValueError, match="do not also give n_kv_heads"):
        kv_cache_bytes(n_layers=1, batch=1, seq=4, n_kv_heads=2, d_k=4, d_latent=8)
    with pytest.raises(ValueError, match="n_local_layers=1 needs a window"):
        kv_cache_bytes(n_layers=1, batch=1, seq=4, n_kv_heads=2, d_k=4, n_local_layers=1)
    with pytest.raises(ValueError, match=r"n_kv_layers=3 must be in 0..n_layers=2"):
        kv_cache_bytes(n_layers=2, batch=1, seq=4, n_kv_heads=2, d_k=4, n_kv_layers=3)
    with pytest.raises(ValueError, match=r"n_local_layers=2 must be in 0..1"):
        kv_cache_bytes(
            n_layers=2,
            batch=1,
            seq=4,
            n_kv_heads=2,
            d_k=4,
            n_kv_layers=1,
            window=2,
            n_local_layers=2,
        )
    with pytest.raises(ValueError, match="window must be >= 1"):
        kv_cache_bytes(n_layers=2, batch=1, seq=4, n_kv_heads=2, d_k=4, window=0)
    with pytest.raises(TypeError, match="d_latent must be an int"):
        kv_cache_bytes(n_layers=2, batch=1, seq=4, d_latent=8.0)


def test_published_configurations_multiplied_out_by_hand():
    from attnlib.kv_cache import PUBLISHED_CONFIGS as P

    KiB = 2**10
    per_token = {name: cfg.cache_bytes(1) for name, cfg in P.items()}  # bf16, one token
    assert per_token["Llama 2 7B"] == 32 * 32 * 2 * 128 * 2 == 512 * KiB  # as in lesson 10
    assert per_token["Llama 3 8B"] == per_token["Mistral 7B"] == 128 * KiB
    assert per_token["GPT-2 (124M)"] == 36 * KiB
    assert per_token["DeepSeek-V2"] == 60 * (512 + 64) * 2  # 67.5 KiB: 4.5 heads' worth
    assert per_token["DeepSeek-V3"] == 61 * (512 + 64) * 2
    # the indexer key in FP8 (1 byte a number) plus one float32 scale per 128 numbers
    assert per_token["DeepSeek-V3.2-Exp"] == 61 * ((512 + 64) * 2 + 128 + 4)
    # full contexts: Mistral's window caps its cache at 4096 positions
    assert P["Mistral 7B"].cache_bytes() == P["Mistral 7B"].cache_bytes(4096) == 2 * 2**30 // 4
    gemma2 = 8 * 2 * 256 * 2 * (21 * 4096 + 21 * 8192)
    assert P["Gemma 2 9B"].cache_bytes() == gemma2
    gemma3 = 16 * 2 * 128 * 2 * (52 * 1024 + 10 * 131072)
    assert P["Gemma 3 27B"].cache_bytes() == gemma3
    all_global = 62 * 16 * 2 * 128 * 2 * 131072
    assert 5.5 < all_global / gemma3 < 6  # 5:1 local:global keeps about a sixth
    assert all(cfg.source for cfg in P.values())
    assert {"Llama 2 7B", "Mistral 7B", "Gemma 3 27B", "DeepSeek-V3"} <= set(P)
