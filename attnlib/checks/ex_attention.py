"""Exercises of lesson 03 on the attention core: softmax and attend.

Inputs are numpy float64 arrays (the lessons build these functions in numpy first).
Shapes are deliberately non-square (seq_q ≠ seq_k ≠ d_k ≠ d_v) so that a transposed
matrix cannot pass by accident; one case has seq_k == d_k so that a missing transpose of
k runs and can be recognised.

When a function is wrong, each exercise's ``infer`` measures it on probes (see
:mod:`attnlib.checks._core`): for softmax and attend, which axis the weights sum to 1
over, the multiplier the scores were scaled by (a fit of log-weights against the raw
scores), what blocked keys and fully masked rows get, which rows break on huge scores
(and on a row with one score far below or far above the rest: the shift a row was given),
and whether a batch gives what its elements give one at a time. The softmax exercise is
defined in :mod:`attnlib.checks._softmax_exercise` (imported here, so registered first);
the probes live in :mod:`attnlib.checks._attention_probes`; lesson 08's masks in
:mod:`attnlib.checks.ex_masks`.
"""

from __future__ import annotations

import numpy as np

# the softmax exercise, registered first (its own module: this one would be over 800 lines)
from attnlib.checks import _softmax_exercise  # noqa: F401
from attnlib.checks._attention_probes import infer_attend
from attnlib.checks._core import Case, Exercise, Misconception, register
from attnlib.core import attend as _attend
from attnlib.masks import causal_mask as _causal_mask
from attnlib.masks import padding_mask as _padding_mask

# ----------------------------------------------------------------------------------------
# attend(q, k, v, mask=None) -> (out, weights), mask True = may attend
# ----------------------------------------------------------------------------------------


def _attend_cases() -> list[Case]:
    rng = np.random.default_rng(7)
    n = rng.standard_normal
    causal = _causal_mask(4, 6, align="bottom_right")
    pad = _padding_mask([6, 4], 6)  # (2, 1, 6)
    block_row = np.ones((3, 5), dtype=bool)
    block_row[1] = False  # query 1 may attend to nothing
    return [
        Case("3 queries, 5 keys, d_k=4, d_v=2", (n((3, 4)), n((5, 4)), n((5, 2)))),
        Case("2 queries, 4 keys, d_k=4 (seq_k == d_k), d_v=3", (n((2, 4)), n((4, 4)), n((4, 3)))),
        Case(
            "batch 2: 4 queries, 6 keys, d_k=8, d_v=3", (n((2, 4, 8)), n((2, 6, 8)), n((2, 6, 3)))
        ),
        Case(
            "causal mask (4, 6), d_k=8",
            (n((4, 8)), n((6, 8)), n((6, 3))),
            {"mask": causal},
        ),
        Case(
            "padding mask (2, 1, 6), lengths 6 and 4",
            (n((2, 4, 8)), n((2, 6, 8)), n((2, 6, 3))),
            {"mask": pad},
        ),
        Case(
            "large scores (q and k scaled by 100)",
            (100 * n((3, 4)), 100 * n((5, 4)), n((5, 2))),
        ),
        Case(
            "query 1 may attend to no key (its weights and output must be 0)",
            (n((3, 4)), n((5, 4)), n((5, 2))),
            {"mask": block_row},
        ),
    ]


def _attend_hidden_cases() -> list[Case]:
    rng = np.random.default_rng(31337)
    n = rng.standard_normal
    block = np.ones((2, 5, 3), dtype=bool)
    block[0, 2] = False  # batch 0, query 2 may attend to nothing
    block[1, :, 0] = False  # batch 1: nobody attends to key 0
    return [
        Case("hidden: 5 queries, 3 keys, d_k=6, d_v=4", (n((5, 6)), n((3, 6)), n((3, 4)))),
        Case(
            "hidden: batch 2, 5 queries, 3 keys, d_k=3 (seq_k == d_k), d_v=2, with a mask",
            (n((2, 5, 3)), n((2, 3, 3)), n((2, 3, 2))),
            {"mask": block},
        ),
        Case(
            "hidden: causal (6, 6), large scores",
            (30 * n((6, 5)), 30 * n((6, 5)), n((6, 3))),
            {"mask": _causal_mask(6)},
        ),
        Case(
            "hidden: padding (3, 1, 7), lengths 7, 1, 4",
            (n((3, 2, 4)), n((3, 7, 4)), n((3, 7, 5))),
            {"mask": _padding_mask([7, 1, 4], 7)},
        ),
    ]


