"""Probes that read the attention a learner's function computes (lesson 03's checks).

* The score -> weight map, shared by softmax (:mod:`attnlib.checks._softmax_exercise`) and
  attend (:mod:`attnlib.checks.ex_attention`): which rows break on huge scores
  (:func:`stability_finding`) and on a row with one score far below or above the rest
  (:func:`shift_findings`, the shift a row was given, in whatever dtype), which axis the
  weights sum to 1 over (:func:`axis_findings`), the multiplier the scores were scaled by
  (:func:`fit_any`, a fit of log-weights against candidate scores).
* attend's inference (:func:`infer_attend`): on probes whose values are an identity, the
  output *is* the weights, so the scale, what blocked keys and fully masked rows get, a
  mask that does not broadcast, and whether a batch gives what its elements give one at a
  time are read off directly.
"""

from __future__ import annotations

import numpy as np

from attnlib.checks._core import Finding
from attnlib.checks.measure import (
    close,
    fmt,
    log_fit,
    name_factor,
    normalisation,
    tolerance,
    tolerances,
)

# ----------------------------------------------------------------------------------------
# Shared by softmax and attend: probes of the score -> weight map.
# ----------------------------------------------------------------------------------------


def _bad_rows(w: np.ndarray) -> list[int]:
    """Rows (last-but-one axis, first matrix) that are not finite or are entirely zero."""
    w2 = w.reshape(-1, *w.shape[-2:])[0] if w.ndim >= 2 else w[None]
    return [i for i in range(w2.shape[0]) if not np.isfinite(w2[i]).all() or not w2[i].any()]


def stability_finding(w: np.ndarray, axis: str, where: str) -> Finding | None:
    """Read the weights of a probe whose row 0 has huge positive scores (~2e4), row 2 huge
    negative ones, rows 1 and 3 ordinary ones: which rows broke says how the softmax was
    made stable (or not)."""
    bad = _bad_rows(w)
    if axis == "queries":  # columns are normalised: rows of zeros are expected there
        bad = [] if np.isfinite(w).all() else bad
    if not bad:
        return None
    if axis == "queries" or 0 in bad:
        return Finding(
            "unstable-softmax",
            f"{where} whose scores reach ±2e4, the weights come out NaN or inf (rows {bad}), "
            "while ordinary scores give finite weights.",
        )
    if 1 in bad or 3 in bad:
        return Finding(
            "global-max",
            f"{where} with one row of huge scores (2e4), that row is fine but the rows of "
            f"ordinary scores get NaN or all-zero weights (rows {bad}).",
        )
    return None


def axis_findings(axis: str, w: np.ndarray, where: str, *, softmax_ids: bool) -> list[Finding]:
    wrong_axis = "softmax-wrong-axis" if softmax_ids else "softmax-over-queries"
    if axis == "queries":
        cols = np.round(w.reshape(-1, *w.shape[-2:])[0].sum(axis=-2), 4).tolist()
        return [
            Finding(
                wrong_axis,
                f"on {where} each column sums to 1 ({cols[:4]}...), the rows do not.",
            )
        ]
    if axis == "all":
        return [
            Finding(
                "softmax-sums-everything",
                f"on {where} the weights of all rows together sum to 1 "
                f"(total {fmt(float(w.reshape(-1, *w.shape[-2:])[0].sum()))}), "
                "not each row on its own.",
            )
        ]
    if axis == "none":
        rows = np.round(w.reshape(-1, w.shape[-1]).sum(axis=-1), 3).tolist()
        return [
            Finding(
                "weights-not-normalized",
                f"on {where} the rows sum to {rows[:4]}, not 1, and neither do the columns.",
            )
        ]
    return []


def fit_any(w: np.ndarray, scores: list[tuple[str, np.ndarray]], axis: str):
    """The best (score name, multiplier, residual) explaining log w for this axis."""
    modes = {"keys": ["row"], "queries": ["col"], "all": ["all", "row"], "none": ["row", "col"]}
    modes = modes[axis]
    best = None
    for name, sc in scores:
        for mode in modes:
            c, res = log_fit(w, sc, mode)
            if best is None or res < best[2]:
                best = (name, c, res)
    return best


