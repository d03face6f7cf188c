"""A GPT-style language model of :class:`attnlib.block.DecoderBlock`\\ s (lessons 15–16).

* :class:`GPT` — token embeddings ``wte`` plus learned positions ``wpe``, the blocks ``h``,
  a final LayerNorm ``ln_f`` and ``lm_head``, whose weight *is* ``wte``'s (tied
  embeddings), started as GPT-2 is (std 0.02, the writes into the stream at 0.02/√(2L));
  :meth:`GPT.new_caches` gives one :class:`attnlib.kv_cache.KVCache` per block, and
  :func:`attnlib.decoder.generate` decodes greedily with or without them. Its
  ``residual=False``, ``norm="post"`` and ``norm="none"`` are the variants lesson 15
  measures (:mod:`attnlib.tasks.block_variants`);
* :func:`gpt2_config` and :func:`gpt2_state_dict` — the same model as Hugging Face's
  ``GPT2LMHeadModel``: its config and its weights under GPT-2's names (``tests/
  test_hf_equivalence.py`` proves the logits, the cached keys and values and the generated
  tokens equal); :func:`run_gpt2` — what ``GPT2LMHeadModel`` computes with a given state
  dict (lesson 15's exercise 15.2 hands it the learner's own mapping);
* :func:`stream_gradients` — how large the loss's gradient is on the residual stream at
  the entry of every block (with and without the residual path).

Which choices make the copy exact: GELU's tanh approximation (GPT-2's ``gelu_new``, not
the exact GELU), LayerNorm's epsilon (1e-5), pre-LN blocks with a final LayerNorm, biases
on every linear map but ``lm_head``, learned absolute positions, the ``1/√d_head`` scale, and
``lm_head`` tied to ``wte``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from attnlib._validate import check_array, check_instance, check_int, check_number, validated
from attnlib.block import LAYER_NORM_EPS, DecoderBlock, LayerNorm, check_norm
from attnlib.kv_cache import KVCache

__all__ = ["GPT", "gpt2_config", "gpt2_state_dict", "run_gpt2", "stream_gradients"]


class GPT(nn.Module):
    """A small GPT: embeddings, ``n_layers`` pre-LN decoder blocks, a tied unembedding.

    ``logits = lm_head(ln_f(h[L-1](... h[0](drop(wte(tokens) + wpe(positions))))))`` with
    ``lm_head.weight is wte.weight``. Weights start as GPT-2's do (transformers 5.23.0's
    ``GPT2PreTrainedModel._init_weights``, nanoGPT's ``GPT.__init__``): normal with std 0.02,
    biases 0, LayerNorm gains 1, and the two projections that write into the residual
    stream (``attn.W_o``, ``mlp.c_proj``; GPT-2's ``attn.c_proj`` and ``mlp.c_proj``) with
    std ``0.02 / sqrt(2 · n_layers)``: the stream is a sum of ``2 · n_layers`` such writes.

    Parameters
    ----------
    vocab_size : int
    d_model, n_heads, n_layers : int
        ``n_heads`` must divide ``d_model``.
    max_len : int
        Positions the model has embeddings for (GPT-2's ``n_positions``).
    d_ff : int, optional
        The MLPs' hidden width, default ``4 · d_model``.
    attn_dropout : float, default 0.0
        Dropout on the attention weights (GPT-2's ``attn_pdrop``), training mode only.
    dropout : float, default 0.0
        Dropout on the embeddings (``drop``, GPT-2's ``embd_pdrop``) and on what every
        attention and MLP adds to the stream (their ``resid_dropout`` and ``dropout``,
        GPT-2's ``resid_pdrop``), training mode only.
    eps : float, default 1e-5
        The LayerNorms' epsilon.
    residual : bool, default True
        False drops the blocks' residual additions (to measure what they do).
    norm : {"pre", "post", "none"}, default "pre"
        Where the blocks' LayerNorms sit (:class:`attnlib.block.DecoderBlock`). ``"pre"``
        (GPT-2) ends with the final LayerNorm ``ln_f``; ``"post"`` (the 2017 Transformer,
        GPT-1) and ``"none"`` have none (``ln_f`` is an identity): a post-LN stream leaves
        its last block normalised already.

    Attributes
    ----------
    wte : nn.Embedding (vocab_size, d_model)
    wpe : nn.Embedding (max_len, d_model)
    h : nn.ModuleList of DecoderBlock
    ln_f : LayerNorm (nn.Identity unless ``norm="pre"``)
    lm_head : nn.Linear d_model -> vocab_size, no bias, weight shared with ``wte``
    head : the same module as ``lm_head`` (the name :func:`attnlib.decoder.generate` reads)

    See Also
    --------
    attnlib.block.DecoderBlock : one block.
    attnlib.decoder.generate : greedy decoding, with the cache or without.
    gpt2_state_dict : the weights under Hugging Face GPT-2's names.

    Examples
    --------
    >>> from attnlib.decoder import generate
    >>> model = GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=2, max_len=32).eval()
    >>> tokens = torch.tensor([[1, 2, 3]])
    >>> model(tokens).shape                                 # (batch, seq, vocab_size)
    torch.Size([1, 3, 11])
    >>> model.lm_head.weight is model.wte.weight            # tied embeddings
    True
    >>> fast, slow = generate(model, tokens, 5), generate(model, tokens, 5, use_cache=False)
    >>> torch.equal(fast.tokens, slow.tokens)
    True
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        max_len: int,
        *,
        d_ff: int | None = None,
        attn_dropout: float = 0.0,
        dropout: float = 0.0,
        eps: float = LAYER_NORM_EPS,
        residual: bool = True,
        norm: str = "pre",
    ):
        super().__init__()
        fn = "GPT"
        check_instance(fn, "residual", residual, bool, "a bool")
        norm = check_norm(fn, norm)
        self.vocab_size = check_int(fn, "vocab_size", vocab_size, minimum=1)
        self.n_layers = check_int(fn, "n_layers", n_layers, minimum=1)
        self.max_len = check_int(fn, "max_len", max_len, minimum=1)
        d_model = check_int(fn, "d_model", d_model, minimum=1)
        n_heads = check_int(fn, "n_heads", n_heads, minimum=1)
        if d_model % n_heads:
            raise ValueError(f"{fn}: n_heads={n_heads} must divide d_model={d_model}")
        for name, p in (("attn_dropout", attn_dropout), ("dropout", dropout)):
            if check_number(fn, name, p, minimum=0.0) >= 1:
                raise ValueError(f"{fn}: {name} must be in [0, 1), got {p}")
        self.wte = nn.Embedding(self.vocab_size, d_model)
        self.wpe = nn.Embedding(self.max_len, d_model)
        self.h = nn.ModuleList(
            DecoderBlock(
                d_model,
                n_heads,
                d_ff,
                attn_dropout=attn_dropout,
                dropout=dropout,
                eps=eps,
                residual=residual,
                norm=norm,
            )
            for _ in range(self.n_layers)
        )
        self.drop = nn.Dropout(float(dropout))  # on the embeddings (GPT-2's embd_pdrop)
        self.ln_f = LayerNorm(d_model, eps) if norm == "pre" else nn.Identity()
        self.lm_head = nn.Linear(d_model, self.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one matrix embeds and unembeds
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head, self.d_ff = self.h[0].attn.d_head, self.h[0].mlp.c_fc.out_features
        self.attn_dropout, self.dropout, self.eps = float(attn_dropout), float(dropout), eps
        self.residual, self.norm = residual, norm
        self._init_weights()

    @property
    def head(self) -> nn.Linear:
        """``lm_head``, under the name :func:`attnlib.decoder.generate` reads."""
        return self.lm_head

    def _init_weights(self) -> None:
        out_std = 0.02 / (2 * self.n_layers) ** 0.5  # the projections into the stream
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif ".ln_" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                elif name.endswith(("attn.W_o.weight", "mlp.c_proj.weight")):
                    p.normal_(0.0, out_std)
                else:
                    p.normal_(0.0, 0.02)

    def new_caches(self, batch: int, max_len: int | None = None) -> list[KVCache]:
        """One empty :class:`KVCache` per block, of the weights' dtype, with room for
        ``max_len`` positions (default the model's ``max_len``)."""
        fn = "GPT.new_caches"
        batch = check_int(fn, "batch", batch, minimum=1)
        max_len = self.max_len if max_len is None else check_int(fn, "max_len", max_len, minimum=1)
        dtype = self.wte.weight.dtype
        size = dict(d_k=self.d_head, max_len=max_len, dtype=dtype)
        return [KVCache(batch, self.n_heads, **size) for _ in range(self.n_layers)]

    def _check_forward(self, tokens, caches=None, *, return_weights=False) -> None:
        _check_tokens("GPT", tokens, self.vocab_size)
        start = 0
        if caches is not None:
            check_instance("GPT", "caches", caches, (list, tuple), "a list of KVCache or None")
            if len(caches) != self.n_layers:
                raise ValueError(f"GPT: {len(caches)} caches for n_layers={self.n_layers}")
            want = (tokens.shape[0], self.n_heads, self.d_head, self.wte.weight.dtype)
            for i, cache in enumerate(caches):
                check_instance("GPT", f"caches[{i}]", cache, KVCache, "a KVCache")
                got = (cache.batch, cache.n_kv_heads, cache.d_k, cache.dtype)
                if got != want or cache.length != caches[0].length:
                    raise ValueError(
                        f"GPT: caches[{i}] holds (batch, n_heads, d_k, dtype) = {got} and "
                        f"{cache.length} positions; every cache must hold {want} and as many "
                        f"positions as caches[0] ({caches[0].length}): make them with new_caches"
                    )
            start = caches[0].length
        if start + tokens.shape[1] > self.max_len:
            raise ValueError(
                f"GPT: positions {start}..{start + tokens.shape[1] - 1} exceed "
                f"max_len={self.max_len}"
            )

    @validated(_check_forward)
    def forward(self, tokens: torch.Tensor, caches: list | None = None, *, return_weights=False):
        """Next-token logits at every given position.

        Parameters
        ----------
        tokens : LongTensor of shape (batch, seq_new)
            The whole sequence, or (with ``caches``) only the new tokens.
        caches : list of KVCache, one per block, optional
            As made by :meth:`new_caches`; they hold the earlier positions, and the new
            tokens' positions start at their length.
        return_weights : bool, default False

        Returns
        -------
        logits : Tensor of shape (batch, seq_new, vocab_size)
        weights : list of Tensor (batch, n_heads, seq_new, seq_k), one per block
            Only with ``return_weights``: ``(logits, weights)``.
        """
        start = 0 if caches is None else caches[0].length  # position of the first new token
        pos = torch.arange(start, start + tokens.shape[1], device=tokens.device)  # (seq_new,)
        x = self.drop(self.wte(tokens) + self.wpe(pos))  # (batch, seq_new, d_model)
        weights = []
        for i, block in enumerate(self.h):
            cache = None if caches is None else caches[i]
            x, w = block(x, cache, return_weights=True)  # x: (batch, seq_new, d_model)
            weights.append(w)
        logits = self.lm_head(self.ln_f(x))  # (batch, seq_new, vocab_size)
        return (logits, weights) if return_weights else logits

    def extra_repr(self) -> str:
        extra = "" if self.residual else ", residual=False"
        extra += "" if self.norm == "pre" else f", norm={self.norm!r}"
        return (
            f"vocab_size={self.vocab_size}, d_model={self.d_model}, n_heads={self.n_heads}, "
            f"n_layers={self.n_layers}, max_len={self.max_len}{extra}"
        )


def _check_tokens(fn: str, tokens, vocab_size: int, name: str = "tokens") -> None:
    check_array(fn, name, tokens, only="torch")
    if tokens.dtype != torch.long:
        raise TypeError(f"{fn}: {name} must be a LongTensor (batch, seq), got dtype {tokens.dtype}")
    if tokens.ndim != 2 or tokens.shape[1] < 1:
        raise ValueError(
            f"{fn}: {name} must have shape (batch, seq >= 1), got {tuple(tokens.shape)}"
        )
    if bool(((tokens < 0) | (tokens >= vocab_size)).any()):
        lo, hi = int(tokens.min()), int(tokens.max())
        raise ValueError(
            f"{fn}: {name} holds ids from {lo} to {hi}, outside 0 .. vocab_size - 1 = "
            f"{vocab_size - 1}"
        )


# ----------------------------------------------------------------------------------------
# The same model as Hugging Face's GPT-2.
# ----------------------------------------------------------------------------------------


def _check_model(model) -> None:
    check_instance("gpt2", "model", model, GPT, "an attnlib.gpt.GPT")


def _refuse_other_norms(fn: str, model: GPT) -> None:
    if model.norm != "pre":
        raise ValueError(f"{fn}: model has norm={model.norm!r}; GPT-2's blocks are pre-LN")


@validated(_check_model)
def gpt2_config(model: GPT) -> dict:
    """The keyword arguments of ``transformers.GPT2Config`` for the same architecture.

    ``GPT2LMHeadModel(GPT2Config(**gpt2_config(model)))`` has exactly the parameters that
    :func:`gpt2_state_dict` fills. GPT-2's tokenizer ids (``bos_token_id``,
    ``eos_token_id``, 50256) are not part of the architecture and are left out.

    Parameters
    ----------
    model : GPT
        With ``residual=True`` and ``norm="pre"`` (GPT-2 has no other kind).

    Returns
    -------
    dict
        ``vocab_size``, ``n_positions``, ``n_embd``, ``n_layer``, ``n_head``, ``n_inner``,
        ``activation_function="gelu_new"``, the three dropouts (``attn_pdrop`` is the
        model's ``attn_dropout``; ``embd_pdrop`` and ``resid_pdrop`` are both its
        ``dropout``), ``layer_norm_epsilon``, ``tie_word_embeddings=True`` and the
        attention-scaling flags.

    See Also
    --------
    gpt2_state_dict : the weights.

    Examples
    --------
    >>> config = gpt2_config(GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=2, max_len=32))
    >>> config["n_embd"], config["n_head"], config["n_inner"], config["activation_function"]
    (16, 4, 64, 'gelu_new')
    """
    if not model.residual:
        raise ValueError("gpt2_config: model has residual=False; GPT-2's blocks are residual")
    _refuse_other_norms("gpt2_config", model)
    return dict(
        vocab_size=model.vocab_size,
        n_positions=model.max_len,
        n_embd=model.d_model,
        n_layer=model.n_layers,
        n_head=model.n_heads,
        n_inner=model.d_ff,
        activation_function="gelu_new",
        resid_pdrop=model.dropout,
        embd_pdrop=model.dropout,
        attn_pdrop=model.attn_dropout,
        layer_norm_epsilon=model.eps,
        tie_word_embeddings=True,
        scale_attn_weights=True,
        scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False,
    )


@validated(_check_model)
def gpt2_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The model's weights under the names of Hugging Face's ``GPT2LMHeadModel``.

    GPT-2 stores its linear maps as ``Conv1D`` with the weight as (in, out), the transpose
    of ``nn.Linear``'s (out, in), and keeps ``W_q``, ``W_k``, ``W_v`` side by side in one
    ``c_attn``. For block ``i`` (prefix ``h.i.`` here, ``transformer.h.i.`` there):

    ==========================================  ==========================  ==============
    attnlib                                     GPT-2                       how
    ==========================================  ==========================  ==============
    ``wte.weight``, ``wpe.weight``              ``transformer.wte/wpe``     copied
    ``ln_1``, ``ln_2`` (weight, bias)           ``ln_1``, ``ln_2``          copied
    ``attn.W_q``, ``W_k``, ``W_v`` (weight)     ``attn.c_attn.weight``      stacked, ᵀ
    ``attn.W_q``, ``W_k``, ``W_v`` (bias)       ``attn.c_attn.bias``        stacked
    ``attn.W_o`` (weight, bias)                 ``attn.c_proj``             weight ᵀ
    ``mlp.c_fc``, ``mlp.c_proj`` (weight, bias) ``mlp.c_fc``, ``mlp.c_proj`` weight ᵀ
    ``ln_f`` (weight, bias)                     ``transformer.ln_f``        copied
    ``lm_head.weight`` (= ``wte.weight``)       ``lm_head.weight``          copied (tied)
    ==========================================  ==========================  ==============

    Parameters
    ----------
    model : GPT
        With ``norm="pre"``: another block's weights under GPT-2's names would compute
        something else.

    Returns
    -------
    dict of str -> Tensor
        New tensors (copies), for ``GPT2LMHeadModel.load_state_dict(..., strict=True)``.

    See Also
    --------
    gpt2_config : the matching config.

    Examples
    --------
    >>> model = GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=1, max_len=32)
    >>> sd = gpt2_state_dict(model)
    >>> c_attn = sd["transformer.h.0.attn.c_attn.weight"]
    >>> tuple(c_attn.shape)                     # (d_model, 3 · d_model): W_q, W_k, W_v side by side
    (16, 48)
    >>> torch.equal(c_attn[:, 16:32], model.h[0].attn.W_k.weight.T)
    True
    """
    _refuse_other_norms("gpt2_state_dict", model)
    sd = {
        "transformer.wte.weight": model.wte.weight,
        "transformer.wpe.weight": model.wpe.weight,
        "transformer.ln_f.weight": model.ln_f.weight,
        "transformer.ln_f.bias": model.ln_f.bias,
        "lm_head.weight": model.lm_head.weight,
    }
    for i, block in enumerate(model.h):
        p, a = f"transformer.h.{i}.", block.attn
        sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = block.ln_1.weight, block.ln_1.bias
        sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = block.ln_2.weight, block.ln_2.bias
        sd[p + "attn.c_attn.weight"] = torch.cat([a.W_q.weight, a.W_k.weight, a.W_v.weight]).T
        sd[p + "attn.c_attn.bias"] = torch.cat([a.W_q.bias, a.W_k.bias, a.W_v.bias])
        sd[p + "attn.c_proj.weight"], sd[p + "attn.c_proj.bias"] = a.W_o.weight.T, a.W_o.bias
        for name in ("c_fc", "c_proj"):
            lin = getattr(block.mlp, name)
            sd[p + f"mlp.{name}.weight"], sd[p + f"mlp.{name}.bias"] = lin.weight.T, lin.bias
    return {k: v.detach().clone().contiguous() for k, v in sd.items()}


def _check_run_gpt2(model, weights, tokens) -> None:
    fn = "run_gpt2"
    check_instance(fn, "model", model, GPT, "an attnlib.gpt.GPT")
    check_instance(fn, "weights", weights, dict, "a dict of GPT-2 name -> tensor")
    _check_tokens(fn, tokens, model.vocab_size)
    if tokens.shape[1] > model.max_len:
        raise ValueError(f"{fn}: seq={tokens.shape[1]} exceeds max_len={model.max_len}")


@validated(_check_run_gpt2)
def run_gpt2(model: GPT, weights: dict, tokens: torch.Tensor) -> tuple:
    """What Hugging Face's ``GPT2LMHeadModel`` computes with the given weights.

    Builds ``GPT2LMHeadModel(GPT2Config(**gpt2_config(model)))`` locally (nothing is
    downloaded), in the dtype of ``model``'s weights, loads ``weights`` with
    ``load_state_dict(strict=True)`` (every name GPT-2 has, nothing else, every shape
    right) and runs it on ``tokens`` with its cache. Lesson 15's exercise 15.2 hands it
    the learner's mapping of the course model's weights to GPT-2's names.

    Parameters
    ----------
    model : GPT
        Gives the architecture (:func:`gpt2_config`) and the dtype.
    weights : dict of str -> Tensor
        GPT-2's state dict, e.g. :func:`gpt2_state_dict` of ``model``.
    tokens : LongTensor of shape (batch, seq)

    Returns
    -------
    logits : Tensor of shape (batch, seq, vocab_size)
    keys, values : Tensor of shape (n_layers, batch, n_heads, seq, d_head)
        What ``past_key_values`` holds after the call, layer by layer.

    Raises
    ------
    RuntimeError
        From ``load_state_dict``, naming every missing or unexpected name and every
        tensor of the wrong shape.

    Examples
    --------
    >>> model = GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=2, max_len=32).double().eval()
    >>> tokens = torch.tensor([[1, 2, 3]])
    >>> logits, keys, values = run_gpt2(model, gpt2_state_dict(model), tokens)
    >>> bool((logits - model(tokens)).abs().max() < 1e-10), tuple(keys.shape)
    (True, (2, 1, 4, 3, 4))
    """
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the config is built here: no network
    from transformers import GPT2Config, GPT2LMHeadModel

    config = gpt2_config(model) | dict(bos_token_id=None, eos_token_id=None)
    hf = GPT2LMHeadModel(GPT2Config(**config)).to(model.wte.weight.dtype)
    hf.load_state_dict(weights, strict=True)
    with torch.no_grad():
        out = hf.eval()(tokens, use_cache=True)
    layers = out.past_key_values.layers
    keys = torch.stack([layer.keys for layer in layers])  # (n_layers, batch, n_heads, seq, d_head)
    values = torch.stack([layer.values for layer in layers])
    return out.logits, keys, values


# ----------------------------------------------------------------------------------------
# What the residual path does to gradients.
# ----------------------------------------------------------------------------------------


def _check_stream_gradients(model, tokens, targets=None) -> None:
    fn = "stream_gradients"
    check_instance(fn, "model", model, GPT, "an attnlib.gpt.GPT")
    _check_tokens(fn, tokens, model.vocab_size)
    if tokens.shape[1] > model.max_len:
        raise ValueError(f"{fn}: seq={tokens.shape[1]} exceeds max_len={model.max_len}")
    if targets is None:
        if tokens.shape[1] < 2:
            raise ValueError(f"{fn}: tokens needs seq >= 2 to predict its own next tokens")
    else:
        _check_tokens(fn, targets, model.vocab_size, "targets")
        if targets.shape != tokens.shape:
            raise ValueError(
                f"{fn}: targets has shape {tuple(targets.shape)}, tokens {tuple(tokens.shape)}"
            )


@validated(_check_stream_gradients)
def stream_gradients(model: GPT, tokens: torch.Tensor, targets=None) -> torch.Tensor:
    """The size of the loss's gradient on the residual stream, block by block.

    Runs the model on ``tokens`` (in its current mode), takes the mean cross-entropy
    against ``targets`` and returns, for every block ``l``, the norm of ∂loss/∂x where x
    is the stream entering block ``l`` (the last entry: the stream entering ``ln_f``).
    The model's own ``.grad`` fields are not touched.

    Through a residual block the gradient is ``g + Jᵀg`` (``J`` the Jacobian of what the
    block adds): the identity passes ``g`` on, and ``Jᵀg`` can add to it or cancel part of
    it. With ``residual=False`` each block multiplies it by its own Jacobian alone, and the
    early blocks' entries can shrink or grow by orders of magnitude.

    Parameters
    ----------
    model : GPT
    tokens : LongTensor of shape (batch, seq)
    targets : LongTensor of shape (batch, seq), optional
        Default: predict the next token, ``tokens[:, 1:]`` from ``tokens[:, :-1]``.

    Returns
    -------
    norms : Tensor of shape (n_layers + 1,)
        Frobenius norms over (batch, seq, d_model), earliest block first.

    Examples
    --------
    >>> model = GPT(vocab_size=11, d_model=16, n_heads=4, n_layers=3, max_len=32)
    >>> tokens = torch.randint(0, 11, (2, 12))
    >>> stream_gradients(model, tokens).shape
    torch.Size([4])
    """
    if targets is None:
        tokens, targets = tokens[:, :-1], tokens[:, 1:]
    pos = torch.arange(tokens.shape[1], device=tokens.device)  # (seq,)
    with torch.enable_grad():
        x = model.drop(model.wte(tokens) + model.wpe(pos))  # (batch, seq, d_model)
        streams = []
        for block in model.h:
            streams.append(x)
            x = block(x)  # (batch, seq, d_model)
        streams.append(x)
        logits = model.lm_head(model.ln_f(x))  # (batch, seq, vocab_size)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        grads = torch.autograd.grad(loss, streams)
    return torch.stack([g.norm() for g in grads]).detach()
