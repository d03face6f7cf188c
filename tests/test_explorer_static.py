"""The static form of every explorer (attnlib/explorers/_render.py).

Displayed, an explorer is one output with three representations: the live widget view
(rendered only where a kernel runs), a still PNG of its first state with the caption
"Live in JupyterLab: ..." drawn under it, and that caption as text/plain. So a stored
explorer is never the widget's text repr (``VBox(children=(...``), and strict nbval, which
compares text/plain and never images, sees the same fixed line on every run.
"""

from __future__ import annotations

import base64
import struct

import nbformat
import numpy as np
import pytest

from attnlib.explorers import (
    head_explorer,
    keys_kept_explorer,
    mask_explorer,
    query_explorer,
    reading_explorer,
    sampling_explorer,
    scaling_explorer,
)
from attnlib.explorers._render import STILL_CAPTION, captioned_png, figure_png

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def _heads():
    rng = np.random.default_rng(0)
    return rng.dirichlet(np.ones(5), size=(2, 5))  # (n_heads, seq_q, seq_k)


def _plays_model():
    from attnlib.tasks import plays

    return plays.load_model()


def _plays_vocab():
    from attnlib.tasks import plays

    return plays.vocabulary()


EXPLORERS = {
    "query": lambda: query_explorer(angle=30.0, d_k=16),
    "scaling": lambda: scaling_explorer(d_k=64),
    "mask": lambda: mask_explorer("causal + padding", 4),
    "heads": lambda: head_explorer(_heads(), queries=list("abcde"), keys=list("abcde")),
    "keys_kept": lambda: keys_kept_explorer(window=4, k=4, d_latent=64),
    "reading": lambda: reading_explorer(_plays_model(), _plays_vocab(), "Now tell me"),
    "sampling": lambda: sampling_explorer("MIRANDA.\n", temperature=0.7, top_k=10),
}


@pytest.mark.parametrize("name", list(EXPLORERS))
def test_display_is_a_captioned_still_and_the_live_widget(name):
    from IPython.core.formatters import DisplayFormatter

    box = EXPLORERS[name]()
    data, _ = DisplayFormatter().format(box)
    assert data["text/plain"] == STILL_CAPTION  # never "VBox(children=(..."
    assert "children=" not in data["text/plain"]
    assert data[WIDGET_VIEW]["model_id"] == box.model_id  # live where a kernel runs
    still = base64.b64decode(data["image/png"])
    assert still == box.still_png()
    # the still is the first state's figure with a caption strip below it, at 150 dpi
    first_w, first_h = png_size(box.image.value)
    w, h = png_size(still)
    assert w == first_w and h > first_h and w <= 8.5 * 150


def test_the_still_stays_the_first_state():
    box = mask_explorer("causal", 6)
    first = box.still_png()
    box.mode_buttons.value = "padding"
    assert box.image.value != first  # the live image moved...
    assert box.still_png() == first  # ...the stored still did not (its output is fixed)


def test_captioned_png_adds_a_strip_below_without_resampling():
    def draw(fig):
        fig.subplots().plot([0, 1], [0, 1])

    png = figure_png(draw, (4.0, 2.0))
    assert png_size(png) == (600, 300)  # 150 dpi
    w, h = png_size(captioned_png(png))
    assert w == 600 and 300 < h < 400
    assert png_size(figure_png(draw, (12.0, 3.0)))[0] == 8 * 150  # never wider than 8 in


@pytest.mark.slow
def test_a_notebook_stores_the_still_and_nbval_sees_fixed_text(tmp_path):
    """Run explorers in a real kernel and store the notebook as tools/execute_notebooks.py
    does: the stored output is the PNG and the caption, nothing else."""
    from nbclient import NotebookClient

    code = (
        "from attnlib.explorers import mask_explorer, query_explorer\n"
        "display(query_explorer(angle=0.0))\n"
        "mask_explorer('causal', 5)"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    NotebookClient(nb, kernel_name="key-vectors", timeout=120).execute()
    outs = nb.cells[0].outputs
    assert [o.output_type for o in outs] == ["display_data", "execute_result"]
    for o in outs:
        o.data.pop(WIDGET_VIEW)  # what tools/execute_notebooks.py strips (random model id)
        assert sorted(o.data) == ["image/png", "text/plain"]
        assert o.data["text/plain"] == STILL_CAPTION
        assert png_size(base64.b64decode(o.data["image/png"]))[0] <= 8.5 * 150