# Probe sizes (seq_q, seq_k, d_k, d_v): every size different, so that each candidate
# scale (1/√d_k, 1/√d_v, 1/√seq_k, ...) is a different number; the square one (seq_k ==
# d_k) lets "k not transposed" run.
_MAIN = (4, 5, 16, 8)
_SQUARE = (4, 6, 6, 9)


def _probe(sizes, seed, *, batch=(), big=False, zero_q=False, spread=None):
    """q, k, v for a probe. v = [identity | noise], so out[..., :seq_k] are the weights.

    ``big``: row 0 scores ~ +2e4, row 2 ~ -2e4 (each row's spread small); ``spread``: a
    number s, row 0 of ordinary scores with key 1 scoring about s (q·k, unscaled) apart from
    the others (a row's spread large)."""
    seq_q, seq_k, d_k, d_v = sizes
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*batch, seq_q, d_k)) * 0.5
    k = rng.standard_normal((*batch, seq_k, d_k)) * 0.5
    if big:  # row 0 scores ~ +2e4, row 2 ~ -2e4, rows 1 and 3 ordinary (also for q @ k)
        k[..., :, 0] = 1.0
        if seq_k == d_k:
            k[..., 0, :] = 1.0
        q[..., :, 0] = 0.0
        q[..., 0, 0] = 2e4
        q[..., 2, 0] = -2e4
    if spread is not None:  # only key 1 has feature 0; query 0 scores it about `spread`
        k[..., :, 0] = 0.0
        k[..., 1, 0] = 1.0
        q[..., 0, 0] = spread
    if zero_q:
        q = np.zeros_like(q)
    eye = np.broadcast_to(np.eye(seq_k), (*batch, seq_k, seq_k))
    v = np.concatenate([eye, rng.standard_normal((*batch, seq_k, d_v - seq_k))], axis=-1)
    return q, k, v


def _probe_mask(seq_k: int) -> np.ndarray:
    """Rows: partial, fully blocked, fully open, partial; no column is all True or False."""
    rows = {
        5: [[1, 0, 1, 0, 1], [0] * 5, [1] * 5, [0, 1, 1, 0, 0]],
        6: [[1, 0, 1, 0, 1, 0], [0] * 6, [1] * 6, [0, 1, 1, 0, 0, 1]],
    }[seq_k]
    return np.array(rows, dtype=bool)


def _read_attention(o, q, k, v):
    """(weights, out, structure findings) of an attend outcome; weights put upright.

    Parts are told apart by shape (every probe size differs). When only ``out`` comes
    back, the weights are read from it (v starts with an identity).
    """
    if not o.ok:
        return None, None, []
    seq_q, seq_k, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    lead = q.shape[:-2]
    shapes = [
        ("out", (*lead, seq_q, d_v)),
        ("w", (*lead, seq_q, seq_k)),
        ("wT", (*lead, seq_k, seq_q)),
        ("outk", (*lead, seq_q, d_k)),
    ]
    kinds = []
    for part in o.parts:
        kind = None
        if part is not None and part.dtype != bool:
            kind = next((name for name, shp in shapes if part.shape == shp), None)
        kinds.append(kind)
    # An output of the keys' width counts only if it is the weights times k.
    ws = [i for i, kd in enumerate(kinds) if kd in ("w", "wT")]
    for i, kd in enumerate(kinds):
        if kd == "outk":
            w0 = None if not ws else o.parts[ws[0]]
            if w0 is not None and kinds[ws[0]] == "wT":
                w0 = np.swapaxes(w0, -1, -2)
            rel, abs_ = tolerances(o.eps)
            if w0 is None or not close(o.parts[i], w0 @ k, rel=rel, abs_=abs_):
                kinds[i] = None
    outs = [i for i, kd in enumerate(kinds) if kd in ("out", "outk")]
    ws = [i for i, kd in enumerate(kinds) if kd in ("w", "wT")]
    found = []
    if len(o.parts) == 2 and len(outs) == 1 and len(ws) == 1:
        if outs[0] == 1:
            found.append(
                Finding(
                    "outputs-swapped",
                    f"the first value returned has shape {o.parts[0].shape} (seq_q, seq_k): "
                    "the weights; the second is the output.",
                )
            )
    elif outs or ws:
        shown = ", ".join(
            str(p.shape) if p is not None else type(x).__name__
            for p, x in zip(
                o.parts, o.value if isinstance(o.value, (tuple, list)) else [o.value], strict=True
            )
        )
        found.append(
            Finding(
                "output-arity",
                f"your function returns {len(o.parts)} value(s) ({shown}); expected two: "
                f"out {(*lead, seq_q, d_v)} and weights {(*lead, seq_q, seq_k)}.",
            )
        )
    else:
        return None, None, []
    out = o.parts[outs[0]] if outs else None
    w = o.parts[ws[0]] if ws else None
    if w is not None and kinds[ws[0]] == "wT":
        found.append(
            Finding(
                "weights-transposed",
                f"the weights come back with shape {w.shape}: (seq_k, seq_q) = ({seq_k}, "
                f"{seq_q}) instead of (seq_q, seq_k).",
            )
        )
        w = np.swapaxes(w, -1, -2)
    if out is not None and kinds[outs[0]] == "outk":
        found.append(
            Finding(
                "blends-keys",
                f"the output has shape {out.shape}: (..., seq_q, d_k) with d_k = {d_k}, "
                f"d_v = {d_v} — the weights averaged the keys, not the values.",
            )
        )
    if w is None and out is not None and kinds[outs[0]] == "out":
        w = out[..., :seq_k]
    return w, out, found


