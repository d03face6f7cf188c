"""`python -m kvstaff.bench --quick` produces its tables (a smoke test, not a timed test).

The byte counts in the tables are checked against numbers worked out by hand here; no time
is asserted, and nothing is compiled (``--quick`` leaves the compiled FlexAttention out).
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess

import pytest
import torch

from attnlib.roofline import decode_cost
from attnlib.tasks import plays
from attnlib.timing import median_times
from attnlib.training import torch_threads
from kvstaff import bench
from kvstaff.bench import main


@pytest.fixture(scope="module")
def quick_output() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--quick"]) == 0
    return out.getvalue()


def _rows(out: str, title: str, n_rows: int) -> list[list[str]]:
    """The cells of the first ``n_rows`` rows of the table under ``title``."""
    lines = out[out.index(title) :].splitlines()
    body = lines[lines.index(next(x for x in lines if set(x) <= {"-", " "} and x)) + 1 :]
    return [re.split(r"\s{2,}", line.strip()) for line in body[:n_rows]]


def test_quick_bench_prints_every_table(quick_output):
    out = quick_output
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


# ---------------------------------------------------------------------------- lesson 17


def test_the_roofline_table_reads_the_bytes_of_weights_and_cache(quick_output):
    out = quick_output
    assert re.search(r"copy bandwidth [\d.]+ GB/s", out)
    rows = _rows(out, "Decoding is reading memory", 2)
    assert [r[:2] for r in rows] == [["plays", "8"], ["serving", "8"]]
    # the plays model at seq_k 8: 121,344 float32 weights + 8 positions x 2 layers x 4 heads
    # x (16 + 16) numbers x 4 bytes
    nbytes = 4 * 121_344 + 8 * 2 * 4 * 32 * 4
    assert decode_cost(plays.load_model(), 8).nbytes == nbytes
    assert rows[0][2] == f"{nbytes / 1e6:.2f}"
    for row in rows:
        ratios = [float(x) for x in row[4:]]
        assert all(x > 0 for x in ratios), row
        assert 0.2 < ratios[0] < 1.0  # FLOPs per byte of a float32 decoding step


def test_fewer_kv_heads_table_holds_the_caches_bytes(quick_output):
    rows = {r[0]: r for r in _rows(quick_output, "Fewer key/value heads", 3)}
    assert set(rows) == {"MHA", "MQA", "latent 8"}
    # batch 4 x seq_k 64 x 1 layer x 4 bytes x (4 heads x (16 + 16) | 1 head x 32 | 8)
    for name, numbers in (("MHA", 128), ("MQA", 32), ("latent 8", 8)):
        assert float(rows[name][2]) == pytest.approx(4 * 64 * 4 * numbers / 2**20, rel=1e-2)
    assert rows["MHA"][1] == "4" and rows["MQA"][1] == "1" and rows["latent 8"][1] == "-"
    assert rows["MHA"][-1] == "1.00"


def test_paged_table_reserves_whole_pages_and_matches_the_cache(quick_output):
    rows = _rows(quick_output, "A paged cache", 2)
    # 8 rows x 256 positions x 2 layers x 4 heads x 32 numbers x 4 bytes = 2048 KiB
    assert [r[2] for r in rows] == ["2048", "2048"]
    lengths, row = bench.PAGED_LENGTHS, 2 * 4 * 32 * 4  # bytes of one position, 2 layers
    assert rows[0][1] == f"{sum(lengths) * row / 2**10:.0f}"
    assert rows[0][3] == f"{sum(-(-n // 16) * 16 for n in lengths) * row / 2**10:.0f}"
    assert [r[-1] for r in rows] == ["yes", "yes"]  # PagedKVCache.reserved_bytes = formula
    assert float(rows[1][3]) < float(rows[0][3])  # the shared prompt's pages held once


def test_quantised_table_bytes_per_token_and_errors(quick_output):
    rows = {r[0]: r for r in _rows(quick_output, "A quantised cache", 4)}
    # per layer and head: keys per channel cost 16 codes + a scale and zero (2 x 4 bytes) per
    # channel per group of 32 tokens; values per token cost 16 codes + 2 x 4 bytes
    per_head = {
        "float32": 32 * 4,
        "int8, K/channel V/token": (16 + 2 * 16 * 4 / 32) + (16 + 8),
        "int4, K/channel V/token": (8 + 2 * 16 * 4 / 32) + (8 + 8),
        "int4, K/token V/token": (8 + 8) + (8 + 8),
    }
    for name, nbytes in per_head.items():
        assert rows[name][1] == f"{2 * 4 * nbytes:.0f}", name  # 2 layers x 4 heads
    errors = [float(rows[name][3]) for name in per_head]
    assert errors[0] == 0 and 0 < errors[1] < errors[2] < errors[3] < 0.5, errors


def test_flex_table_counts_skipped_tiles_without_compiling(quick_output):
    rows = {r[0]: r for r in _rows(quick_output, "Masks as functions", 3)}
    assert set(rows) == {"causal", "window 32", "4 documents"}
    # seq 256 in 128 x 128 tiles: 4 tiles; all three skip the one above the diagonal. The
    # lower-left tile (queries 128..255, keys 0..127) is empty for four documents of 64, not
    # for a window of 32 (query 128 sees keys 97..128)
    assert rows["causal"][1] == rows["window 32"][1] == "0.25"
    assert rows["4 documents"][1] == "0.50"
    assert all(r[4] == "-" and r[-2] == "-" for r in rows.values())  # nothing compiled


def test_a_failed_compilation_is_printed_and_the_table_goes_on(monkeypatch):
    compile_ = torch.compile

    def broken(fn, *args, **kwargs):  # the bench's compilation fails, eager's wrapper runs
        if kwargs.get("dynamic") is False:
            raise RuntimeError("no C++ compiler")
        return compile_(fn, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", broken)
    out = bench.bench_flex(32, heads=1, d_k=4, window=8, n_docs=2, repeats=1)
    assert out.count("compilation failed: RuntimeError: no C++ compiler") == 3
    assert re.search(r"^\s*causal\s+0.00\s+[\d.]+\s+[\d.]+\s+-", out, re.M)
