"""attnlib — the helper package of the Key Vectors course.

Attention through its key vectors: ``softmax(Q Kᵀ / √d_k) V``.

Core names (the course's public contract):

* :func:`softmax`, :func:`scores`, :func:`attend` — numpy or torch in, same kind out;
* :func:`causal_mask`, :func:`padding_mask` — boolean masks, True = may attend;
* :class:`MultiHeadAttention` — separate ``W_q``, ``W_k``, ``W_v``, ``W_o``;
* :func:`seed_everything` — one call to make a lesson reproducible.

Submodules by concept: ``attnlib.plot`` (every figure), ``attnlib.checks`` (exercise
checks). Importing attnlib has no side effects: no seeding, no plotting style changes.
"""

from attnlib.core import attend, scores, softmax
from attnlib.masks import causal_mask, padding_mask
from attnlib.seeding import seed_everything

__all__ = [
    "attend",
    "causal_mask",
    "padding_mask",
    "scores",
    "seed_everything",
    "softmax",
]

__version__ = "0.1.0"


def __getattr__(name):
    # MultiHeadAttention lives in attnlib.mha (built in lesson 07); imported on first use.
    if name == "MultiHeadAttention":
        from attnlib.mha import MultiHeadAttention

        return MultiHeadAttention
    raise AttributeError(f"module 'attnlib' has no attribute {name!r}")
