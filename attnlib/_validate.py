"""Argument checks shared by the whole library, written once.

Every message names the function and the argument, and says what was given (for arrays:
kind, shape and dtype, as :func:`attnlib._backend.describe` writes them). One exception
type per kind of mistake, everywhere in attnlib:

* ``TypeError`` — the wrong type or dtype (a list where a tensor goes, a float or a bool
  where an int goes, a float mask where a bool mask goes, numpy mixed with torch);
* ``ValueError`` — the right type with a wrong shape or value (a negative size, mismatched
  dims, a mask that does not broadcast, an unknown option).

Every check takes ``fn``, the public name the caller was called by (``"attend"``,
``"KVCache.append"``), first — except :func:`check_bool_mask`, which is public (lessons
call it) and takes the mask first and ``fn`` by keyword; the checks of one value return it
(converted where they say so), so that callers write ``n = check_int(fn, "n", n,
minimum=1)``. :func:`type_name` (from
:mod:`attnlib._backend`, re-exported here) is how every message names a type.

**Validation once per public call.** A public function that checks its input is decorated
with :func:`validated` and a private ``_check_<name>`` taking the same arguments. The check
runs when the function is called from outside attnlib (the *public door*); while its body
runs, every attnlib function it calls trusts its input and skips its own check, so a
tensor is validated once however many layers it passes (scikit-learn's rule for nested
calls). Every argument a body hands on must therefore be valid by construction, and a
door's check covers every argument its body could pass on wrongly, so that a bad argument
is named by the function the caller called (``tests/test_validate_once.py``).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np
import torch

from attnlib import _backend as B
from attnlib._backend import type_name

__all__ = [
    "validated",
    "type_name",
    "is_int",
    "check_int",
    "check_number",
    "check_choice",
    "check_instance",
    "check_array",
    "check_ndim",
    "check_cache_step",
    "check_kv_step",
    "check_decoder_input",
    "check_head_counts",
    "as_float_array",
    "same_kind_and_dtype",
    "at_least_2d",
    "broadcast_shapes",
    "check_same_dim",
    "check_bool_mask",
    "check_mask",
    "normalise_axis",
    "check_qk",
    "check_qkv",
    "default_scale",
]


# ----------------------------------------------------------------------------------------
# Validation once per public call.
# ----------------------------------------------------------------------------------------

# True while the body of a validated public call runs: the calls it makes trust their input.
_INSIDE: ContextVar[bool] = ContextVar("attnlib_inside_a_validated_call", default=False)


def validated(check: Callable) -> Callable:
    """Decorator: run ``check(*args, **kwargs)`` at the public door only.

    Called from outside attnlib, the decorated function first runs ``check`` with its own
    arguments (``check`` raises a clear error or returns nothing), then its body, during
    which every ``validated`` function it calls skips its check. A check never converts:
    what a body needs converted (an int input to float, say) it converts itself.
    """

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def door(*args, **kwargs):
            if _INSIDE.get():  # called by another attnlib function: input already checked
                return f(*args, **kwargs)
            check(*args, **kwargs)
            token = _INSIDE.set(True)
            try:
                return f(*args, **kwargs)
            finally:
                _INSIDE.reset(token)

        return door

    return decorate


# ----------------------------------------------------------------------------------------
# Scalars.
# ----------------------------------------------------------------------------------------


def is_int(value) -> bool:
    """True for an ``int`` or a numpy integer; False for bools and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_int(
    fn: str, name: str, value, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` as an ``int``; bools and floats are refused (``TypeError``), out-of-range
    values too (``ValueError``). numpy integers are accepted."""
    if not is_int(value):
        raise TypeError(f"{fn}: {name} must be an int, got {type_name(value)} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{fn}: {name} must be <= {maximum}, got {value}")
    return value


def check_number(
    fn: str,
    name: str,
    value,
    *,
    minimum: float | None = None,
    positive: bool = False,
    none_ok: bool = False,
) -> float | None:
    """``value`` as a finite ``float``: a bool or a non-number is a ``TypeError``; nan, inf,
    ``< minimum`` or (``positive``) ``<= 0`` a ``ValueError``. ``None`` passes if
    ``none_ok``."""
    if value is None and none_ok:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        wanted = "a number or None" if none_ok else "a number"
        raise TypeError(f"{fn}: {name} must be {wanted}, got {type_name(value)} {value!r}")
    bounds = " and > 0" if positive else f" and >= {minimum}" if minimum is not None else ""
    out_of_range = (positive and value <= 0) or (minimum is not None and value < minimum)
    if not math.isfinite(value) or out_of_range:
        raise ValueError(f"{fn}: {name} must be finite{bounds}, got {value}")
    return float(value)


def check_choice(fn: str, name: str, value, choices: Sequence) -> Any:
    """``value`` if it is one of ``choices``, else a ``ValueError`` listing them."""
    try:
        found = not isinstance(value, bool) and value in tuple(choices)
    except (TypeError, ValueError):  # e.g. an array, whose == gives no single answer
        found = False
    if not found:
        names = [repr(c) for c in choices]
        listed = " or ".join(names) if len(names) == 2 else "one of " + ", ".join(names)
        raise ValueError(f"{fn}: {name} must be {listed}, got {value!r}")
    return value


def check_instance(fn: str, name: str, value, cls: type | tuple[type, ...], what: str):
    """``value`` if it is an instance of ``cls``, else a ``TypeError``: ``{name} must be
    {what}`` (e.g. ``"a torch.Generator"``), naming the type given."""
    if not isinstance(value, cls):
        raise TypeError(f"{fn}: {name} must be {what}, got {type_name(value)}")
    return value


# ----------------------------------------------------------------------------------------
# Arrays and tensors.
# ----------------------------------------------------------------------------------------

_ONLY = {
    None: (
        "a numpy.ndarray or a torch.Tensor",
        "wrap it with np.asarray(...) or torch.as_tensor(...)",
    ),
    "torch": ("a torch.Tensor", "use torch.as_tensor(...)"),
    "numpy": ("a numpy.ndarray", "use np.asarray(...), or t.detach().numpy() for a tensor"),
}


def check_array(fn: str, name: str, x: Any, *, only: str | None = None, hint: str | None = None):
    """``x`` if it is a numpy array or a torch tensor (``only="torch"`` / ``"numpy"``: that
    kind alone), else a ``TypeError`` naming what was given."""
    ok = {None: B.is_torch(x) or B.is_numpy(x), "torch": B.is_torch(x), "numpy": B.is_numpy(x)}
    if not ok[only]:
        wanted, default_hint = _ONLY[only]
        raise TypeError(
            f"{fn}: {name} must be {wanted}, got {type_name(x)}; {hint or default_hint}"
        )
    return x


def check_cache_step(fn: str, entries, *, dtype, seq_axis: int) -> int:
    """Check the new rows a cache is asked to append; return their number, ``seq_new``.

    ``entries`` is a sequence of ``(name, x, dims)``: ``dims`` names each axis of ``x`` with
    the size the cache holds, ``None`` for the ``seq_new`` axis (at ``seq_axis``), e.g.
    ``(("batch", 1), ("n_kv_heads", 2), ("seq_new", None), ("d_k", 4))``. Each ``x`` must
    be a torch tensor of that shape and of the cache's ``dtype``, all with one ``seq_new``.
    """
    seq_new: dict[str, int] = {}
    for name, x, dims in entries:
        check_array(fn, name, x, only="torch")
        fixed = [(i, size) for i, (_, size) in enumerate(dims) if size is not None]
        if x.ndim != len(dims) or any(x.shape[i] != size for i, size in fixed):
            names = ", ".join(d for d, _ in dims)
            sizes = ", ".join(d if size is None else str(size) for d, size in dims)
            raise ValueError(
                f"{fn}: {name} has shape {tuple(x.shape)}, expected ({names}) = ({sizes})"
            )
        if x.dtype != dtype:
            raise TypeError(f"{fn}: {name} has dtype {x.dtype}, the cache holds {dtype}")
        seq_new[name] = x.shape[seq_axis]
    (first, n), *rest = seq_new.items()
    for name, m in rest:
        if m != n:
            raise ValueError(f"{fn}: {first} has seq_new={n} but {name} has seq_new={m}")
    return n


def check_kv_step(fn: str, cache, k, v, names: tuple[str, str] = ("k", "v")) -> int:
    """:func:`check_cache_step` for a KV cache (``cache.batch``, ``.n_kv_heads``, ``.d_k``,
    ``.d_v``, ``.dtype``): keys (batch, n_kv_heads, seq_new, d_k), values (..., d_v).
    ``names``: what the caller calls the keys and the values."""
    heads = (("batch", cache.batch), ("n_kv_heads", cache.n_kv_heads), ("seq_new", None))
    k_name, v_name = names
    entries = (
        (k_name, k, (*heads, ("d_k", cache.d_k))),
        (v_name, v, (*heads, ("d_v", cache.d_v))),
    )
    return check_cache_step(fn, entries, dtype=cache.dtype, seq_axis=2)


def check_decoder_input(fn: str, tokens, caches, n_layers: int, max_len: int) -> int:
    """Token ids (batch, seq_new) for a small decoder with ``n_layers`` layers and learned
    positions up to ``max_len``, and its per-layer caches (or ``None``). Returns ``start``,
    the position of the first new token (the length of layer 0's cache, 0 without caches)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long:
        got = getattr(tokens, "dtype", type_name(tokens))
        raise TypeError(f"{fn}: tokens must be a LongTensor (batch, seq), got {got}")
    if tokens.ndim != 2:
        raise ValueError(f"{fn}: tokens must have shape (batch, seq), got {tuple(tokens.shape)}")
    if caches is not None and len(caches) != n_layers:
        raise ValueError(f"{fn}: {len(caches)} caches for {n_layers} layers")
    start = 0 if caches is None else caches[0].length
    if start + tokens.shape[1] > max_len:
        raise ValueError(f"{fn}: position {start + tokens.shape[1] - 1} exceeds max_len={max_len}")
    return start


def check_head_counts(fn: str, d_model: int, n_heads: int, n_kv_heads: int) -> int:
    """``d_head = d_model // n_heads`` after checking that the heads split ``d_model``
    evenly and that the query heads share the ``n_kv_heads`` key/value heads evenly."""
    if d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError(
            f"{fn}: need n_heads | d_model and n_kv_heads | n_heads, got "
            f"d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv_heads}"
        )
    return d_model // n_heads


def check_ndim(
    fn: str,
    name: str,
    x: Any,
    *,
    ndim: int | None = None,
    min_ndim: int | None = None,
    doc: str = "",
) -> None:
    """A ``ValueError`` unless ``x`` has exactly ``ndim`` (or at least ``min_ndim``) dims;
    ``doc`` (e.g. ``"(batch, seq, d_model)"``) is appended to the message."""
    tail = f" {doc}" if doc else ""
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{fn}: {B.describe(name, x)} must have {ndim} dims{tail}")
    if min_ndim is not None and x.ndim < min_ndim:
        dims = "dim" if min_ndim == 1 else "dims"
        raise ValueError(f"{fn}: {B.describe(name, x)} needs at least {min_ndim} {dims}{tail}")


def check_layer_input(fn: str, x: Any, weight: torch.Tensor) -> None:
    """``x`` is a float torch tensor (batch, seq_new, d_model) with the dtype and input width
    of the layer whose input projection has ``weight`` (d_out, d_model)."""
    check_array(fn, "x", x, only="torch")
    check_ndim(fn, "x", x, ndim=3, doc="(batch, seq_new, d_model)")
    as_float_array(fn, "x", x)
    d_model, dtype = weight.shape[-1], weight.dtype
    if x.shape[-1] != d_model or x.dtype != dtype:
        raise ValueError(
            f"{fn}: {B.describe('x', x)} must be (batch, seq_new, d_model={d_model}) of "
            f"the weights' dtype {dtype}"
        )


def as_float_array(fn: str, name: str, x: Any, *, allow_int: bool = False, only: str | None = None):
    """``x`` if it is a floating-point array or tensor (``TypeError`` otherwise). With
    ``allow_int`` an integer one is converted to float (torch's default dtype / float64)."""
    check_array(fn, name, x, only=only)
    if B.is_bool(x) or not B.is_float(x):
        if allow_int and not B.is_bool(x):
            return x.to(torch.get_default_dtype()) if B.is_torch(x) else x.astype(np.float64)
        raise TypeError(
            f"{fn}: {B.describe(name, x)} must have a floating-point dtype "
            f"(float16, bfloat16, float32 or float64)"
        )
    return x


def same_kind_and_dtype(fn: str, named: dict[str, Any]) -> None:
    """A ``TypeError`` if the named arrays mix numpy and torch or differ in dtype."""
    items = list(named.items())
    first_name, first = items[0]
    for name, x in items[1:]:
        if B.is_torch(x) != B.is_torch(first):
            raise TypeError(
                f"{fn}: {B.describe(first_name, first)} and {B.describe(name, x)} mix numpy and "
                f"torch; pass all of them as the same kind"
            )
        if x.dtype != first.dtype:
            raise TypeError(
                f"{fn}: {B.describe(first_name, first)} and {B.describe(name, x)} have different "
                f"dtypes; convert them to one dtype first"
            )


def at_least_2d(fn: str, named: dict[str, Any]) -> None:
    """A ``ValueError`` for any named array with fewer than 2 dims (..., seq, d)."""
    for name, x in named.items():
        check_ndim(fn, name, x, min_ndim=2, doc="(..., seq, d); for a single vector use x[None, :]")


def broadcast_shapes(fn: str, what: str, shapes: dict[str, tuple]) -> tuple:
    """The broadcast of the named shapes, or a ``ValueError`` listing them."""
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        listed = ", ".join(f"{n} {s}" for n, s in shapes.items())
        raise ValueError(f"{fn}: the {what} do not broadcast: {listed}") from None


def check_same_dim(
    fn: str, dim: str, first: tuple[str, Any, int], second: tuple[str, Any, int], why: str
) -> int:
    """The size ``dim`` that axis ``i`` of one array and axis ``j`` of another share.

    ``first`` and ``second`` are ``(name, array, axis)``; if the sizes differ, a
    ``ValueError`` names both arrays, their sizes and shapes, and says ``why`` they must
    agree.
    """
    (a_name, a, i), (b_name, b, j) = first, second
    if a.shape[i] != b.shape[j]:
        raise ValueError(
            f"{fn}: {a_name} has {dim}={a.shape[i]} (shape {tuple(a.shape)}) but {b_name} has "
            f"{dim}={b.shape[j]} (shape {tuple(b.shape)}); {why}"
        )
    return a.shape[i]


def normalise_axis(fn: str, axis, ndim: int) -> int:
    """``axis`` (an int, may be negative) as an index in ``0 .. ndim - 1``."""
    axis = check_int(fn, "axis", axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{fn}: axis={axis} is out of range for an input with {ndim} dims")
    return axis % ndim


# ----------------------------------------------------------------------------------------
# Masks.
# ----------------------------------------------------------------------------------------

_MASK_HINT = "use mask.bool() / mask.astype(bool) if 1 means 'may attend'"
_ADDITIVE_HINT = (
    "torch's float masks are additive (0 keeps, -inf blocks): build a bool mask, e.g. "
    "mask == 1 if 1 meant 'may attend'"
)


def check_bool_mask(
    mask: Any,
    name: str = "mask",
    *,
    fn: str = "check_bool_mask",
    meaning: str | None = None,
    hint: str = _ADDITIVE_HINT,
):
    """Return ``mask`` unchanged if it is a boolean array or tensor; refuse anything else.

    The one mask check of attnlib, public as :func:`attnlib.mask_conventions.check_bool_mask`.
    Unlike the other checks here it takes the mask first and ``fn`` by keyword, the way a
    lesson calls it: ``check_bool_mask(float_mask, "float_mask")``.

    A float or int mask is refused because torch would *add* it to the scores: a 0/1 float
    mask shifts some scores by 1 and blocks nothing.

    Parameters
    ----------
    mask : bool ndarray or Tensor
    name : str, default "mask"
        The argument's name, for the error message.
    fn : str, default "check_bool_mask"
        The public name the caller was called by, for the error message.
    meaning : str, optional
        The convention the argument follows, shown in the message (``"True = may
        attend"``); None says none (a function that handles both conventions).
    hint : str
        How to fix the mask, shown in the message.

    Returns
    -------
    mask : the same object

    Raises
    ------
    TypeError
        If ``mask`` is not an array or tensor, or its dtype is not bool.

    Examples
    --------
    >>> import numpy as np
    >>> check_bool_mask(np.array([[True, False]])).dtype
    dtype('bool')
    >>> check_bool_mask(np.ones((1, 2)), "keep")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: check_bool_mask: keep (numpy.ndarray, shape (1, 2), float64) must be boolean. ...
    """
    said = f" ({meaning})" if meaning else ""
    if not (B.is_torch(mask) or B.is_numpy(mask)):
        raise TypeError(
            f"{fn}: {name} must be a boolean numpy.ndarray or torch.Tensor{said}, got "
            f"{type_name(mask)}"
        )
    if not B.is_bool(mask):
        raise TypeError(
            f"{fn}: {B.describe(name, mask)} must be boolean{said}. A float or int 0/1 mask "
            f"would be added to the scores and block nothing; {hint}"
        )
    return mask


def check_mask(fn: str, mask: Any, like: Any, target: tuple, target_name: str):
    """``mask`` (or None) if it is a boolean array of ``like``'s kind that broadcasts to
    ``target``, the shape of the ``target_name`` it masks."""
    if mask is None:
        return None
    check_bool_mask(mask, fn=fn, meaning="True = may attend", hint=_MASK_HINT)
    if B.is_torch(mask) != B.is_torch(like):
        helper = "torch.as_tensor(mask)" if B.is_torch(like) else "mask.numpy()"
        raise TypeError(
            f"{fn}: {B.describe('mask', mask)} is not the same kind as the inputs "
            f"({B.kind(like)}); convert it with {helper}"
        )
    mshape = tuple(mask.shape)
    try:
        joint = tuple(np.broadcast_shapes(mshape, target))
    except ValueError:
        joint = None
    if joint != target:
        raise ValueError(
            f"{fn}: mask of shape {mshape} does not broadcast to the {target_name} of shape "
            f"{target}; a mask is (..., seq_q, seq_k), e.g. (seq_q, seq_k) or (batch, 1, seq_k)"
        )
    return mask


# ----------------------------------------------------------------------------------------
# Queries, keys and the scale.
# ----------------------------------------------------------------------------------------


def check_qk(fn: str, q, k):
    """Queries and keys of one kind and float dtype, >= 2 dims, the same d_k.

    Returns ``(q, k, batch)`` with ``batch`` the broadcast of their leading dims.
    """
    q = as_float_array(fn, "q", q)
    k = as_float_array(fn, "k", k)
    same_kind_and_dtype(fn, {"q": q, "k": k})
    at_least_2d(fn, {"q": q, "k": k})
    why = "every query is compared with every key by a dot product, so their last dims must match"
    check_same_dim(fn, "d_k", ("q", q, -1), ("k", k, -1), why)
    batch = broadcast_shapes(
        fn, "batch dims of q and k", {"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2])}
    )
    return q, k, batch


def check_qkv(fn: str, q, k, v):
    """:func:`check_qk`, and values of the same kind and dtype with one row per key.

    Returns ``(q, k, v, batch)`` with ``batch`` the broadcast of the three's leading dims.
    """
    q, k, _ = check_qk(fn, q, k)
    v = as_float_array(fn, "v", v)
    same_kind_and_dtype(fn, {"q": q, "v": v})
    at_least_2d(fn, {"v": v})
    check_same_dim(fn, "seq_k", ("k", k, -2), ("v", v, -2), "every key needs its value")
    shapes = {"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2]), "v": tuple(v.shape[:-2])}
    batch = broadcast_shapes(fn, "batch dims of q, k and v", shapes)
    return q, k, v, batch


def default_scale(fn: str, d_k: int, scale) -> float:
    """``scale`` as a float, ``1 / sqrt(d_k)`` when it is None; it must be finite."""
    if scale is None:
        return 1.0 / math.sqrt(d_k)
    return check_number(fn, "scale", scale, none_ok=True)
