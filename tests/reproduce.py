"""What "the training command reproduces the shipped files" means across CPUs.

On the machine that produced them, retraining gives the shipped weights and logs byte for
byte. Another CPU (another vector width, another BLAS code path) adds floating-point numbers
in another order, so the low bits differ: measured here by retraining with
``ATEN_CPU_CAPABILITY=avx2`` on an AVX-512 machine, the fp16-stored weights moved by at most
one fp16 step (2e-3 at magnitude 2-4) and the logged losses by at most 1e-4 (one unit of the
fourth decimal). These helpers accept exactly that and nothing more: bytes equal, or every
number within two fp16 steps (weights) / two units of the last printed decimal (logs).
"""

from __future__ import annotations

import numpy as np
import torch

FP16_RTOL = 2 * 2.0**-10  # two fp16 steps, relative
FP16_ATOL = 2 * 2.0**-14  # ... and two steps of the smallest normal fp16 numbers
LOG_ATOL = 2e-4  # two units of the log's fourth decimal


def assert_state_reproduced(fresh: dict, shipped: dict, what: str = "weights") -> None:
    """``fresh`` (a state dict, any float dtype) equals ``shipped`` up to fp16 rounding."""
    assert list(fresh) == list(shipped), f"{what}: parameter names differ"
    for key, want in shipped.items():
        got = fresh[key].to(want.dtype)
        assert got.shape == want.shape, f"{what}[{key}]: shape {got.shape} vs {want.shape}"
        if torch.equal(got, want):
            continue
        diff = (got.double() - want.double()).abs()
        bound = FP16_ATOL + FP16_RTOL * want.double().abs()
        worst = float((diff - bound).max())
        assert worst <= 0, (
            f"{what}[{key}] differs by up to {float(diff.max()):.3g}, more than float "
            "rounding on another CPU explains: training did not reproduce"
        )


def assert_log_reproduced(fresh_lines: list[str], shipped_lines: list[str]) -> None:
    """Tab-separated logs: same header and steps; numbers within two units of the last
    printed decimal (``nan`` where the shipped log has ``nan``)."""
    assert fresh_lines[0] == shipped_lines[0], "log header differs"
    assert len(fresh_lines) == len(shipped_lines), "log length differs"
    parse = lambda lines: np.array([ln.split("\t") for ln in lines[1:]], dtype=np.float64)  # noqa: E731
    got, want = parse(fresh_lines), parse(shipped_lines)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "log: missing entries differ"
    ok = ~np.isnan(want)
    worst = float(np.abs(got[ok] - want[ok]).max()) if ok.any() else 0.0
    assert worst <= LOG_ATOL, f"log differs by up to {worst:.4g}: training did not reproduce"
