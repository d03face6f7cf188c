"""Case builders and the registration of graded parts, shared by the ``ex_*`` modules.

Many exercises are checked on nothing but standard-normal arrays of chosen shapes: the
shapes are what a case is about (non-square, one size equal to another on purpose), and
the numbers only have to be reproducible. :func:`normal_cases` builds such cases from a
table of labels and shapes, so that an exercise module states only the table.
:func:`register_parts` registers the graded parts of an exercise from a table of specs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from attnlib.checks._core import Case, get_exercise, part, register

__all__ = ["normal_cases", "register_parts"]

Shape = int | tuple[int, ...] | None


def normal_cases(seed: int, *specs: tuple) -> list[Case]:
    """Cases of standard-normal float64 arrays drawn from ``np.random.default_rng(seed)``.

    Each spec is ``(label, shape, shape, ...)``: one positional argument per shape, and
    optionally a last item ``{name: shape}`` of keyword arguments. A shape of ``None``
    passes ``None`` (e.g. a layer without bias). The arrays are drawn in the order they
    are written — case by case, positional arguments before keyword arguments — so a
    table gives the same numbers as the same draws written out by hand.

    Example::

        normal_cases(7, ("seq=5, in=4, out=3", (5, 4), (3, 4), 3),
                        ("no bias", (3, 3), (5, 3), None),
                        ("bias as keyword", (3, 5), (2, 5), {"bias": 2}))
    """
    draw = np.random.default_rng(seed).standard_normal

    def arg(shape: Shape):
        return None if shape is None else draw(shape)

    cases = []
    for label, *shapes in specs:
        named = shapes.pop() if shapes and isinstance(shapes[-1], Mapping) else {}
        args = tuple(arg(s) for s in shapes)
        cases.append(Case(label, args, {name: arg(s) for name, s in named.items()}))
    return cases


def register_parts(whole: str, specs) -> None:
    """Register the parts of the registered exercise ``whole``: each spec is
    ``(name, summary, keyword arguments of checks.part)``, in the order they are graded."""
    for name, summary, kwargs in specs:
        register(part(get_exercise(whole), name, summary, **kwargs))
