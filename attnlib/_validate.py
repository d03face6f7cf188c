"""Argument checks shared by the whole library, written once.

Every message names the function and the argument, and says what was given. One exception
type per kind of mistake, everywhere in attnlib:

* ``TypeError`` — the wrong type or dtype (a list where a tensor goes, a float where an int
  goes, a float mask where a bool mask goes);
* ``ValueError`` — the right type with a wrong shape or value (a negative size, mismatched
  dims, an unknown option).
"""

from __future__ import annotations

import numbers

__all__ = ["check_int", "type_name"]


def type_name(x) -> str:
    """A short, readable name of ``x``'s type: ``list``, ``numpy.ndarray``, ``torch.Tensor``."""
    t = type(x)
    module = t.__module__
    if module in ("builtins", "__builtin__"):
        return t.__qualname__
    root = module.split(".")[0]
    return f"{root}.{t.__qualname__}"


def check_int(
    fn: str, name: str, value, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` as an ``int``; bools and floats are refused (``TypeError``), out-of-range
    values too (``ValueError``). numpy integers are accepted."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name} must be an int, got {type_name(value)} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{fn}: {name} must be <= {maximum}, got {value}")
    return value