def _scale_candidates(sizes, batch=None):
    seq_q, seq_k, d_k, d_v = sizes
    cands = [
        (d_k**-0.5, f"1/√{d_k} = 1/√d_k", ""),
        (1.0, "1 (not scaled)", "no-scaling"),
        (1 / d_k, f"1/{d_k} = 1/d_k", "scale-not-sqrt"),
        (d_v**-0.5, f"1/√{d_v} = 1/√d_v", "scale-sqrt-d-v"),
        (seq_k**-0.5, f"1/√{seq_k} = 1/√seq_k", "scale-sqrt-seq-k"),
        (d_k**0.5, f"√{d_k} = √d_k", "scale-multiplied"),
        (seq_q**-0.5, f"1/√{seq_q} = 1/√seq_q", "scale-wrong"),
    ]
    if batch:
        cands.append((batch**-0.5, f"1/√{batch} = 1/√batch", "scale-wrong"))
    return [(c, (label if c == 1.0 else f"{fmt(c)} = {label}"), mid) for c, label, mid in cands]


def _scale_finding(c: float, sizes, where: str, batch=None) -> Finding | None:
    seq_q, seq_k, d_k, d_v = sizes
    named = name_factor(c, _scale_candidates(sizes, batch))
    if named is not None and named[1] == "":
        return None
    dims = f"this probe has d_k = {d_k}, d_v = {d_v}, seq_q = {seq_q}, seq_k = {seq_k}"
    if batch:
        dims += f", batch = {batch}"
    measured = f"on {where} your weights behave as if the scores q·k were multiplied by"
    if named is None:
        return Finding(
            "scale-wrong",
            f"{measured} {fmt(c)}; {dims}, so 1/√d_k = {fmt(d_k**-0.5)}.",
        )
    label, mid = named
    return Finding(mid, f"{measured} {label}; {dims}.")


def _scores_findings(w, q, k, sizes, eps, where, *, square, batch=None):
    """Axis, transposition and scale of the weights of an unmasked probe."""
    axis = normalisation(w, tolerance(eps))
    if axis == "nan":
        return axis, []
    scores = [("T", q @ np.swapaxes(k, -1, -2))]
    if square:
        scores.append(("N", q @ k))
    name, c, res = fit_any(w, scores, axis)
    if res > 1e-4 or not c > 0:
        return "nan", []  # not a softmax of the scores: nothing here to recognise
    found = axis_findings(axis, w, where, softmax_ids=False)
    if name == "N":
        found.append(
            Finding(
                "keys-not-transposed",
                f"with k of shape {k.shape[-2:]} (seq_k == d_k) your weights follow q @ k, "
                "not q @ kᵀ; with seq_k ≠ d_k your function raises.",
            )
        )
    f = _scale_finding(c, sizes, where, batch)
    if f is not None:
        found.append(f)
    return axis, found


