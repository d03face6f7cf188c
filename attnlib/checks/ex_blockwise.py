"""Exercise of lesson 11: the running-max update of blockwise attention.

* ``online_softmax_update(m, l, acc, s_block, v_block) -> (m_new, l_new, acc_new)`` —
  fold one block of scores into the running softmax.

Inputs are numpy float64 arrays with non-square shapes.

Worth two points, graded in two parts of one point (:func:`attnlib.checks.part`), each in
its own locked cell of the lesson: ``online_softmax_update_blocks`` (ordinary blocks: a
first block, a rising and a steady maximum, masked keys, large scores) and
``online_softmax_update_masked_rows`` (tiles in which a row has seen only masked keys so
far: it stays ``m = -inf, l = 0, acc = 0`` with no NaN, and carries on normally when its
first visible key arrives).

Diagnosis by inference (see :mod:`attnlib.checks._core`): whether the running max is
updated (per row, keeping the old max), and — from the same block folded into two
different running states — the factor on what was summed before (exp(m_old - m_new), 1 or
its inverse) and the one on the block's own terms (1; exp(m_new - m_old) for
exponentials against a stale max; exp(m_old - m_new) when the factor multiplies the block's
terms too), and whether the numerator comes back divided by the new running sum.

What a failing check shows first (see :func:`attnlib.checks.check`) is each Finding's
measurement and the misconception's question; the cause, its explanation, comes second.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._cases import register_parts
from attnlib.checks._core import Case, Exercise, Finding, Misconception, register
from attnlib.checks.measure import close, tolerances

# ----------------------------------------------------------------------------------------
# online_softmax_update — lesson 11
# ----------------------------------------------------------------------------------------


def _online_cases(seed: int = 1111) -> list[Case]:
    """Every case: the ordinary blocks, then the rows fully masked so far."""
    return _online_block_cases(seed) + _online_masked_cases(seed + 1)


def _online_block_cases(seed: int = 1111) -> list[Case]:
    """Ordinary blocks: every row has seen (or now sees) at least one visible key."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    seq_q, bk, d_v = 3, 5, 4

    def start():
        return np.full((seq_q, 1), -np.inf), np.zeros((seq_q, 1)), np.zeros((seq_q, d_v))

    # a state after one earlier block (small scores), then a block with larger scores
    m_prev = np.array([[0.5], [1.0], [-0.2]])
    l_prev = np.array([[2.0], [1.5], [3.1]])
    acc_prev = n((seq_q, d_v))
    masked = n((seq_q, bk))
    masked[0, 2:] = -np.inf  # some keys blocked (a causal tile)
    big_m = np.array([[900.0], [950.0], [1000.0]])
    return [
        Case("first block (m = -inf, l = 0, acc = 0)", (*start(), n((seq_q, bk)), n((bk, d_v)))),
        Case(
            "a later block whose scores raise the max",
            (m_prev, l_prev, acc_prev, 3.0 + n((seq_q, bk)), n((bk, d_v))),
        ),
        Case(
            "a later block with lower scores (max unchanged)",
            (m_prev + 5.0, l_prev, acc_prev, n((seq_q, bk)) - 2.0, n((bk, d_v))),
        ),
        Case(
            "batch 2: block with some keys masked (-inf)",
            (
                m_prev[None].repeat(2, 0),
                l_prev[None].repeat(2, 0),
                n((2, seq_q, d_v)),
                np.stack([masked, 2.0 + n((seq_q, bk))]),
                n((2, bk, d_v)),
            ),
        ),
        Case(
            "large scores (around 1000)",
            (big_m, l_prev, acc_prev, 1000.0 + 10 * n((seq_q, bk)), n((bk, d_v))),
        ),
    ]


