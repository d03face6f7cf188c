"""Which printed digits of the lessons depend on the machine they were made on?

    python tools/digit_drift.py                        # every lesson, every path
    python tools/digit_drift.py 15_block 04_scaling    # some lessons
    python tools/digit_drift.py --path jitter-1        # one path
    python tools/digit_drift.py --jobs 2               # lessons at once (default: 2)

Strict nbval compares every stored output with a fresh run, on whatever CPU runs it. A number
that carries rounding into its printed digits passes where it was made and fails elsewhere.
This tool runs each lesson top to bottom, in a fresh kernel, along numerically different but
equally valid paths, and reports every compared output that moves, number by number:

``aten-default``
    torch's generic vectorised kernels instead of its AVX-512/AVX2 ones
    (``ATEN_CPU_CAPABILITY=default``: other polynomials for exp and tanh, other reduction
    orders), two threads.
``mkl-compatible``
    MKL's compatible code path (``MKL_CBWR=COMPATIBLE``: another blocking of every torch
    matmul), numpy with its AVX-512 kernels off (``NPY_DISABLE_CPU_FEATURES``) and OpenBLAS's
    Haswell kernels, two threads. Lesson 15 printed 8.37e+04 where it was made and 8.39e+04 on
    an Intel Xeon; on the machine where it was made, each of these two paths prints 8.39e+04.
``jitter-1``, ``jitter-2``
    Every floating-point result of a torch matmul, reduction, normalisation or transcendental
    function multiplied by (1 + u·eps), eps the dtype's machine epsilon and u in [-1, 1) a hash
    of the result's own bits (two salts): rounding noise of the size any other summation order
    gives, at every such step; equal computations stay equal and no random stream is touched.
    A printed digit that moves under it is not a property of the lesson but of the arithmetic.

The comparison is strict nbval's: text outputs, after tests/nbval_sanitize.cfg, skipping
cells tagged ``nbval-ignore-output`` (they show timings: along the jitter paths they also run
without the noise, so that the timings an assert reads later are the machine's own). The exit
status is 1 when anything moved.
tests/test_digit_drift.py runs the ``aten-default`` and ``jitter-1`` paths over every lesson
in CI's second stage; CONTRIBUTING.md ("Rules that make strict nbval pass on any machine") says
how to fix what it finds.
"""

from __future__ import annotations

import argparse
import configparser
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
IGNORE_TAG = "nbval-ignore-output"
INSERTED = "kv_digit_drift"  # metadata of the cells the tool adds (never compared)
TEXT_MIMES = ("text/plain", "text/latex", "text/markdown")

# numpy's run-time dispatch: every AVX-512 group it knows (those this CPU lacks are ignored).
NPY_AVX512 = (
    "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"
)

PATHS: dict[str, dict[str, str]] = {
    # torch's generic vectorised kernels instead of AVX-512/AVX2 (elementwise maths, reductions)
    "aten-default": {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "2"},
    # MKL's compatible code path (another blocking of every torch matmul), numpy without its
    # AVX-512 kernels, OpenBLAS's Haswell kernels (numpy's matmul)
    "mkl-compatible": {
        "MKL_CBWR": "COMPATIBLE",
        "NPY_DISABLE_CPU_FEATURES": NPY_AVX512,
        "OPENBLAS_CORETYPE": "Haswell",
        "OMP_NUM_THREADS": "2",
    },
    # rounding noise at every step (the start-up code below), two different noises
    "jitter-1": {"OMP_NUM_THREADS": "1", "KV_DRIFT_JITTER": "1"},
    "jitter-2": {"OMP_NUM_THREADS": "1", "KV_DRIFT_JITTER": "2"},
}

# Run first in the kernel of the jitter paths (an IPython start-up file).
JITTER = r'''
import torch
from torch.overrides import TorchFunctionMode

_NAMES = {
    # matmuls: the summation order is the BLAS's and the CPU's
    "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear",
    "tensordot", "conv1d", "mv", "dot", "inner", "outer",
    # reductions and normalisations
    "sum", "mean", "var", "std", "var_mean", "norm", "cumsum", "logsumexp", "prod",
    "softmax", "log_softmax", "layer_norm", "cross_entropy", "nll_loss", "mse_loss",
    # vectorised transcendental functions (another CPU: another polynomial)
    "exp", "log", "tanh", "sigmoid", "gelu", "erf", "silu", "sqrt", "rsqrt", "pow",
}
_MIX = ((0x9E3779B97F4A7C15, 31), (0xBF58476D1CE4E5B9, 27), (0x94D049BB133111EB, 33))


class _Jitter(TorchFunctionMode):
    """Multiply each float result of the ops above by (1 + u * eps), u in [-1, 1).

    u is a hash of the result's own bits and a salt: a pure function of the value, so that
    two equal computations stay equal (as on any one machine), and no random stream is used.
    """

    def __init__(self, salt):
        super().__init__()
        self.salt = salt * 0x632BE59BD9B4E019

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name not in _NAMES or "out" in kwargs:
            return out
        if not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.numel() == 0:
            return out
        ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}[out.element_size()]
        h = out.detach().contiguous().view(ints).to(torch.int64) + self.salt
        for mult, shift in _MIX:  # splitmix64's finaliser, in int64 arithmetic
            h = (h ^ (h >> shift)) * (mult - (1 << 64) if mult >= 1 << 63 else mult)
        u = (h & 0xFFFFFF).to(torch.float64) / 2**23 - 1  # [-1, 1)
        eps = torch.finfo(out.dtype).eps
        return out * (1 + u * eps).to(out.dtype)


def _kv_drift_jitter(on):
    """Noise on or off (the tool turns it off around the cells that time things)."""
    if on:
        _JITTER_MODE.__enter__()
    else:
        _JITTER_MODE.__exit__(None, None, None)


def _natively(forward):
    def run(*args, **kwargs):
        with torch._C.DisableTorchFunction():
            return forward(*args, **kwargs)

    return run


# With any torch-function mode active, nn.MultiheadAttention never takes its fused path: the
# module runs as it would without the noise (its arithmetic is varied by the other paths).
torch.nn.MultiheadAttention.forward = _natively(torch.nn.MultiheadAttention.forward)
_JITTER_MODE = _Jitter(int(__import__("os").environ["KV_DRIFT_JITTER"]))
_kv_drift_jitter(True)
'''