def _mask_findings(learner, sizes, axis) -> list[Finding]:
    """What the mask does: blocks (before or after the softmax), inverted, used as numbers,
    ignored; and what a fully masked row gets."""
    seq_q, seq_k, d_k, d_v = sizes
    M = _probe_mask(seq_k)

    def ordinary_weights():
        """The weights for ordinary scores with the mask M, and with no mask at all."""
        q1, k1, v1 = _probe(sizes, 3)
        w1, _, _ = _read_attention(learner(q1, k1, v1, mask=M.copy()), q1, k1, v1)
        u1, _, _ = _read_attention(learner(q1, k1, v1), q1, k1, v1)
        return w1, u1

    q, k, v = _probe(sizes, 2, zero_q=True)  # every score 0, whatever the scale
    w, _, _ = _read_attention(learner(q, k, v, mask=M.copy()), q, k, v)
    if w is None:
        return []
    part = [0, 3]
    wp, Mp = w[part], M[part]
    if not np.isfinite(wp).all():
        return []
    tiny = 1e-8 * float(wp.max()) if wp.max() > 0 else 0.0
    blocked_small = bool((wp[~Mp] <= tiny).all()) and bool((wp[Mp] > tiny).all())
    inv_small = bool((wp[Mp] <= tiny).all()) and bool((wp[~Mp] > tiny).all())
    found = []
    if not (blocked_small or inv_small):
        ratio = float(wp[Mp].mean() / max(float(wp[~Mp].mean()), 1e-300))
        if abs(ratio - 1.0) > 1e-6:
            return [
                Finding(
                    "mask-added",
                    "with every score 0, keys the mask allows get "
                    f"{fmt(ratio)} times the weight of blocked ones (e = {fmt(np.e)}), and "
                    "blocked keys keep a weight.",
                )
            ]
        w1, u1 = ordinary_weights()
        if w1 is None or u1 is None:
            return []
        if close(w1, u1, rel=1e-9, abs_=1e-12):
            return [
                Finding(
                    "mask-ignored",
                    "the weights with a mask are the same as without it: blocked keys get "
                    "weight, and a fully masked query still attends to every key.",
                )
            ]
        return [
            Finding(
                "mask-multiplied",
                "with every score 0, blocked and allowed keys get the same weight; with "
                "ordinary scores the blocked keys still get weight, as if their scores were 0.",
            )
        ]
    eff = M if blocked_small else ~M
    if inv_small:
        found.append(
            Finding(
                "mask-inverted",
                "keys where the mask is True get weight 0 and keys where it is False get all "
                "of it.",
            )
        )
    if blocked_small and not bool((wp[~Mp] == 0).all()):
        found.append(
            Finding(
                "mask-fill-finite",
                f"blocked keys get weight {fmt(float(wp[~Mp].max()))} instead of exactly 0.",
            )
        )
    # Before or after the softmax: ordinary scores, compared with no mask at all.
    w1, u1 = ordinary_weights()
    if w1 is None or u1 is None:
        return found
    e1 = eff[part]
    # (Unnormalised weights carry no trace of when the mask was applied.)
    after = axis != "none" and np.isfinite(w1[part]).all()
    if after and close(w1[part][e1], u1[part][e1], rel=1e-6, abs_=1e-12):
        sums = np.round(w1[part].sum(axis=-1), 3).tolist()
        found.append(
            Finding(
                "mask-after-softmax",
                f"the allowed keys keep exactly the weights they have without a mask, so "
                f"the partly masked rows sum to {sums}, not 1.",
            )
        )
        return found
    if axis != "keys":
        return found
    r = 1 if blocked_small else 2  # the row with nothing allowed (after inversion)
    row = w[r]
    which = "the row with no allowed key" + (" (the all-True row, inverted)" if inv_small else "")
    if not np.isfinite(row).all():
        found.append(
            Finding(
                "fully-masked-nan",
                f"{which} gets NaN weights; the partly masked rows are right.",
            )
        )
    elif close(row, np.full(seq_k, 1 / seq_k), rel=1e-6):
        found.append(
            Finding(
                "mask-fill-finite",
                f"{which} gets uniform weights 1/{seq_k} instead of 0.",
            )
        )
    return found


