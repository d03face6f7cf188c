"""attnlib.training.progress_bar: live in a notebook, never stored.

In a kernel the bar is one display (with a display_id) that starts and ends as the fixed
line "<desc>: <steps> steps" and shows the moving bar only through display updates; so
what a notebook stores equals what strict nbval sees on a re-run (nbval ignores
update_display_data). Outside a kernel it is a plain tqdm bar on stdout (tests/test_training.py
checks its layout).
"""

from __future__ import annotations

import re

import nbformat
import pytest
import torch

from attnlib import training


class FakeHandle:
    def __init__(self, log, data):
        self.log = log
        log.append(("display", data))

    def update(self, data, raw=False, metadata=None):
        assert raw and metadata == training.PROGRESS_METADATA
        self.log.append(("update", data))


@pytest.fixture
def in_kernel(monkeypatch):
    """Pretend to run in a kernel; record what is displayed and updated."""
    import IPython.display

    log = []

    def display(data, raw=False, metadata=None, display_id=None):
        assert raw and display_id is True and metadata == training.PROGRESS_METADATA
        return FakeHandle(log, data)

    monkeypatch.setattr(training, "in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", display)
    return log


def quadratic():
    p = torch.nn.Parameter(torch.tensor([3.0, -1.0]))
    return p, (lambda i: (p**2).sum())


def test_live_bar_starts_and_ends_on_the_fixed_line(in_kernel, capsys):
    p, step = quadratic()
    training.train([p], step, steps=25, lr=0.1, desc="toy run")
    kinds = [k for k, _ in in_kernel]
    assert kinds[0] == "display" and kinds.count("display") == 1  # one output only
    first, last = in_kernel[0][1], in_kernel[-1][1]
    assert first == last == {"text/plain": "toy run: 25 steps"}
    bars = [d["text/plain"] for k, d in in_kernel[1:-1]]
    assert bars, "the bar was never drawn while training"
    assert all(re.match(r"toy run: +\d+%\|[# 0-9]{30}\| \d+/25 \[", b) for b in bars), bars
    assert all("<progress" in d["text/html"] for _, d in in_kernel[1:-1])
    assert capsys.readouterr() == ("", "")  # nothing on stdout or stderr


def test_live_bar_stopped_early_says_so(in_kernel):
    with training.progress_bar(10, "run") as bar:
        bar.update(3)
    assert in_kernel[-1][1] == {"text/plain": "run: stopped after 3 of 10 steps"}
    bar.close()  # closing twice changes nothing
    assert in_kernel[-1][1] == {"text/plain": "run: stopped after 3 of 10 steps"}


def test_disabled_bar_shows_nothing_in_a_kernel(in_kernel, capsys):
    p, step = quadratic()
    training.train([p], step, steps=3, lr=0.1, progress=False)
    assert in_kernel == [] and capsys.readouterr() == ("", "")


def test_outside_a_kernel_no_display_is_made(capsys):
    assert not training.in_kernel()
    with training.progress_bar(2, "plain") as bar:
        bar.update(2)
    assert "plain: 100%" in capsys.readouterr().out


@pytest.mark.slow
def test_a_notebook_stores_only_the_fixed_line():
    """A real kernel: the stored output is one display_data with the fixed line, and the
    first display the kernel sent (what nbval compares) is that same line."""
    from nbclient import NotebookClient

    seen = []

    class Recording(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            kind = msg["msg_type"]
            if kind in ("display_data", "update_display_data", "stream"):
                seen.append((kind, msg["content"].get("data", msg["content"].get("text"))))
            return super().process_message(msg, cell, cell_index)

    code = (
        "import torch\nfrom attnlib.training import train\n"
        "p = torch.nn.Parameter(torch.ones(3))\n"
        "h = train([p], lambda i: (p ** 2).sum(), steps=300, lr=0.01, desc='demo')\n"
        "print('done')"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    Recording(nb, kernel_name="key-vectors", timeout=120).execute()
    outs = nb.cells[0].outputs
    assert [o.output_type for o in outs] == ["display_data", "stream"], outs
    assert outs[0].data == {"text/plain": "demo: 300 steps"}
    assert outs[0].metadata == {"attnlib": "progress"}  # decks leave it off the slides
    assert outs[1].name == "stdout" and outs[1].text == "done\n"
    assert seen[0] == ("display_data", {"text/plain": "demo: 300 steps"})
    assert seen[-2] == ("update_display_data", {"text/plain": "demo: 300 steps"})
    assert seen[-1] == ("stream", "done\n")
    assert [k for k, _ in seen].count("stream") == 1  # the bar never went to a stream
    assert any(k == "update_display_data" and "%|" in d["text/plain"] for k, d in seen)