def _online_masked_cases(seed: int = 1112) -> list[Case]:
    """Causal tiles in which a row has seen only masked keys so far (m = -inf, l = 0,
    acc = 0): it must stay so, with no NaN, and carry on when a visible key arrives. The
    other rows of the same tiles are ordinary (a first block, a rising maximum)."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    seq_q, bk, d_v = 3, 5, 4
    inf = np.inf
    # after one earlier block: rows 0 and 2 have seen keys, row 1 none yet
    m_prev = np.array([[0.5], [-inf], [-0.2]])
    l_prev = np.array([[2.0], [0.0], [3.1]])
    acc_prev = n((seq_q, d_v))
    acc_prev[1] = 0.0

    def block(masked_rows, shift=0.0):
        s = shift + n((seq_q, bk))
        s[list(masked_rows)] = -inf
        return s

    # rows 0 and 2 keep their maximum (lower scores); row 1 sees its first three keys
    first_sight = n((seq_q, bk)) - 6.0
    first_sight[1] += 6.0
    first_sight[1, :2] = -inf
    batch_m = np.stack([m_prev, np.full((seq_q, 1), -inf)])  # (2, seq_q, 1)
    batch_l = np.stack([l_prev, np.zeros((seq_q, 1))])
    batch_acc = np.stack([acc_prev, np.zeros((seq_q, d_v))])
    batch_s = np.stack([block([1], 2.0), block([0, 2])])  # (2, seq_q, bk)
    return [
        Case(
            "first block, query 1 fully masked so far (m = -inf and every score -inf)",
            (np.full((seq_q, 1), -inf), np.zeros((seq_q, 1)), np.zeros((seq_q, d_v)))
            + (block([1]), n((bk, d_v))),
        ),
        Case(
            "a later block: query 1 still sees no key, the others' maximum rises",
            (m_prev, l_prev, acc_prev, block([1], 3.0), n((bk, d_v))),
        ),
        Case(
            "a later block: query 1 sees its first keys (m = -inf before)",
            (m_prev, l_prev, acc_prev, first_sight, n((bk, d_v))),
        ),
        Case(
            "batch 2: rows that have seen no key yet in both (one sentence not started at all)",
            (batch_m, batch_l, batch_acc, batch_s, n((2, bk, d_v))),
        ),
    ]


def _online_variant(
    *,
    rescale_sum=True,
    rescale_acc=True,
    update_max=True,
    sign=1.0,
    guard_empty=True,
    p_max="new",
    rescale_block=False,
    normalise=False,
    keepdims_sum=True,
):
    """The running-softmax update with the given choices; the defaults give the right one.

    ``update_max``: True, False (m kept), "block" (the block's max alone, the old max
    forgotten) or "global" (the largest score of the whole block, every row alike);
    ``sign=-1`` turns the rescaling factor upside down; ``guard_empty=False`` subtracts a
    max of -inf in a row that has seen only masked keys; ``p_max="old"`` takes the block's
    exponentials against the stale max m instead of m_new; ``rescale_block=True`` multiplies
    the block's terms by the factor too (alpha * (l + sum p)); ``normalise=True`` returns
    the numerator divided by the new running sum; ``keepdims_sum=False`` sums the block's
    terms without keeping the summed axis, so that (seq_q, 1) + (seq_q,) broadcasts to
    (seq_q, seq_q) (and raises for a batch).
    """

    def fn(m, l, acc, s_block, v_block):
        if update_max == "block":
            m_new = s_block.max(axis=-1, keepdims=True)
        elif update_max == "global":
            m_new = np.maximum(m, s_block.max())
        else:
            m_new = np.maximum(m, s_block.max(axis=-1, keepdims=True)) if update_max else m
        with np.errstate(all="ignore"):
            m_safe = np.where(np.isfinite(m_new), m_new, 0.0) if guard_empty else m_new
            alpha = np.exp(sign * (m - m_safe))
            p = np.exp(s_block - (m_safe if p_max == "new" else m))
            b = alpha if rescale_block else 1.0
            l_new = (l * alpha if rescale_sum else l) + b * p.sum(axis=-1, keepdims=keepdims_sum)
            acc_new = (acc * alpha if rescale_acc else acc) + b * (p @ v_block)
            if normalise:
                acc_new = acc_new / np.where(l_new > 0, l_new, 1.0)
        return m_new, l_new, acc_new

    return fn


def _online_probe(raise_max: bool):
    rng = np.random.default_rng(11 if raise_max else 12)
    n = rng.standard_normal
    m = np.array([[0.5], [1.0], [-0.2]])
    l = np.array([[2.0], [1.5], [3.1]])
    acc = n((3, 4))
    s = (3.0 + n((3, 5))) if raise_max else (n((3, 5)) - 8.0)
    return m, l, acc, s, n((5, 4))


def _factor(new, old, fresh, rel=1e-6, abs_=1e-9):
    """The factor f with new = f * old + fresh, fitted per row; None if none fits."""
    d, o = new - fresh, np.broadcast_to(old, new.shape)
    den = np.maximum((o * o).sum(axis=-1, keepdims=True), 1e-300)
    f = (d * o).sum(axis=-1, keepdims=True) / den
    return f if close(f * o, d, rel=rel, abs_=abs_) else None


def _infer_online(learner) -> list[Finding]:
    found = []
    probes, outcomes = {}, []
    for raise_max in (True, False):
        args = _online_probe(raise_max)
        o = learner(*(a.copy() for a in args))
        if not o.ok or o.arity != 3 or any(x is None for x in o.parts):
            return []
        probes[raise_max] = (args, o.parts)
        outcomes.append(o)
    (m, l, acc, s, v), (m_new, l_new, acc_new) = probes[True]
    block_max = s.max(axis=-1, keepdims=True)
    if m_new.shape != m.shape:
        return []
    # A first block in which row 1 has seen only masked keys.
    rng = np.random.default_rng(13)
    s0 = rng.standard_normal((3, 5))
    s0[1] = -np.inf
    o0 = learner(np.full((3, 1), -np.inf), np.zeros((3, 1)), np.zeros((3, 4)), s0, v.copy())
    if o0.ok and o0.arity == 3 and all(x is not None for x in o0.parts):
        rows_ok = [all(np.isfinite(x[i]).all() for x in o0.parts[1:]) for i in range(3)]
        if rows_ok == [True, False, True]:  # (NaN everywhere would be another mistake)
            found.append(
                Finding(
                    "masked-row-nan",
                    "on a first block where row 1 has only masked scores (all -inf, with "
                    "m = -inf), that row's l or acc comes out NaN; rows 0 and 2 are finite.",
                )
            )
    if close(m_new, m) and not close(m, block_max):
        found.append(
            Finding(
                "max-not-updated",
                f"a block whose rows' largest scores ({np.round(block_max[:, 0], 2).tolist()}) "
                f"are above the running max ({m[:, 0].tolist()}) leaves your m unchanged.",
            )
        )
        return found
    (m2, _, _, s2, _), (m2_new, _, _) = probes[False]
    if m2_new.shape == m2.shape and close(m2_new, s2.max(axis=-1, keepdims=True)):
        found.append(
            Finding(
                "max-ignores-previous",
                f"a block whose scores are all below the running max ({m2[:, 0].tolist()}) "
                f"lowers your m to {np.round(m2_new[:, 0], 2).tolist()}.",
            )
        )
    whole = np.maximum(m, s.max())  # a max over the whole block, every row alike
    if not close(m_new, np.maximum(m, block_max)):
        if not (close(m_new, whole) and np.isfinite(m_new).all()):
            return found
        found.append(
            Finding(
                "max-over-whole-block",
                f"for rows whose own largest scores are {np.round(block_max[:, 0], 2).tolist()} "
                f"your m_new is {np.round(m_new[:, 0], 2).tolist()}: the same for every row.",
            )
        )
    # The same block against a second running state: new = a * old + b * fresh separates
    # the factor on what was summed before (a) from the one on the block's terms (b).
    o2 = learner(m.copy(), 2.0 * l + 0.7, acc[::-1].copy() - 0.3, s.copy(), v.copy())
    if not o2.ok or o2.arity != 3 or any(x is None for x in o2.parts):
        return found
    tol = tolerances(max(o.eps for o in (*outcomes, o2)))
    alpha = np.exp(m - m_new)  # (seq_q, 1), < 1 here: the max rose
    p = np.exp(s - m_new)  # against the learner's own m_new
    rose = f"for a block that raised the max from {m[:, 0].tolist()} to " + str(
        np.round(m_new[:, 0], 2).tolist()
    )
    l_new2, acc_new2 = o2.parts[1], o2.parts[2]
    n = m.shape[0]
    if l_new.shape == (n, n) and close(l_new, alpha * l + p.sum(axis=-1)[None, :], *tol):
        found.append(
            Finding(
                "sum-keepdims-lost",
                f"for {n} query rows your l_new has shape {l_new.shape}, not ({n}, 1): "
                f"entry (i, j) is row i's rescaled old sum plus row j's block sum.",
            )
        )
    stale = block = False
    for name, new, new2, old, old2, fresh, mid in (
        ("l", l_new, l_new2, l, 2.0 * l + 0.7, p.sum(axis=-1, keepdims=True),
         "sum-not-rescaled"),
        ("acc", acc_new, acc_new2, acc, acc[::-1] - 0.3, p @ v, "acc-not-rescaled"),
    ):  # fmt: skip
        if new.shape != fresh.shape or new2.shape != fresh.shape:
            continue
        a = _factor(new - new2, old - old2, np.zeros_like(fresh), *tol)
        if a is None and name == "acc" and l_new.shape == l_new2.shape == m.shape:
            # a numerator divided by the new running sum: undo the division, and say so
            new, new2 = new * l_new, new2 * l_new2
            a = _factor(new - new2, old - old2, np.zeros_like(fresh), *tol)
            if a is not None:
                found.append(
                    Finding(
                        "acc-normalised",
                        f"{rose}, your acc_new times your l_new is a running numerator "
                        "(the old acc rescaled plus the block's terms): your acc_new is that "
                        f"numerator divided by l_new = {np.round(l_new[:, 0], 4).tolist()}.",
                    )
                )
        if a is None:
            continue
        b = _factor(new - a * old, fresh, np.zeros_like(fresh), *tol)
        if b is None:
            continue
        shown = np.round(a[:, 0], 4).tolist()
        if close(a, np.ones_like(a), rel=tol[0]):
            found.append(
                Finding(
                    mid,
                    f"{rose}, the old {name} reaches your {name}_new with the factor "
                    f"{shown}: unchanged.",
                )
            )
        elif close(a, 1 / alpha, rel=tol[0]):
            found.append(
                Finding(
                    "rescale-inverted",
                    f"{rose}, the old {name} reaches your {name}_new multiplied by {shown}: "
                    "more than 1, it grows.",
                )
            )
        if not stale and close(b, 1 / alpha, rel=tol[0]):
            stale = True
            found.append(
                Finding(
                    "stale-max",
                    f"{rose}, the block's terms in your {name}_new are "
                    f"{np.round(b[:, 0], 4).tolist()} times the block's exponentials taken "
                    "against the new max: more than 1.",
                )
            )
        elif not block and close(b, alpha, rel=tol[0]) and not close(a, 1 / alpha, rel=tol[0]):
            block = True
            found.append(
                Finding(
                    "block-terms-rescaled",
                    f"{rose}, the block's terms in your {name}_new are "
                    f"{np.round(b[:, 0], 4).tolist()} times the block's exponentials taken "
                    "against the new max: less than 1.",
                )
            )
    return found


def _online_reference(m, l, acc, s_block, v_block):
    from attnlib.blockwise import online_softmax_update

    return online_softmax_update(m, l, acc, s_block, v_block)


register(
    Exercise(
        name="online_softmax_update",
        summary="online_softmax_update(m, l, acc, s_block, v_block) -> (m_new, l_new, acc_new)",
        reference=_online_reference,
        make_cases=_online_cases,
        make_hidden_cases=lambda: [Case("hidden: " + c.label, c.args) for c in _online_cases(2222)],
        rtol=1e-7,
        atol=1e-9,
        forbidden=("attnlib.blockwise.online_softmax_update",),
        infer=_infer_online,
        build=_online_variant,
        exclusive=(
            # m never changes: there is nothing to rescale by
            frozenset({"max-not-updated", "sum-not-rescaled"}),
            frozenset({"max-not-updated", "acc-not-rescaled"}),
            frozenset({"max-not-updated", "rescale-inverted"}),
            # both already make every row of a first block NaN (l = 0 times inf)
            frozenset({"max-not-updated", "masked-row-nan"}),
            frozenset({"rescale-inverted", "masked-row-nan"}),
            # one max for every row: a row that has seen nothing gets a finite max, no NaN
            frozenset({"max-over-whole-block", "masked-row-nan"}),
            # the stale max makes every row of a first block inf; with m never updated it
            # is no longer stale
            frozenset({"stale-max", "masked-row-nan"}),
            frozenset({"stale-max", "max-not-updated"}),
            # the factor on the block's terms: stale (1/alpha) times alpha is right again;
            # inverted, it reads as stale; with m never updated alpha is 1
            frozenset({"block-terms-rescaled", "stale-max"}),
            frozenset({"block-terms-rescaled", "rescale-inverted"}),
            frozenset({"block-terms-rescaled", "max-not-updated"}),
            frozenset({"acc-normalised", "max-not-updated"}),
            # a sum of the wrong shape: measured with the right factors on both parts
            *(
                frozenset({"sum-keepdims-lost", other})
                for other in (
                    "sum-not-rescaled",
                    "max-not-updated",
                    "stale-max",
                    "block-terms-rescaled",
                    "rescale-inverted",
                    "acc-normalised",
                    "masked-row-nan",
                )
            ),
        ),
        misconceptions=(
            Misconception(
                "sum-not-rescaled",
                "The running sum keeps terms taken against the old maximum next to the "
                "block's terms taken against the new one: the two parts are on different "
                "scales. When the maximum rises, what was summed before must be brought to "
                "the new maximum, by the factor alpha, before the block's terms are added.",
                (_online_variant(rescale_sum=False),),
                {"rescale_sum": False},
                question="When a block raises the maximum, your l_new keeps the old sum at "
                "full size. Against which maximum were the old terms taken, and against "
                "which the block's new ones?",
            ),
            Misconception(
                "acc-not-rescaled",
                "The running numerator acc is not rescaled when the maximum rises. Its old "
                "terms were taken against the old maximum, exactly like the old sum's, and "
                "need the same factor alpha; otherwise the ratio acc / l weights the "
                "earlier keys too heavily.",
                (_online_variant(rescale_acc=False),),
                {"rescale_acc": False},
                question="When a block raises the maximum, your acc_new keeps the old "
                "numerator at full size. Is it built from the same kind of terms as the "
                "running sum, and what happens to those terms when the maximum rises?",
            ),
            Misconception(
                "max-not-updated",
                "The running maximum is never updated with the block's scores, so the "
                "exponentials are taken against a maximum that is too small: they can "
                "overflow, and on the first block, where the maximum is minus infinity, "
                "they are infinite. The new maximum is the larger of the old one and the "
                "row's largest score in the block, and this step's exponentials use it.",
                (_online_variant(update_max=False),),
                {"update_max": False},
                question="A block with larger scores than any before leaves your m as it "
                "was. What should m hold after this block, and what does the exponential "
                "of a score far above m do?",
            ),
            Misconception(
                "max-ignores-previous",
                "The new maximum is the block's maximum alone; the old one is forgotten. The "
                "running maximum is the largest score seen so far, in this block or before, "
                "so it can only stay or rise.",
                (_online_variant(update_max="block"),),
                {"update_max": "block"},
                question="A block whose scores all lie below the running maximum lowers "
                "your m. Is m the maximum of this block, or of everything seen so far?",
            ),
            Misconception(
                "max-over-whole-block",
                "The new maximum is the largest score of the whole block, the same for "
                "every row. Each query row keeps its own running maximum: the maximum runs "
                "along the keys of that row only. With one maximum for all rows, a row whose "
                "scores lie far below another row's underflows to a sum of 0.",
                (_online_variant(update_max="global"),),
                {"update_max": "global"},
                question="Your m_new is the same number for every row, although the rows' "
                "largest scores differ. Over which axis, or axes, did you take the block's "
                "maximum?",
            ),
            Misconception(
                "stale-max",
                "The block's exponentials are taken against the old maximum instead of the "
                "new one. The old terms were moved to the new maximum, so the block's terms "
                "must be taken against the new maximum too; on a first block, where the old "
                "maximum is minus infinity, they overflow to infinity.",
                (_online_variant(p_max="old"),),
                {"p_max": "old"},
                question="The block's own terms in your result are too large, by a factor "
                "that grows with how far the maximum rose. Against which maximum did you "
                "take the block's exponentials?",
            ),
            Misconception(
                "block-terms-rescaled",
                "The factor alpha multiplies the block's terms as well as what was summed "
                "before. Only the earlier terms were taken against the old maximum; the "
                "block's exponentials are already taken against the new one, and are added "
                "as they are.",
                (_online_variant(rescale_block=True),),
                {"rescale_block": True},
                question="The block's own terms in your result come out smaller than the "
                "block's exponentials. Which terms of your sum were taken against the old "
                "maximum, and which already against the new one?",
            ),
            Misconception(
                "rescale-inverted",
                "The rescaling factor is upside down: the exponential of the new maximum "
                "minus the old one, which is above 1. Moving terms from the old maximum to a "
                "larger new one shrinks them: by the exponential of the old maximum minus "
                "the new one, at most 1.",
                (_online_variant(sign=-1.0),),
                {"sign": -1.0},
                question="When the maximum rises, your old sum grows. Is the exponential of "
                "a score larger against a small maximum or against a large one, and so "
                "should moving a term to the new maximum make it bigger or smaller?",
            ),
            Misconception(
                "sum-keepdims-lost",
                "The block's sum drops the axis it sums over: one number per row, shape "
                "(seq_q,), added to the running sum of shape (seq_q, 1). Broadcasting then "
                "pairs every row's old sum with every row's block sum, a (seq_q, seq_q) "
                "table, and fails outright with a batch in front. The summed axis must be "
                "kept, so that each row adds its own block sum.",
                (_online_variant(keepdims_sum=False),),
                {"keepdims_sum": False},
                question="Your l_new has one row and one column per query row, where one "
                "number per row belongs. Print the shape of each of the two terms you add "
                "up: what does broadcasting make of them?",
            ),
            Misconception(
                "acc-normalised",
                "The numerator is divided by the running sum inside the update. acc is the "
                "running numerator, not the output: the next block rescales it and adds its "
                "own terms to it, which is only right while it is an undivided sum. The "
                "division by l happens once, after the last block.",
                (_online_variant(normalise=True),),
                {"normalise": True},
                question="Your acc_new is the right numerator divided by your l_new. What "
                "will the next block add to acc, and when should the division by l happen?",
            ),
            Misconception(
                "masked-row-nan",
                "A row that has seen only masked keys so far has a maximum of minus "
                "infinity, and a score of minus infinity minus that maximum is undefined: "
                "NaN. Such a row must stay empty (maximum minus infinity, sum 0, numerator "
                "0), so in that row the exponentials must be taken against some finite "
                "number instead.",
                (_online_variant(guard_empty=False),),
                {"guard_empty": False},
                question="A row whose scores so far are all minus infinity comes out NaN. "
                "What is minus infinity minus minus infinity, where does your code compute "
                "it, and what should a row that has seen nothing hold?",
            ),
        ),
    )
)


_ONLINE_IDS = (
    "sum-not-rescaled",
    "acc-not-rescaled",
    "max-not-updated",
    "max-ignores-previous",
    "max-over-whole-block",
    "stale-max",
    "block-terms-rescaled",
    "rescale-inverted",
    "acc-normalised",
    "sum-keepdims-lost",
)
register_parts(
    "online_softmax_update",
    [
        (
            "online_softmax_update_blocks",
            "ordinary blocks: the running max, sum and numerator, rescaled by exp(m - m_new)",
            {
                "ids": _ONLINE_IDS,
                "make_cases": _online_block_cases,
                "make_hidden_cases": lambda: [
                    Case("hidden: " + c.label, c.args) for c in _online_block_cases(2222)
                ],
            },
        ),
        (
            "online_softmax_update_masked_rows",
            "a row that has seen only masked keys so far stays m = -inf, l = 0, acc = 0 "
            "(no NaN) and carries on when its first visible key arrives",
            {
                "ids": (*_ONLINE_IDS, "masked-row-nan"),
                "make_cases": _online_masked_cases,
                "make_hidden_cases": lambda: [
                    Case("hidden: " + c.label, c.args) for c in _online_masked_cases(2223)
                ],
            },
        ),
    ],
)