def _attend_build(
    *,
    scale="sqrt",
    axis=-1,
    normalise=True,
    mask_mode="before",
    invert_mask=False,
    fill="guard",
    transpose_k=True,
    transpose_w=False,
    max_mode="row",
    outputs="pair",
    blend="v",
    keepdims=True,
):
    """Build one attention function; the defaults give the correct one.

    Each keyword is one choice a learner makes: ``scale`` ("sqrt", "none", "d_k", "d_v",
    "seq_k", "mult", "const8"), ``axis`` of the softmax (-1, -2, "all"), ``normalise``,
    ``mask_mode`` ("before", "after", "multiplied", "added", "ignored"), ``invert_mask``,
    ``fill`` of blocked scores ("guard": -inf with fully masked rows kept at 0, "nan":
    -inf without, "finite": -1e9), ``transpose_k`` (True, False, "T" = k.T), ``transpose_w``,
    ``max_mode`` ("row", "none", "global", "min" or "mean": a row's smallest or mean
    score), ``outputs`` ("pair", "swapped", "out-only"), ``blend`` ("v", "k": what the
    weights average) and ``keepdims`` of the softmax's sums.
    ``mask_mode="index"`` blocks with ``s[~mask] = -inf``, which does not broadcast.
    """

    def fn(q, k, v, mask=None):
        d_k, d_v, seq_k = q.shape[-1], v.shape[-1], k.shape[-2]
        if transpose_k == "T":
            kt = k.T
        else:
            kt = np.swapaxes(k, -1, -2) if transpose_k else k
        s = q @ kt
        c = {
            "sqrt": 1 / np.sqrt(d_k),
            "none": 1.0,
            "d_k": 1 / d_k,
            "d_v": 1 / np.sqrt(d_v),
            "seq_k": 1 / np.sqrt(seq_k),
            "mult": np.sqrt(d_k),
            "const8": 1 / 8,
        }[scale]
        s = s * c
        m = None if mask is None else (~mask if invert_mask else mask)
        if m is not None and mask_mode == "before":
            s = np.where(m, s, -1e9 if fill == "finite" else -np.inf)
        elif m is not None and mask_mode == "index":
            s = s.copy()
            s[~m] = -1e9 if fill == "finite" else -np.inf
        elif m is not None and mask_mode == "multiplied":
            s = s * m
        elif m is not None and mask_mode == "added":
            s = s + m
        guard = fill != "nan"
        red = (-2, -1) if axis == "all" else axis
        if max_mode == "row":
            mx = s.max(axis=-1 if axis == "all" else axis, keepdims=True)
        elif max_mode == "global":
            mx = s.max()
        elif max_mode == "min":
            mx = s.min(axis=-1 if axis == "all" else axis, keepdims=True)
        elif max_mode == "mean":
            mx = s.mean(axis=-1 if axis == "all" else axis, keepdims=True)
        else:
            mx = np.zeros(())
        if guard:
            mx = np.where(np.isfinite(mx), mx, 0.0)
        e = np.exp(s - mx)
        if normalise:
            tot = e.sum(axis=red, keepdims=keepdims)
            w = e / (np.where(tot > 0, tot, 1.0) if guard else tot)
        else:
            w = e
        if m is not None and mask_mode == "after":
            w = w * m
        out = w @ (v if blend == "v" else k)
        wr = np.swapaxes(w, -1, -2) if transpose_w else w
        if outputs == "swapped":
            return wr, out
        if outputs == "out-only":
            return out
        return out, wr

    return fn


