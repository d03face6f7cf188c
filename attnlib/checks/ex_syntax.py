"""Exercises of lesson 09: probing a trained model, finding the head that tracks the subject.

* ``probe_accuracy(X_train, y_train, X_test, y_test) -> float`` : fit a least-squares
  linear probe (one-hot targets, a bias column) on the training rows and return its
  accuracy on the test rows;
* ``attention_on(weights, positions) -> (n_heads,)`` : the mean weight each head gives
  one position per sentence.

Diagnosis by inference: for ``attention_on``, which indexing (paired or broadcast) and
which reduction (mean or sum, over the sentences, the heads or everything) reproduce the
learner's result; for ``probe_accuracy``, which combination of fitting rows, scoring rows,
label alignment, intercept and result (a fraction or a count) reproduces its accuracies on
three probe sets. Findings state measurements; the cause is the misconception's
explanation, shown on a second failure (:func:`attnlib.checks.check`).

The probe cases are small and noisy, with fewer training rows than a perfect fit needs,
so that fitting on the test rows, scoring the training rows, shifting the labels by one
or leaving out the bias each give a different accuracy from the right one.

``probe_accuracy`` is worth two points, graded in two parts of one point
(:func:`attnlib.checks.part`), each in its own locked cell:

* ``probe_accuracy_heldout``: features centred on the training mean, classes balanced in
  the training rows — there the bias column changes no prediction (with centred features
  the least-squares bias is the class frequencies, the same for every class), so this part
  grades the protocol alone: fit on the training rows with their own labels, score on the
  test rows;
* ``probe_accuracy_bias``: features far from the origin, where a probe without the bias
  column classifies badly (and the protocol must still be right).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from attnlib.checks._core import (
    Case,
    Exercise,
    Finding,
    Misconception,
    get_exercise,
    part,
    register,
)
from attnlib.checks.measure import close, fmt

# References written here, apart from attnlib.tasks.syntax (which learners must not call);
# tests/test_ex_syntax.py proves them equal.


def _lstsq_probe(X_train, y_train, n_classes, bias=True):
    X = np.asarray(X_train, dtype=np.float64)
    if bias:
        X = np.hstack([X, np.ones((X.shape[0], 1))])
    W, *_ = np.linalg.lstsq(X, np.eye(n_classes)[np.asarray(y_train)], rcond=None)
    return W


def _predict(W, X, bias=True):
    X = np.asarray(X, dtype=np.float64)
    if bias:
        X = np.hstack([X, np.ones((X.shape[0], 1))])
    return (X @ W).argmax(-1)


def _n_classes(y_train, y_test):
    return int(max(np.max(y_train), np.max(y_test))) + 1


def _probe_reference(X_train, y_train, X_test, y_test):
    W = _lstsq_probe(X_train, y_train, _n_classes(y_train, y_test))
    return float((_predict(W, X_test) == np.asarray(y_test)).mean())


def _probe_on_test(X_train, y_train, X_test, y_test):
    W = _lstsq_probe(X_test, y_test, _n_classes(y_train, y_test))
    return float((_predict(W, X_test) == np.asarray(y_test)).mean())


def _probe_scored_on_train(X_train, y_train, X_test, y_test):
    W = _lstsq_probe(X_train, y_train, _n_classes(y_train, y_test))
    return float((_predict(W, X_train) == np.asarray(y_train)).mean())


def _probe_labels_shifted(X_train, y_train, X_test, y_test):
    y = np.roll(np.asarray(y_train), 1)  # each row gets its neighbour's label
    W = _lstsq_probe(X_train, y, _n_classes(y_train, y_test))
    return float((_predict(W, X_test) == np.asarray(y_test)).mean())


def _probe_labels_sorted(X_train, y_train, X_test, y_test):
    y = np.sort(np.asarray(y_train))  # labels no longer belong to their rows
    W = _lstsq_probe(X_train, y, _n_classes(y_train, y_test))
    return float((_predict(W, X_test) == np.asarray(y_test)).mean())


def _probe_no_bias(X_train, y_train, X_test, y_test):
    W = _lstsq_probe(X_train, y_train, _n_classes(y_train, y_test), bias=False)
    return float((_predict(W, X_test, bias=False) == np.asarray(y_test)).mean())


def _blobs(rng, n, d, n_classes, offset, noise):
    """n rows of d features around one random centre per class, all shifted by offset."""
    centres = rng.standard_normal((n_classes, d))
    y = rng.integers(0, n_classes, n)
    X = centres[y] + noise * rng.standard_normal((n, d)) + offset
    return X, y


def _probe_case(label, seed, n_train, n_test, d, n_classes, offset, noise):
    rng = np.random.default_rng(seed)
    X, y = _blobs(rng, n_train + n_test, d, n_classes, offset, noise)
    return Case(label, (X[:n_train], y[:n_train], X[n_train:], y[n_train:]))


def _probe_cases() -> list[Case]:
    return [
        _probe_case(
            "3 classes, 30 train / 50 test rows, 12 features", 901, 30, 50, 12, 3, 3.0, 1.0
        ),
        _probe_case("2 classes, 20 train / 40 test rows, 8 features", 902, 20, 40, 8, 2, 5.0, 1.2),
        _probe_case("4 classes, 60 train / 60 test rows, 6 features", 903, 60, 60, 6, 4, 2.0, 0.9),
    ]


def _centred_case(label, seed, n_train, n_test, d, n_classes, noise):
    """Balanced training classes, features centred on the training mean: the bias column
    changes no prediction here (tests/test_partial_credit.py checks it)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_classes, d))
    y_train = np.repeat(np.arange(n_classes), n_train // n_classes)
    rng.shuffle(y_train)
    y_test = rng.integers(0, n_classes, n_test)
    X_train = centres[y_train] + noise * rng.standard_normal((len(y_train), d))
    X_test = centres[y_test] + noise * rng.standard_normal((n_test, d))
    mean = X_train.mean(axis=0)  # (d,)
    return Case(label, (X_train - mean, y_train, X_test - mean, y_test))


def _centred_cases() -> list[Case]:
    return [
        _centred_case("3 centred classes, 30 train / 50 test rows", 921, 30, 50, 12, 3, 1.6),
        _centred_case("2 centred classes, 20 train / 40 test rows", 902, 20, 40, 8, 2, 1.2),
        _centred_case("4 centred classes, 60 train / 60 test rows", 903, 60, 60, 6, 4, 0.9),
    ]


def _centred_hidden_cases() -> list[Case]:
    return [
        _centred_case("hidden: 5 centred classes, 80 / 70 rows", 911, 80, 70, 10, 5, 1.0),
        _centred_case("hidden: 2 centred classes, 24 / 30 rows", 912, 24, 30, 15, 2, 1.5),
    ]


def _probe_hidden_cases() -> list[Case]:
    return [
        _probe_case("hidden: 5 classes, 80 train / 70 test rows", 911, 80, 70, 10, 5, 4.0, 1.0),
        _probe_case("hidden: 2 classes, 25 train / 30 test rows", 912, 25, 30, 15, 2, 1.0, 1.5),
    ]


def _probe_build(*, fit="train", score="test", labels="aligned", bias=True, result="fraction"):
    """probe_accuracy with the given choices; the defaults give the correct function.

    ``fit``/``score``: which rows the probe is fitted on and scored on; ``labels``
    "aligned", "shifted" (np.roll by one) or "sorted" (labels no longer belong to their
    rows); ``bias=False`` leaves out the column of ones; ``result="count"`` returns how
    many rows were predicted right instead of the fraction.
    """

    def fn(X_train, y_train, X_test, y_test):
        n_classes = _n_classes(y_train, y_test)
        sets = {"train": (X_train, np.asarray(y_train)), "test": (X_test, np.asarray(y_test))}
        X_fit, y_fit = sets[fit]
        if labels == "shifted":
            y_fit = np.roll(y_fit, 1)
        elif labels == "sorted":
            y_fit = np.sort(y_fit)
        W = _lstsq_probe(X_fit, y_fit, n_classes, bias=bias)
        X_score, y_score = sets[score]
        right = _predict(W, X_score, bias=bias) == y_score
        return int(right.sum()) if result == "count" else float(right.mean())

    return fn


_PROBE_CHOICES = {
    "fit": ("train", "test"),
    "score": ("test", "train"),
    "labels": ("aligned", "shifted", "sorted"),
    "bias": (True, False),
    "result": ("fraction", "count"),
}


def _probe_ids(choice) -> frozenset:
    ids = set()
    if choice["fit"] == "test":
        ids.add("probe-trained-on-test")
    if choice["score"] == "train":
        ids.add("probe-scored-on-train")
    if choice["labels"] != "aligned":
        ids.add("labels-misaligned")
    if not choice["bias"]:
        ids.add("probe-no-bias")
    if choice["result"] == "count":
        ids.add("accuracy-as-count")
    return frozenset(ids)


def _probe_probes() -> list[tuple]:
    """Probe data sets on which every combination of choices gives its own accuracies:
    few noisy training rows (a probe fits them better than new rows), far from the origin
    (a probe without bias suffers), and labels in random order (shifting them matters)."""
    rng = np.random.default_rng(909)
    probes = []
    for n_train, n_test, d, n_classes, offset, noise in (
        (24, 60, 10, 3, 4.0, 1.3),  # fewer training rows than a perfect fit needs
        (60, 45, 4, 4, 3.0, 1.2),  # more rows than features: the fit itself is imperfect
        (40, 50, 5, 2, 5.0, 1.5),
    ):
        X, y = _blobs(rng, n_train + n_test, d, n_classes, offset, noise)
        probes.append((X[:n_train], y[:n_train], X[n_train:], y[n_train:]))
    return probes


def _infer_probe(learner) -> list[Finding]:
    """Accuracies on three probe sets, compared with every combination of the choices.

    A probe returns one number, so one data set cannot tell the choices apart; three sets
    give each combination its own triple of accuracies. If the learner's triple matches
    combinations that disagree on the mistakes, nothing is measured.
    """
    probes = _probe_probes()
    got = []
    for args in probes:
        o = learner(*(a.copy() for a in args))
        if not o.ok:
            return []
        value = o.value
        if isinstance(value, (float, int, np.floating, np.integer)) and not isinstance(
            value, (bool, np.bool_)
        ):
            got.append(float(value))
            continue
        a = o.array(0) if o.arity == 1 else None
        if a is None or a.size != 1 or a.dtype == bool:
            return []
        got.append(float(a.reshape(-1)[0]))
    keys = list(_PROBE_CHOICES)
    matched = {}
    for combo in itertools.product(*_PROBE_CHOICES.values()):
        choice = dict(zip(keys, combo, strict=True))
        want = [_probe_build(**choice)(*args) for args in probes]
        if close(got, want, rel=0.0, abs_=1e-9):
            matched[_probe_ids(choice)] = want
    if len(matched) != 1:
        return []
    ids, want = next(iter(matched.items()))
    right = [_probe_reference(*args) for args in probes]
    shown = ", ".join(fmt(g) for g in got)
    correct = ", ".join(fmt(r) for r in right)
    what = f"on three probe sets your results are {shown} (right: {correct})"
    if all(g > r for g, r in zip(got, right, strict=True)):
        what += ": higher than the right accuracy on every set"
    elif all(g < r for g, r in zip(got, right, strict=True)):
        what += ": lower than the right accuracy on every set"
    sizes = ", ".join(str(len(args[3])) for args in probes)
    details = {
        "probe-trained-on-test": f"{what}.",
        "probe-scored-on-train": f"{what}.",
        "labels-misaligned": f"{what}.",
        "probe-no-bias": f"{what}; the features of these sets lie far from the origin.",
        "accuracy-as-count": f"{what}; the sets have {sizes} test rows, and your results "
        "are above 1.",
    }
    return [Finding(i, details[i]) for i in sorted(ids)]


register(
    Exercise(
        name="probe_accuracy",
        summary="probe_accuracy(X_train, y_train, X_test, y_test) -> held-out accuracy of a "
        "least-squares probe",
        reference=_probe_reference,
        make_cases=_probe_cases,
        make_hidden_cases=_probe_hidden_cases,
        rtol=0.0,
        atol=1e-9,
        forbidden=(
            "attnlib.tasks.syntax.probe_accuracy",
            "attnlib.tasks.syntax.fit_probe",
            "attnlib.tasks.syntax.probe_predict",
        ),
        infer=_infer_probe,
        build=_probe_build,
        misconceptions=(
            Misconception(
                "probe-trained-on-test",
                "The probe was fitted on the test rows and then scored on those same rows, so "
                "it is graded on rows it could memorise: with many features and few rows, "
                "least squares fits almost any labels. A held-out accuracy needs a probe "
                "fitted on the training rows and their labels alone, the test rows kept for "
                "scoring.",
                (_probe_on_test,),
                {"fit": "test"},
                question="Your probe does better than it should. A held-out accuracy counts "
                "rows the probe has never seen: which rows went into your fit, and which "
                "rows did you count the correct predictions on?",
            ),
            Misconception(
                "probe-scored-on-train",
                "The accuracy is measured on the training rows, the ones the probe was fitted "
                "to. A probe with many features fits its own training rows well whatever "
                "they encode, so that number says little about what the features hold; the "
                "predictions to count are those for the test rows, against the test labels.",
                (_probe_scored_on_train,),
                {"score": "train"},
                question="Your number does not say how the probe does on new rows. Which "
                "rows are you counting correct predictions on: rows the probe was fitted "
                "to, or rows it has never seen?",
            ),
            Misconception(
                "labels-misaligned",
                "The labels no longer belong to their rows: shifted by one, sorted, or "
                "shuffled apart from the features. The probe then learns to map each row "
                "to another row's class, which it cannot do much better than guessing. "
                "Every training row must keep its own label.",
                (_probe_labels_shifted, _probe_labels_sorted),
                {"labels": "shifted"},
                question="Your probe does worse than it should, close to guessing. Print "
                "the first few training rows' labels next to the targets your fit used for "
                "them: does row i still get the label of row i?",
            ),
            Misconception(
                "probe-no-bias",
                "The probe has no intercept: each class's score is a plain weighted sum of "
                "the features, a plane forced through the origin. When the features lie far "
                "from the origin, such planes cannot separate the classes well. Least "
                "squares must fit a constant term for every class along with the weights, "
                "and the predictions must use it too.",
                (_probe_no_bias,),
                {"bias": False},
                question="Your probe does badly on features far from the origin. Write one "
                "class's score as a function of the features: what is it where every "
                "feature is 0, and could least squares have chosen anything else there?",
            ),
            Misconception(
                "accuracy-as-count",
                "The function returns how many test rows were predicted right, a count, "
                "instead of the fraction of them. An accuracy is that count divided by the "
                "number of test rows, a number between 0 and 1.",
                (_probe_build(result="count"),),
                {"result": "count"},
                question="Your result is larger than 1. An accuracy is a share of the test "
                "rows: what share of them does your number stand for?",
            ),
        ),
    )
)


register(
    part(
        get_exercise("probe_accuracy"),
        "probe_accuracy_heldout",
        "fit on the training rows with their labels, score on the test rows (centred "
        "features: the bias does not matter here)",
        ids=(
            "probe-trained-on-test",
            "probe-scored-on-train",
            "labels-misaligned",
            "accuracy-as-count",
        ),
        make_cases=_centred_cases,
        make_hidden_cases=_centred_hidden_cases,
    )
)
register(
    part(
        get_exercise("probe_accuracy"),
        "probe_accuracy_bias",
        "features far from the origin: the probe needs its bias column",
        ids=(
            "probe-trained-on-test",
            "probe-scored-on-train",
            "labels-misaligned",
            "probe-no-bias",
            "accuracy-as-count",
        ),
    )
)


# ----------------------------------------------------------------------------------------
# attention_on(weights, positions) -> (n_heads,)
# ----------------------------------------------------------------------------------------


def _attention_reference(weights, positions):
    batch = torch.arange(weights.shape[0])
    return weights[batch, :, positions].mean(0)  # (n_heads,)


def _attention_broadcast(weights, positions):
    return weights[:, :, positions].mean(dim=(0, 2))  # every sentence at every position


def _attention_over_heads(weights, positions):
    batch = torch.arange(weights.shape[0])
    return weights[batch, :, positions].mean(1)  # (batch,)


def _attention_sum(weights, positions):
    batch = torch.arange(weights.shape[0])
    return weights[batch, :, positions].sum(0)


def _attention_build(*, index="paired", reduce="mean", axis="sentences"):
    """attention_on with the given choices; the defaults give the correct function.

    ``index="broadcast"`` indexes weights[:, :, positions] (every sentence at every
    sentence's position); ``reduce`` "mean" or "sum"; ``axis`` "sentences", "heads" or
    "all" (what the mean or sum runs over; "all" gives one number).
    """

    def fn(weights, positions):
        if index == "paired":
            sel = weights[torch.arange(weights.shape[0]), :, positions]  # (batch, n_heads)
            dims = {"sentences": (0,), "heads": (1,), "all": (0, 1)}[axis]
        else:
            sel = weights[:, :, positions]  # (batch, n_heads, batch)
            dims = {"sentences": (0, 2), "heads": (1,), "all": (0, 1, 2)}[axis]
        return sel.mean(dim=dims) if reduce == "mean" else sel.sum(dim=dims)

    return fn


_ATTENTION_CHOICES = {
    "index": ("paired", "broadcast"),
    "reduce": ("mean", "sum"),
    "axis": ("sentences", "heads", "all"),
}


def _infer_attention_on(learner) -> list[Finding]:
    """Which indexing and which reduction reproduce the learner's result on one probe
    (batch 5, n_heads 3, seq_k 7: every size different, so each choice has its shape or
    its numbers)."""
    gen = torch.Generator().manual_seed(929)
    batch, n_heads, seq_k = 5, 3, 7
    weights = torch.softmax(torch.randn(batch, n_heads, seq_k, generator=gen) * 2, dim=-1)
    positions = torch.tensor([3, 0, 6, 3, 1])
    o = learner(weights.clone(), positions.clone())
    y = o.array(0) if o.ok and o.arity == 1 else None
    if y is None or y.dtype == bool:
        return []
    rel = max(1e-6, 2e3 * o.eps)
    keys = list(_ATTENTION_CHOICES)
    for combo in itertools.product(*_ATTENTION_CHOICES.values()):
        c = dict(zip(keys, combo, strict=True))
        want = _attention_build(**c)(weights.double(), positions).numpy()
        if not close(y, want, rel=rel, abs_=1e-9):
            continue
        found = []
        if c["index"] == "broadcast":
            # sentence 0 sits at position 3; raise its weight at sentence 1's position (0)
            nudged = weights.clone()
            nudged[0, :, int(positions[1])] += 0.5
            o2 = learner(nudged, positions.clone())
            y2 = o2.array(0) if o2.ok and o2.arity == 1 else None
            moved = y2 is not None and y2.shape == y.shape and not close(y2, y)
            found.append(
                Finding(
                    "index-broadcast",
                    f"sentence 0 is asked about its key {int(positions[0])}; raising its "
                    f"weight on key {int(positions[1])} (sentence 1's position) "
                    + ("changes your result." if moved else "is read by your function.")
                    + f" With batch {batch}, each of your numbers draws on {batch * batch} "
                    f"weights per head, where {batch} belong.",
                )
            )
        if c["axis"] == "heads":
            found.append(
                Finding(
                    "mean-over-heads",
                    f"your result has shape {tuple(y.shape)}: one number per sentence of the "
                    f"batch of {batch}, where one per head ({n_heads} heads) is asked for.",
                )
            )
        if c["axis"] == "all":
            found.append(
                Finding(
                    "mean-over-everything",
                    f"your result is a single number, shape {tuple(y.shape)}, where one per "
                    f"head ({n_heads} heads) is asked for.",
                )
            )
        if c["reduce"] == "sum":
            found.append(
                Finding(
                    "sum-not-mean",
                    f"some of your numbers exceed 1 (largest {fmt(float(y.max()))}), for "
                    f"attention weights that lie between 0 and 1 (batch {batch}).",
                )
            )
        return found
    return []


def _attention_case(label, seed, batch, n_heads, seq_k):
    gen = torch.Generator().manual_seed(seed)
    weights = torch.softmax(torch.randn(batch, n_heads, seq_k, generator=gen) * 2, dim=-1)
    positions = torch.randint(seq_k, (batch,), generator=gen)
    return Case(label, (weights, positions))


def _attention_cases() -> list[Case]:
    return [
        _attention_case("batch 5, n_heads 3, seq_k 7", 921, 5, 3, 7),
        _attention_case("batch 9, n_heads 4, seq_k 6", 922, 9, 4, 6),
        _attention_case("batch 2, n_heads 2, seq_k 11", 923, 2, 2, 11),
    ]


def _attention_hidden_cases() -> list[Case]:
    return [_attention_case("hidden: batch 12, n_heads 5, seq_k 9", 931, 12, 5, 9)]


register(
    Exercise(
        name="attention_on",
        summary="attention_on(weights, positions) -> (n_heads,): mean weight per head on one "
        "position per sentence",
        reference=_attention_reference,
        make_cases=_attention_cases,
        make_hidden_cases=_attention_hidden_cases,
        forbidden=("attnlib.tasks.syntax.attention_on",),
        infer=_infer_attention_on,
        build=_attention_build,
        misconceptions=(
            Misconception(
                "index-broadcast",
                "Indexing the key axis with the positions while the sentence axis is kept "
                "whole pairs every sentence with every sentence's position: a block of "
                "shape (batch, n_heads, batch), whose mean mixes in weights no sentence was "
                "asked about. The sentence axis and the key axis must be indexed together, "
                "so that sentence b is read at its own position only.",
                (_attention_broadcast,),
                {"index": "broadcast"},
                question="Each sentence has one position that matters. Print the shape of "
                "what your indexing picks out, before any averaging: how many weights does "
                "it hold per head, and how many sentences are there?",
            ),
            Misconception(
                "mean-over-heads",
                "The mean runs over the heads, so each sentence gets one number. The "
                "question is asked per head: the average runs over the sentences, the first "
                "axis, and the heads are kept.",
                (_attention_over_heads,),
                {"axis": "heads"},
                question="Your result has one number per sentence. Which axis did your mean "
                "run over, and which axis should be left in the result?",
            ),
            Misconception(
                "mean-over-everything",
                "The mean runs over every axis at once, so the heads are averaged together "
                "with the sentences and one number is left. Only the sentences are averaged "
                "over; each head keeps its own number.",
                (_attention_build(axis="all"),),
                {"axis": "all"},
                question="Your result is one number for the whole batch. Over which axes "
                "did your mean run, and which axis has to survive it?",
            ),
            Misconception(
                "sum-not-mean",
                "The weights are summed over the sentences instead of averaged: the result "
                "grows with the batch size and can exceed 1. A mean divides that sum by the "
                "number of sentences, so that it is a weight between 0 and 1 whatever the "
                "batch size.",
                (_attention_sum,),
                {"reduce": "sum"},
                question="Some of your numbers exceed 1, and they would grow with the "
                "batch. Can an average of attention weights do that?",
            ),
        ),
    )
)
