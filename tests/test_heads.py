"""attnlib.heads: split_heads / merge_heads, the one place heads are cut and put back.

Oracles: explicit index loops (head h holds features h·d_head .. (h+1)·d_head - 1 of every
position) and round trips, for numpy and torch; the source of attnlib, read with ``ast``,
for "written once".
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlib.heads import merge_heads, split_heads

PKG = Path(__file__).resolve().parents[1] / "attnlib"


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_split_heads_puts_feature_blocks_in_heads(kind):
    x = np.arange(2 * 5 * 12, dtype=np.float64).reshape(2, 5, 12)  # (batch, seq, d_model)
    if kind == "torch":
        x = torch.as_tensor(x)
    h = split_heads(x, 3)
    assert tuple(h.shape) == (2, 3, 5, 4)
    for b in range(2):
        for head in range(3):
            for s in range(5):
                want = np.asarray(x[b, s, head * 4 : (head + 1) * 4])
                np.testing.assert_array_equal(np.asarray(h[b, head, s]), want)
    back = merge_heads(h)
    assert type(back) is type(x)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_torch_keeps_dtype_and_gradients(dtype):
    x = torch.randn(3, 7, 8, generator=torch.Generator().manual_seed(0)).to(dtype)
    x.requires_grad_()
    h = split_heads(x, 4)  # (batch, n_heads, seq, d_head) = (3, 4, 7, 2)
    assert h.dtype == dtype and tuple(h.shape) == (3, 4, 7, 2)
    weights = torch.arange(3 * 4 * 7 * 2, dtype=dtype).reshape(3, 4, 7, 2)
    (h * weights).sum().backward()
    # the gradient at x is the weight of the same number, put back in its place
    torch.testing.assert_close(x.grad, merge_heads(weights), rtol=0, atol=0)


def test_split_merge_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"d_model=10 .* not divisible by n_heads=3"):
        split_heads(np.zeros((2, 4, 10)), 3)
    with pytest.raises(ValueError, match=r"x .*shape \(4, 10\).* must have 3 dims"):
        split_heads(np.zeros((4, 10)), 2)
    with pytest.raises(ValueError, match="n_heads must be >= 1, got 0"):
        split_heads(np.zeros((2, 4, 10)), 0)
    with pytest.raises(TypeError, match="n_heads must be an int"):
        split_heads(np.zeros((2, 4, 10)), 2.0)
    with pytest.raises(ValueError, match="must have 4 dims"):
        merge_heads(np.zeros((2, 4, 10)))
    with pytest.raises(TypeError, match="numpy.ndarray or a torch.Tensor"):
        merge_heads([[1.0]])


def test_heads_are_split_and_merged_in_one_module_only():
    """No module of attnlib defines its own split/merge helper besides attnlib.heads."""
    names = {"split_heads", "merge_heads", "_heads", "heads", "_split_heads", "_merge_heads"}
    skip = {PKG / "heads.py"}
    # exercise checks keep their own references on purpose (learners must not call ours)
    skip |= set((PKG / "checks").glob("*.py"))
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if path in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name in names:
                found.append(f"{path.relative_to(PKG)}:{node.lineno} defines {node.name}")
    assert not found, "\n".join(found)