def _m(mid, explanation, question, **settings):
    return Misconception(
        mid, explanation, (_attend_build(**settings),), settings, question=question
    )


_NO_FULL_ROW = ("fully-masked-nan", "mask-fill-finite")  # what a fully masked row gets
_ATTEND_IDS = (
    "softmax-over-queries", "softmax-sums-everything", "weights-not-normalized", "no-scaling",
    "scale-not-sqrt", "scale-sqrt-d-v", "scale-sqrt-seq-k", "scale-multiplied", "scale-wrong",
    "mask-after-softmax", "mask-multiplied", "mask-added", "mask-ignored", "mask-inverted",
    "fully-masked-nan", "mask-fill-finite", "keys-not-transposed", "batch-not-supported",
    "weights-transposed", "unstable-softmax", "global-max", "output-arity", "outputs-swapped",
    "blends-keys", "mask-not-broadcast", "shift-by-min", "shift-by-mean",
)  # fmt: skip

register(
    Exercise(
        name="attend",
        summary="attend(q, k, v, mask=None) -> (out, weights): scaled dot-product attention",
        reference=lambda q, k, v, mask=None: _attend(q, k, v, mask=mask),
        make_cases=_attend_cases,
        make_hidden_cases=_attend_hidden_cases,
        forbidden=(
            "attnlib.core.attend",
            "attnlib.core._attend_math",
            "attnlib.core._attend_torch_fast",
        ),
        infer=infer_attend,
        build=_attend_build,
        exclusive=(
            # A fully masked query row only exists for a softmax over keys, with the mask
            # applied before it as -inf.
            *(
                frozenset({other, full})
                for full in _NO_FULL_ROW
                for other in (
                    "softmax-over-queries",
                    "softmax-sums-everything",
                    "weights-not-normalized",
                    "mask-after-softmax",
                    "mask-multiplied",
                    "mask-added",
                    "mask-ignored",
                )
            ),
            # Without exp(s - max) a -1e9 row is 0/0 (NaN), not uniform; with one max of
            # everything it underflows to 0.
            frozenset({"unstable-softmax", "mask-fill-finite"}),
            frozenset({"global-max", "mask-fill-finite"}),
            # Weights that are not normalised have no axis.
            frozenset({"weights-not-normalized", "softmax-over-queries"}),
            frozenset({"weights-not-normalized", "softmax-sums-everything"}),
            # A mask used as numbers (or not at all) has no direction to invert.
            *(
                frozenset({"mask-inverted", other})
                for other in ("mask-multiplied", "mask-added", "mask-ignored")
            ),
            # One max of everything is exactly right when everything is normalised together,
            # and is each column's max in the probe; "none" has no rows to compare.
            frozenset({"global-max", "softmax-sums-everything"}),
            frozenset({"global-max", "softmax-over-queries"}),
            # Weights not returned: their orientation cannot be seen.
            frozenset({"output-arity", "weights-transposed"}),
            frozenset({"output-arity", "outputs-swapped"}),
            frozenset({"output-arity", "blends-keys"}),
            # seq_k == d_k: the keys' output has the weights' shape, 1/√seq_k is 1/√d_k.
            frozenset({"keys-not-transposed", "blends-keys"}),
            frozenset({"keys-not-transposed", "scale-sqrt-seq-k"}),
            # Not normalised, the mask before or after the softmax look alike on a probe
            # whose allowed keys all score 0.
            frozenset({"weights-not-normalized", "mask-after-softmax"}),
            # Nothing batched runs with k.T, so no batched mask can be tried.
            frozenset({"batch-not-supported", "mask-not-broadcast"}),
            # A shift by the row minimum: masked rows (-inf or -1e9 in them) overflow or give
            # NaN before the mask can be read; over the query axis the huge-score probe
            # already breaks.
            frozenset({"shift-by-min", "fully-masked-nan"}),
            frozenset({"shift-by-min", "mask-fill-finite"}),
            frozenset({"shift-by-min", "softmax-over-queries"}),
            frozenset({"shift-by-mean", "fully-masked-nan"}),
            frozenset({"shift-by-mean", "mask-fill-finite"}),
            frozenset({"shift-by-mean", "softmax-over-queries"}),
            # scores made with q @ k: the outlier probes are built for q @ kᵀ
            frozenset({"shift-by-min", "keys-not-transposed"}),
            frozenset({"shift-by-mean", "keys-not-transposed"}),
            # A function that only runs when seq_q == seq_k can be measured no further.
            *(frozenset({"keepdims-missing", other}) for other in _ATTEND_IDS),
        ),
        misconceptions=(
            _m(
                "softmax-over-queries",
                "The softmax runs over the query axis, so each column sums to 1: every key "
                "shares out one unit of attention among the queries. A query distributes its "
                "own attention over the keys, so each row must sum to 1, along the last axis.",
                "Add up your weights along a row and down a column: which comes out as 1? Whose "
                "attention should sum to 1, a query's or a key's?",
                axis=-2,
            ),
            _m(
                "softmax-sums-everything",
                "The exponentials are divided by one sum over the whole score matrix, so all "
                "queries together share one unit of attention. Each query's row sums to 1 on "
                "its own.",
                "What does one row of your weights add up to, and what does the whole matrix "
                "add up to? Over what did your sum run?",
                axis="all",
            ),
            _m(
                "weights-not-normalized",
                "The exponentials are never divided by their row's total, so a query's weights "
                "do not sum to 1 and the output is not an average of the values.",
                "What do the rows of your weights add up to? Which step of the softmax makes "
                "them sum to 1?",
                normalise=False,
            ),
            _m(
                "no-scaling",
                "The scores are not scaled. Dot products of d_k-wide vectors have a spread that "
                "grows like the square root of d_k, which makes the softmax saturate; attention "
                "divides them by that square root before the softmax.",
                "Compare your weights with the reference's on one query: are yours sharper? By "
                "what factor would you have to multiply your scores to match, and how does it "
                "relate to d_k?",
                scale="none",
            ),
            _m(
                "scale-not-sqrt",
                "The scores are divided by d_k instead of its square root. The dot product of "
                "two random d_k-vectors has a standard deviation of the square root of d_k, so "
                "dividing by the square root brings it back to about 1; dividing by d_k "
                "flattens the weights too much.",
                "The check measured the factor your scores were multiplied by. Is it one over "
                "d_k or one over its square root, and which of the two makes the spread of the "
                "scores about 1?",
                scale="d_k",
            ),
            _m(
                "scale-sqrt-d-v",
                "The scores are divided by the square root of d_v, the width of the values. The "
                "scores compare queries with keys, so the width that sets their spread is d_k, "
                "the last size of q and k.",
                "The check measured the factor your scores were multiplied by. Which width of "
                "the inputs does it come from, and which vectors does a score multiply "
                "together?",
                scale="d_v",
            ),
            _m(
                "scale-sqrt-seq-k",
                "The scores are divided by the square root of seq_k, the number of keys. The "
                "spread of one dot product grows with the width of the vectors, d_k, not with "
                "how many keys there are.",
                "The check measured the factor your scores were multiplied by. Which size of "
                "the inputs gives it, a number of keys or a width of vectors? Which one does a "
                "single dot product depend on?",
                scale="seq_k",
            ),
            _m(
                "scale-multiplied",
                "The scores are multiplied by the square root of d_k instead of divided by it, "
                "which makes the softmax sharper still instead of keeping the spread of the "
                "scores about 1.",
                "The check measured the factor your scores were multiplied by. Is it larger or "
                "smaller than 1, and which way should scaling move wide vectors' scores?",
                scale="mult",
            ),
            _m(
                "scale-wrong",
                "The scores are scaled by a number that is not one over the square root of d_k: "
                "a fixed constant copied from an example, or the size of another axis. The "
                "factor has to come from the width of the queries and keys of the input at "
                "hand.",
                "The check measured the factor your scores were multiplied by, and the probe's "
                "sizes. Which size of the inputs did your factor come from, and is it the width "
                "of q and k?",
                scale="const8",
            ),
            _m(
                "mask-after-softmax",
                "The mask is applied to the weights after the softmax: the blocked keys were "
                "normalised together with the allowed ones, so the allowed weights no longer "
                "sum to 1. Blocking has to happen to the scores before the softmax, so that the "
                "allowed keys share the whole unit of attention.",
                "What do the partly masked rows of your weights add up to? At which step did "
                "the blocked keys stop counting: before or after the weights were normalised?",
                mask_mode="after",
            ),
            _m(
                "mask-multiplied",
                "The boolean mask is multiplied into the scores. A blocked score then becomes "
                "0, and the exponential of 0 is 1, so the key still gets weight. A blocked key "
                "must get a score whose exponential is exactly 0: minus infinity.",
                "Which weight does a blocked key get from your function? What score did it have "
                "after your masking step, and what is the exponential of that score?",
                mask_mode="multiplied",
            ),
            _m(
                "mask-added",
                "The boolean mask is added to the scores, True counting as 1, which only nudges "
                "them: blocked keys keep a weight. A blocked key needs a score of minus "
                "infinity, whose exponential is 0.",
                "With every score 0, how much more weight does an allowed key get than a "
                "blocked one in your function? What did your masking step do to the scores?",
                mask_mode="added",
            ),
            _m(
                "mask-ignored",
                "The mask argument is never used, so blocked keys get weight like any other. "
                "The scores of blocked keys have to be set to minus infinity before the "
                "softmax.",
                "Call your function with and without a mask: do the weights change? Where in "
                "your code does the mask enter?",
                mask_mode="ignored",
            ),
            _m(
                "mask-inverted",
                "The mask is read the wrong way round. In this course True means may attend: "
                "the scores where the mask is True are kept and the others are blocked.",
                "Which keys get weight 0 in your function, those where the mask is True or "
                "those where it is False? What does True mean in this course's masks?",
                invert_mask=True,
            ),
            _m(
                "fully-masked-nan",
                "A query that may attend to no key has every score at minus infinity. Its row "
                "maximum is then minus infinity, and minus infinity minus minus infinity is NaN "
                "(or its sum is 0, and 0 divided by 0 is NaN). The course's rule gives such a "
                "row weights 0 and output 0: the shift must not be minus infinity there, and a "
                "zero sum must not be divided by.",
                "Which row of your weights is NaN, and which keys may that query attend to? "
                "Follow that row through your steps: what is its maximum, what is each score "
                "minus it, and what is its sum?",
                fill="nan",
            ),
            _m(
                "mask-fill-finite",
                "Blocked scores are set to a large negative number instead of minus infinity. "
                "Partly masked rows come out right, but in a row where every key is blocked all "
                "scores are that same number, and the softmax of equal numbers is uniform, not "
                "0. Minus infinity, with the fully masked rows given weight 0, keeps the "
                "course's rule.",
                "What weights does the query with no allowed key get from your function? What "
                "number did you give its blocked scores, and what is the softmax of a row of "
                "equal numbers?",
                fill="finite",
            ),
            _m(
                "keys-not-transposed",
                "The keys are not transposed: each query is paired with the columns of k (one "
                "feature across keys) instead of its rows (one key each). The scores need the "
                "last two axes of k swapped, giving one score per query and key; the product "
                "you wrote only runs when seq_k equals d_k.",
                "Your function runs only when seq_k equals d_k. Write score [0, 0] out by hand: "
                "which numbers of k does your product pair with query 0, a row or a column?",
                transpose_k=False,
            ),
            _m(
                "batch-not-supported",
                "Batched inputs fail or get mixed: a transpose that reverses every axis (for a "
                "3-D array it turns (batch, seq_k, d_k) into (d_k, seq_k, batch)), a fixed axis "
                "number, or a size read from the front. Only the last two axes of k may be "
                "swapped, and every axis and size must be counted from the end.",
                "Your function works on one sentence and not on a batch of two. Print the shape "
                "of your transposed keys for a batch: which axes did it swap? Which of your "
                "axes or sizes are counted from the front?",
                transpose_k="T",
            ),
            _m(
                "weights-transposed",
                "The returned weights are transposed: one row per key. Rows are queries and "
                "columns are keys, so the weights have shape (seq_q, seq_k) with any batch axes "
                "in front.",
                "What shape are the weights you return, and which of its sizes is the number of "
                "queries?",
                transpose_w=True,
            ),
            _m(
                "unstable-softmax",
                "The scores go into the exponential unshifted. Large scores overflow to "
                "infinity, and the weights become NaN. Shifting a row by a constant changes "
                "nothing in its weights, and the row's own maximum keeps every exponent at or "
                "below 0.",
                "Which rows of your weights are NaN, and how large are their scores? What does "
                "the exponential of a score of a few thousand give, and which shift of the row "
                "would keep it small?",
                max_mode="none",
            ),
            _m(
                "global-max",
                "One maximum of the whole score array is subtracted. A row whose scores all lie "
                "far below it gets exponentials that underflow to 0 everywhere, and then 0 "
                "divided by 0. Each row needs its own maximum.",
                "The row of huge scores comes out right and the ordinary rows do not. What did "
                "you subtract from an ordinary row, and what are its exponentials after that?",
                max_mode="global",
            ),
            _m(
                "shift-by-min",
                "Each row is shifted by its smallest score, so every exponent is 0 or above: a "
                "row whose scores spread over more than about 709 overflows to infinity and its "
                "weights become NaN. The shift that keeps every exponent at or below 0 is the "
                "row's largest score.",
                "After your shift, what is the largest exponent in a row where one score lies "
                "far below the others? Which shift keeps every exponent at or below 0?",
                max_mode="min",
            ),
            _m(
                "shift-by-mean",
                "Each row is shifted by its mean score. Most exponents stay small, but in a row "
                "with one score far above the others that score is still hundreds above 0 after "
                "the shift, and its exponential overflows to infinity. Only the row's largest "
                "score keeps every exponent at or below 0.",
                "Your weights break on a row with one score far above the rest. What is that "
                "score's exponent after your shift? Which shift would bring the largest "
                "exponent of any row to exactly 0?",
                max_mode="mean",
            ),
            _m(
                "output-arity",
                "attend returns two things, in this order: the output, of shape (seq_q, d_v), "
                "and the weights, of shape (seq_q, seq_k), with any batch axes in front.",
                "How many values does your function return, and what are their shapes? What "
                "does the exercise ask it to return?",
                outputs="out-only",
            ),
            _m(
                "outputs-swapped",
                "The two results come back in the wrong order. The exercise returns the blended "
                "values first and the weights second.",
                "What shape is the first value you return, and what shape is the second? In "
                "which order does the exercise ask for them?",
                outputs="swapped",
            ),
            _m(
                "blends-keys",
                "The weights average the keys. Keys are what the queries are compared with; "
                "what a query receives is the weighted average of the values.",
                "How wide is your output, and which input has that width? Which of q, k and v "
                "should the weights average?",
                blend="k",
            ),
            _m(
                "mask-not-broadcast",
                "Blocking by boolean indexing needs a mask of exactly the scores' shape, so a "
                "padding mask of shape (batch, 1, seq_k) fails. The mask has to be broadcast "
                "over the queries, as an elementwise choice between the score and minus "
                "infinity does.",
                "A full-size mask works and a padding mask of shape (batch, 1, seq_k) raises. "
                "Which step of your masking requires the mask to have the scores' exact shape?",
                mask_mode="index",
            ),
            _m(
                "keepdims-missing",
                "A maximum or sum over the keys has lost its axis: one flat list with a number "
                "per query, which numpy lines up with the keys, not the queries. It only runs "
                "when seq_q equals seq_k, and is wrong there. Keep the reduced axis with length "
                "1.",
                "Your function raises when seq_q and seq_k differ. Print the shape of your row "
                "maxima or row sums next to the shape of the scores: which axis do they line up "
                "with?",
                keepdims=False,
            ),
        ),
    )
)
