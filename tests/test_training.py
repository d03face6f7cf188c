"""attnlib.training — train() on problems whose answer is known in closed form."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from attnlib.training import History, grad_norms, train

TARGET = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
START = torch.tensor([3.0, 2.0, -1.0], dtype=torch.float64)


def quadratic():
    p = torch.nn.Parameter(START.clone())
    return p, (lambda i: ((p - TARGET) ** 2).sum())


def test_sgd_on_a_quadratic_follows_the_closed_form():
    # loss (p - t)^2 with SGD: p_{n+1} - t = (1 - 2 lr)(p_n - t), so
    # loss_n = (1 - 2 lr)^(2n) * loss_0 and |grad_n| = 2 (1 - 2 lr)^n * |p_0 - t|
    p, step = quadratic()
    lr, steps = 0.1, 30
    hist = train([p], step, steps=steps, lr=lr, optimizer="sgd", track={"p": p}, progress=False)
    r0 = (START - TARGET).norm().item()
    n = np.arange(steps)
    np.testing.assert_allclose(hist["loss"], (1 - 2 * lr) ** (2 * n) * r0**2, rtol=1e-12)
    np.testing.assert_allclose(hist["grad/p"], 2 * (1 - 2 * lr) ** n * r0, rtol=1e-12)
    torch.testing.assert_close(p.detach() - TARGET, (1 - 2 * lr) ** steps * (START - TARGET))


def test_adam_reduces_the_loss():
    p, step = quadratic()
    hist = train([p], step, steps=300, lr=0.05, progress=False)
    loss = hist["loss"]
    assert loss.shape == (300,)
    assert loss[-1] < 1e-4 * loss[0], (loss[0], loss[-1])
    torch.testing.assert_close(p.detach(), TARGET, atol=1e-2, rtol=0)


def test_history_records_extras_and_reads_back():
    p, loss_fn = quadratic()

    def step(i):
        return loss_fn(i), {"step_sq": i * i, "half": 0.5}

    hist = train([p], step, steps=5, lr=0.1, progress=False)
    assert isinstance(hist, History)
    assert set(hist.keys()) == {"loss", "step_sq", "half"}
    assert "loss" in hist and "grad/p" not in hist
    np.testing.assert_array_equal(hist["step_sq"], [0, 1, 4, 9, 16])
    assert isinstance(hist["loss"], np.ndarray)
    assert hist.last("step_sq") == 16.0
    assert hist.last("step_sq", n=2) == 12.5
    assert repr(hist) == "History(loss: 5 steps, step_sq: 5 steps, half: 5 steps)"
    h = History()
    h.add(a=1, b=2.5)
    h.add(a=3)
    assert h.records == {"a": [1.0, 3.0], "b": [2.5]}


def test_trains_module_parameters_and_skips_frozen_ones():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 1)
    lin.bias.requires_grad_(False)
    bias0 = lin.bias.detach().clone()
    x = torch.randn(64, 3)
    y = x @ torch.tensor([[1.0], [-1.0], [2.0]]) + bias0

    hist = train(
        lin.parameters(), lambda i: ((lin(x) - y) ** 2).mean(), steps=200, lr=0.05, progress=False
    )
    assert hist.last("loss") < 1e-3 * hist["loss"][0]
    assert torch.equal(lin.bias.detach(), bias0)  # frozen: untouched


def test_single_tensor_is_accepted_as_params():
    p, step = quadratic()
    train(p, step, steps=3, lr=0.1, progress=False)
    assert not torch.equal(p.detach(), START)


def test_clip_limits_each_sgd_step():
    p, step = quadratic()
    hist = train(
        [p], step, steps=1, lr=1.0, optimizer="sgd", clip=0.1, track={"p": p}, progress=False
    )
    moved = (p.detach() - START).norm().item()
    assert hist["grad/p"][0] > 1  # the raw gradient was large ...
    assert moved == pytest.approx(0.1, rel=1e-6)  # ... the step was clipped to lr * clip


def test_grad_norms():
    a = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    b = torch.nn.Parameter(torch.zeros(2))
    (a * torch.tensor([3.0, 4.0])).sum().backward()
    assert grad_norms({"a": a, "b": b}) == {"a": 5.0, "b": 0.0}


def test_progress_bar_on_stdout_and_silence(capsys):
    p, step = quadratic()
    train([p], step, steps=4, lr=0.1, desc="toy run", progress=True)
    captured = capsys.readouterr()
    assert "toy run" in captured.out and "4/4" in captured.out and "100%" in captured.out
    assert captured.err == ""  # nothing that reads as a warning in a notebook
    train([p], step, steps=4, lr=0.1, progress=False)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_loss_raises_floating_point_error(bad):
    p = torch.nn.Parameter(torch.ones(2))

    def step(i):
        loss = (p**2).sum()
        return loss * bad if i == 3 else loss

    with pytest.raises(
        FloatingPointError, match=r"train: the loss became (nan|inf|-inf) at step 3"
    ):
        train([p], step, steps=10, lr=0.1, progress=False)


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"params": []}, ValueError, "train: params has no parameter that requires grad"),
        ({"params": [torch.zeros(2)]}, ValueError, "params has no parameter that requires grad"),
        ({"steps": 0}, ValueError, "train: steps must be >= 1, got 0"),
        ({"steps": 2.5}, TypeError, "train: steps must be an int, got float"),
        ({"lr": -0.1}, ValueError, "train: lr must be finite and > 0, got -0.1"),
        ({"lr": math.nan}, ValueError, "lr must be finite and > 0, got nan"),
        ({"lr": "0.1"}, TypeError, "train: lr must be a number, got str"),
        ({"optimizer": "rmsprop"}, ValueError, "optimizer must be 'adam' or 'sgd', got 'rmsprop'"),
        ({"clip": 0}, ValueError, "train: clip must be finite and > 0, got 0"),
        ({"step": "loss"}, TypeError, "train: step must be callable"),
        (
            {"step": lambda i: torch.ones(3, requires_grad=True)},
            TypeError,
            "step(0) must return a one-element loss tensor (or (loss, extras)), got shape (3,)",
        ),
        ({"step": lambda i: 1.5}, TypeError, "step(0) must return a one-element loss tensor"),
    ],
    ids=[
        "no-params",
        "no-grad-params",
        "steps-0",
        "steps-float",
        "lr-neg",
        "lr-nan",
        "lr-str",
        "optimizer",
        "clip-0",
        "step-not-callable",
        "loss-not-scalar",
        "loss-float",
    ],
)
def test_bad_arguments(kwargs, error, pattern):
    p, step = quadratic()
    args = {"params": [p], "step": step, "steps": 3, "lr": 0.1, "progress": False} | kwargs
    params, step = args.pop("params"), args.pop("step")
    with pytest.raises(error, match=re.escape(pattern)):
        train(params, step, **args)


def test_torch_threads_sets_and_restores_and_rejects_bad_counts(three_threads):
    from attnlib.training import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="torch_threads: n must be >= 1, got 0"):
        with torch_threads(0):
            pass


def test_progress_bar_layout_does_not_depend_on_speed(capsys):
    # The bar is always 30 characters and shows no rate, so stored notebook outputs compare
    # equal whatever the machine's speed (only the sanitized elapsed time differs).
    from attnlib.training import progress_bar

    with progress_bar(7, "fixed") as bar:
        for _ in range(7):
            bar.update(1)
    last = capsys.readouterr().out.split("\r")[-1].strip()
    head, bar_text, tail = last.split("|")
    assert head == "fixed: 100%"
    assert bar_text == "#" * 30
    assert tail.startswith(" 7/7 [") and "it/s" not in tail