_AXIS_IDS = {"softmax-over-queries", "softmax-sums-everything", "weights-not-normalized"}
_SCALE_IDS = {
    "no-scaling", "scale-not-sqrt", "scale-sqrt-d-v", "scale-sqrt-seq-k", "scale-multiplied",
    "scale-wrong",
}  # fmt: skip


def _mask_broadcast_findings(learner, sizes) -> list[Finding]:
    """A padding mask (batch, 1, seq_k) must broadcast over the queries."""
    seq_q, seq_k, d_k, d_v = sizes
    qs, ks, vs = zip(_probe(sizes, 6), _probe(sizes, 7), strict=True)
    q, k, v = (np.stack(x) for x in (qs, ks, vs))
    pad = np.ones((2, 1, seq_k), dtype=bool)
    pad[1, 0, -2:] = False
    o = learner(q, k, v, mask=pad.copy())
    if o.ok:
        return []
    full = learner(q, k, v, mask=np.broadcast_to(pad, (2, seq_q, seq_k)).copy())
    if not full.ok:
        return []
    return [
        Finding(
            "mask-not-broadcast",
            f"a mask of shape (batch, seq_q, seq_k) = (2, {seq_q}, {seq_k}) works, but the "
            f"padding mask (batch, 1, seq_k) = (2, 1, {seq_k}) raises: {o.error()[:120]}.",
        )
    ]


def _batch_findings(learner, sizes, base, square, known: set[str]) -> list[Finding]:
    """A batch of two probes against the same two probes one at a time.

    ``known`` are the ids the 2-D probes found: a batch that differs because of them (a
    fixed axis=0 is the query axis in 2-D and the batch axis in 3-D) adds nothing.
    """
    q0, k0, v0 = _probe(sizes, 1)
    q1, k1, v1 = _probe(sizes, 5)
    qb, kb, vb = (np.stack(p) for p in ((q0, q1), (k0, k1), (v0, v1)))
    ob = learner(qb, kb, vb)
    if not ob.ok:
        return [
            Finding(
                "batch-not-supported",
                f"your function works on 2-D q, k, v but raises on a batch (2, "
                f"{sizes[0]}, {sizes[2]}): {ob.error()}.",
            )
        ]
    o1 = learner(q1, k1, v1)
    if not o1.ok or ob.arity != base.arity or o1.arity != base.arity:
        return []
    consistent = all(
        pb is not None
        and p0 is not None
        and p1 is not None
        and pb.shape[1:] == p0.shape
        and close(pb[0], p0, rel=1e-6, abs_=1e-12)
        and close(pb[1], p1, rel=1e-6, abs_=1e-12)
        for pb, p0, p1 in zip(ob.parts, base.parts, o1.parts, strict=True)
    )
    if consistent:
        return []
    wb, _, _ = _read_attention(ob, qb, kb, vb)
    found = []
    if wb is not None:
        _, found = _scores_findings(
            wb, qb, kb, sizes, ob.eps, "a batch of 2 (3-D inputs)", square=square, batch=2
        )
    for group in (_AXIS_IDS, _SCALE_IDS):
        if known & group:
            found = [f for f in found if f.id not in group]
    if known & (_AXIS_IDS | _SCALE_IDS):
        return found
    if not found:
        found = [
            Finding(
                "batch-not-supported",
                "a batch of two gives different results than the same two inputs one at a time.",
            )
        ]
    return found


# The shift a softmax subtracts, read from rows of ordinary scores with one far outlier.
# exp overflows above an exponent L that depends on the dtype the learner computes in
# (about 11.1 in float16, 88.7 in float32, 709.8 in float64), so no fixed outlier serves
# them all. An outlier u above the rest of a row of n scores leaves an exponent of about u
# after a shift by the row's minimum and (n-1)/n·u after a shift by its mean; one d below
# leaves about d and d/n. The ladder finds the smallest u (doubling) that breaks a row:
# L lies in [u/2, u) for the minimum and in [0.4u, 0.8u) for the mean (n = 5). An outlier
# 1.5u below then breaks the minimum (1.5u > L) and never the mean (0.3u < 0.4u ≤ L).
# The maximum breaks neither (every exponent ≤ 0).
SPREAD_LADDER = tuple(2.0**i for i in range(3, 15))  # 8 .. 16384
SPREAD_BELOW = 1.5