def load_sanitizer(path: Path = SANITIZE) -> list[tuple[re.Pattern, str]]:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(path)
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def sanitize(text: str, rules: list[tuple[re.Pattern, str]]) -> str:
    for regex, replace in rules:
        text = regex.sub(replace, text)
    return text


def compared(cell) -> bool:
    src = cell.get("source", "")
    tags = cell.get("metadata", {}).get("tags", [])
    return IGNORE_TAG not in tags and "NBVAL_IGNORE_OUTPUT" not in src and "NBVAL_SKIP" not in src


def texts(outputs) -> list[str]:
    """The outputs strict nbval compares, as text (images are never compared)."""
    found, last_stream = [], None
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream" and last_stream == out.get("name"):
            found[-1] += out.get("text", "")  # consecutive writes to a stream: one text
        elif kind == "stream":
            found.append(f"[{out.get('name')}] {out.get('text', '')}")
        elif kind in ("execute_result", "display_data"):
            data = out.get("data", {})
            found += [f"[{m}] {data[m]}" for m in TEXT_MIMES if m in data]
        elif kind == "error":
            found.append(f"[error] {out.get('ename')}: {out.get('evalue')}")
        last_stream = out.get("name") if kind == "stream" else None
    return found


def moved(stored: str, fresh: str) -> list[str]:
    """What changed between two sanitized texts: numbers pairwise, else the lines."""
    a, b = NUMBER.findall(stored), NUMBER.findall(fresh)
    rest_a, rest_b = NUMBER.sub("#", stored), NUMBER.sub("#", fresh)
    if len(a) == len(b) and rest_a == rest_b:
        return [f"{x} -> {y}" for x, y in zip(a, b, strict=True) if x != y]
    lines = difflib.unified_diff(stored.splitlines(), fresh.splitlines(), lineterm="", n=0)
    return ["\n    " + "\n    ".join(list(lines)[2:])]


def run_lesson(path: Path, env_name: str, timeout: int = 600) -> list[dict]:
    """Execute a lesson along one path (in a child process) and return its code cells' outputs."""
    env = {**os.environ, **PATHS[env_name]}
    with tempfile.TemporaryDirectory(prefix="kv-drift-") as tmp:
        if env.get("KV_DRIFT_JITTER"):
            startup = Path(tmp) / "ipython" / "profile_default" / "startup"
            startup.mkdir(parents=True)
            (startup / "00-jitter.py").write_text(JITTER)
            env["IPYTHONDIR"] = str(Path(tmp) / "ipython")
        out = Path(tmp) / "outputs.json"
        done = subprocess.run(
            [sys.executable, __file__, "--execute", str(path), "--to", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{path.name} [{env_name}] did not run:\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def _execute(path: Path, to: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if os.environ.get("KV_DRIFT_JITTER"):  # cells that time things run without the noise
        cells = []
        for cell in nb.cells:
            timed = cell.cell_type == "code" and not compared(cell)
            if timed:
                cells.append(_switch(False))
            cells.append(cell)
            if timed:
                cells.append(_switch(True))
        nb.cells = cells
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="key-vectors",
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    code = [c for c in nb.cells if c.cell_type == "code" and not c.metadata.get(INSERTED)]
    cells = [c.get("outputs", []) for c in code]
    to.write_text(json.dumps(cells))


def _switch(on: bool):
    import nbformat

    cell = nbformat.v4.new_code_cell(f"_kv_drift_jitter({on})")
    cell.metadata[INSERTED] = True
    return cell


def drift(path: Path, env_name: str, rules=None) -> list[str]:
    """Every compared output of lesson ``path`` that moves along path ``env_name``."""
    import nbformat

    rules = rules if rules is not None else load_sanitizer()
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    fresh = run_lesson(path, env_name)
    found = []
    for i, (cell, outputs) in enumerate(zip(code, fresh, strict=True), start=1):
        if not compared(cell):
            continue
        a = sanitize("\n".join(texts(cell.get("outputs", []))), rules)
        b = sanitize("\n".join(texts(outputs)), rules)
        if a != b:
            for change in moved(a, b):
                found.append(f"{path.stem} code cell {i} [{env_name}]: {change}")
    return found


def lessons(names: list[str]) -> list[Path]:
    every = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return every
    chosen = [p for p in every if any(p.stem.startswith(n) or p.name == n for n in names)]
    if not chosen:
        raise SystemExit(f"digit_drift: no lesson matches {names}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lessons", nargs="*", help="lesson names or prefixes (default: all)")
    ap.add_argument("--path", action="append", choices=sorted(PATHS), help="default: all")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--execute", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--to", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.execute:
        _execute(args.execute, args.to)
        return 0
    rules = load_sanitizer()
    jobs = [(p, e) for p in lessons(args.lessons) for e in (args.path or list(PATHS))]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda job: drift(*job, rules=rules), jobs))
    found = [line for r in results for line in r]
    for line in found:
        print(line)
    print(f"digit_drift: {len(jobs)} runs, {len(found)} moved outputs")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
