"""`python -m kvstaff.bench --quick` produces its tables (a smoke test, not a timed test)."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from attnlib.timing import median_times
from attnlib.training import torch_threads
from kvstaff.bench import main


def test_quick_bench_prints_every_table(capsys):
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\d+ cores, torch [\d.]+\S* \(\d+ threads\)", out)
    for title in (
        "Attention time",
        "Peak memory",
        "Greedy decoding",
        "Fewer keys to keep",
        "The model of real text",
    ):
        assert title in out
    # lesson 16: the plays model decodes the same characters with and without the cache
    assert re.search(r"^\s*8\s+\d+\s+\d+\s+[\d.]+\s+yes$", out[out.index("real text") :], re.M)
    # attention rows for both sizes, with a ratio column filled in
    assert re.search(r"^\s*64\s+[\d.]+\s+[\d.]+", out, re.M)
    assert re.search(r"^\s*128\s+causal", out, re.M)
    # memory rows: the blockwise path needs less at 512 than the explicit one
    row = re.search(r"^\s*512\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", out, re.M)
    assert row and float(row.group(3)) > 1
    assert re.search(r"^\s*8\s+\d+\s+[\d.]+\s+[\d.]+\s+yes", out, re.M)  # same tokens
    # lesson 14: one row per variant; the formula's bytes are the bytes the caches hold
    table = out[out.index("Fewer keys to keep") :]
    rows = {}
    for label in (
        "full MHA",
        "GQA, 2 KV heads",
        "latent, 8 numbers",
        "latent, 2 numbers",
        "window 4",
        "window 4 + 1 global",
        "top-4 selection",
        "KV shared by 2 layers",
    ):
        m = re.search(
            rf"^\s*{re.escape(label)}\s+(\d+)\s+(\d+)\s+([\d.]+)\s+\d+\s+[\d.]+$", table, re.M
        )
        assert m, label
        rows[label] = (int(m.group(1)), int(m.group(2)), float(m.group(3)))
        assert rows[label][0] == rows[label][1], label
    # d_model 32, 2 layers, fp32: 4 heads x (8 + 8) numbers x 2 layers x 4 bytes per token
    assert rows["full MHA"][:2] == (512, 512)
    assert rows["latent, 2 numbers"][2] == 0.031 and rows["KV shared by 2 layers"][2] == 0.5
    assert rows["window 4"][2] == 0.25  # 4 of the 16 positions kept
    assert rows["top-4 selection"][2] > 1  # selection keeps every key, and the indexer's


@pytest.mark.slow
def test_module_runs_as_a_script(root, python):
    proc = subprocess.run(
        [python, "-m", "kvstaff.bench", "--help"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0 and "--quick" in proc.stdout


def test_median_times_runs_interleaved_and_torch_threads_restores(three_threads):
    calls = []
    t = median_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3)
    assert calls == ["a", "b"] * 4  # one warm-up round, then 3 timed rounds, interleaved
    assert set(t) == {"a", "b"} and all(v >= 0 for v in t.values())
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="repeats"):
        median_times({"a": lambda: None}, repeats=0)