def shift_findings(broken, where: str) -> list[Finding]:
    """Name the shift from the rows that break (NaN or inf) on outlier probes, after rows
    of huge scores close together came out fine: the minimum breaks on an outlier far below
    the rest as soon as on one above, the mean only on one above.

    ``broken(score)`` runs the probe whose outlier rows hold ``score`` (above the rest if
    positive, below if negative) and returns the rows that broke, or None if it could not
    be read.
    """
    for up in SPREAD_LADDER:
        rows_up = broken(up)
        if not rows_up:
            if rows_up is None:
                return []
            continue
        down = SPREAD_BELOW * up
        rows_down = broken(-down)
        if rows_down is None:
            return []
        if rows_down:
            return [
                Finding(
                    "shift-by-min",
                    f"{where} with one score {fmt(down)} below the others of its row, rows "
                    f"{rows_down} come out NaN or inf, and with one {fmt(up)} above, rows "
                    f"{rows_up}; rows of huge scores (±2e4) close together come out fine.",
                )
            ]
        return [
            Finding(
                "shift-by-mean",
                f"{where} with one score {fmt(up)} above the others of its row, rows "
                f"{rows_up} come out NaN or inf; with one {fmt(down)} below them, and with "
                "huge scores (±2e4) close together, every row comes out fine.",
            )
        ]
    return []


def _shift_findings(learner, sizes, w, q, k, axis, found) -> list[Finding]:
    """The outlier probes of :func:`shift_findings`, their scores sized by the multiplier
    measured on the first probe, so that the learner's own scaling makes them the
    outliers asked for."""
    if any(f.id == "keys-not-transposed" for f in found):
        return []
    _, c, res = fit_any(w, [("T", q @ np.swapaxes(k, -1, -2))], axis)
    if res > 1e-4 or not c > 0:
        return []

    def broken(score: float) -> list[int] | None:
        qs, ks, vs = _probe(sizes, 4, spread=score / c)
        ws, _, _ = _read_attention(learner(qs, ks, vs), qs, ks, vs)
        return None if ws is None else _bad_rows(ws)

    return shift_findings(broken, "On a probe")


def infer_attend(learner) -> list[Finding]:
    sizes, square = _MAIN, False
    q, k, v = _probe(sizes, 1)
    o = learner(q, k, v)
    if not o.ok:
        sizes, square = _SQUARE, True
        q, k, v = _probe(sizes, 1)
        o = learner(q, k, v)
        if not o.ok:
            qs, ks, vs = _probe((5, 5, 16, 8), 1)  # seq_q == seq_k
            os_ = learner(qs, ks, vs)
            if os_.ok:
                return [
                    Finding(
                        "keepdims-missing",
                        "your function raises when seq_q ≠ seq_k (4 queries, 5 keys: "
                        f"{o.error()[:120]}) and runs only when they are equal.",
                    )
                ]
            return []
    w, _, found = _read_attention(o, q, k, v)
    if w is None:
        return found
    where = f"a {sizes[0]} x {sizes[1]} probe"
    axis, scored = _scores_findings(w, q, k, sizes, o.eps, where, square=square)
    found += scored
    if axis == "nan":
        return found
    found += _mask_findings(learner, sizes, axis)
    qb, kb, vb = _probe(sizes, 4, big=True)
    wl, _, _ = _read_attention(learner(qb, kb, vb), qb, kb, vb)
    if wl is not None:
        f = stability_finding(wl, axis, "On a probe")
        if f is not None:
            found.append(f)
        elif axis in ("keys", "all", "none") and not _bad_rows(wl):
            found += _shift_findings(learner, sizes, w, q, k, axis, found)
    found += _mask_broadcast_findings(learner, sizes)
    found += _batch_findings(learner, sizes, o, square, {f.id for f in found})
    return found
