"""What every explorer shares: its figure as PNG bytes, and the widget box around it.

* :func:`figure_png` draws on a fresh matplotlib ``Figure`` with an Agg canvas in the
  course style (no pyplot state is touched) and returns the PNG bytes;
* :func:`explorer_box` stacks the controls, an HTML readout and a PNG image in an
  ``ipywidgets.VBox``, redraws whenever a control's value changes, and exposes ``state``
  (what is shown now), ``readout``, ``image`` and every control as attributes of the box.

The static form
---------------
An explorer is displayed as one output with three representations (its
``_repr_mimebundle_``):

* ``application/vnd.jupyter.widget-view+json`` — the live widget. Only a frontend with a
  running kernel and the widget manager renders it (JupyterLab after running the cell);
* ``image/png`` — a still of the explorer's first state, with the caption
  :data:`STILL_CAPTION` drawn under the figure. This is what a stored notebook shows
  everywhere else: JupyterLab before the cell is run, the slides, the handouts, any
  notebook viewer. ``tools/execute_notebooks.py`` drops the widget view (its model id is
  random), so the still is what is stored;
* ``text/plain`` — :data:`STILL_CAPTION` itself, fixed text: the only part strict nbval
  compares (it never compares images), so an explorer cell needs no ignore marker.

Never the widget's own text repr (``VBox(children=(...``).
"""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["STILL_CAPTION", "captioned_png", "explorer_box", "figure_png"]

STILL_CAPTION = "Live in JupyterLab: run the cell to move the sliders"


def figure_png(draw: Callable[[Any], object], figsize: tuple[float, float]) -> bytes:
    """``draw(fig)`` on a new constrained-layout figure of ``figsize`` inches, as PNG bytes.

    In the course style (150 dpi); the width is capped at the course's 8 in.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from attnlib.plot import course_style, fit_width

    with course_style():
        fig = Figure(figsize=fit_width(*figsize), layout="constrained")
        FigureCanvasAgg(fig)
        draw(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    return buf.getvalue()


def captioned_png(png: bytes, caption: str = STILL_CAPTION) -> bytes:
    """``png`` with a one-line italic ``caption`` in a strip below it (same dpi, no resampling)."""
    import matplotlib.image as mpimg
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from attnlib.plot import DPI, MIN_FONT

    img = mpimg.imread(io.BytesIO(png), format="png")  # (height, width, 4) floats
    height, width = img.shape[:2]
    strip = int(round(0.34 * DPI))  # pixels below the figure for the caption
    fig = Figure(figsize=(width / DPI, (height + strip) / DPI), dpi=DPI, facecolor="white")
    FigureCanvasAgg(fig)
    fig.figimage(img, xo=0, yo=strip, origin="upper")
    fig.text(
        0.5,
        0.5 * strip / (height + strip),
        f"▶ {caption}",
        ha="center",
        va="center",
        fontsize=MIN_FONT + 1,
        style="italic",
        color="0.25",
    )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    return buf.getvalue()


@functools.cache
def _box_class():
    """``ExplorerBox``: an ``ipywidgets.VBox`` whose display carries a still and fixed text."""
    import ipywidgets as W

    class ExplorerBox(W.VBox):
        """An explorer: the live widget where a kernel runs, a captioned still elsewhere."""

        _still: bytes | None = None

        def still_png(self) -> bytes:
            """The captioned still of the state first shown (PNG bytes)."""
            if self._still is None:
                self._still = captioned_png(self._first_png)
            return self._still

        def _repr_mimebundle_(self, **kwargs):
            data = super()._repr_mimebundle_(**kwargs) or {}
            data["text/plain"] = STILL_CAPTION
            data["image/png"] = base64.b64encode(self.still_png()).decode("ascii")
            return data

    return ExplorerBox


def explorer_box(
    rows: Sequence[Any],
    controls: Mapping[str, Any],
    compute: Callable[[], Any],
    render: Callable[[Any], bytes],
    describe: Callable[[Any], str] | None = None,
):
    """The explorer's ``ipywidgets.VBox``: ``rows`` of controls, then readout, then image.

    Parameters
    ----------
    rows : sequence of widgets or of tuples of widgets
        The controls' layout, top to bottom; a tuple is one ``HBox`` row.
    controls : mapping of attribute name to widget
        Set as attributes of the box (``box.angle_slider``); a change of any one's
        ``value`` redraws.
    compute : callable returning the state
        Reads the controls' current values and returns what is shown (the pure state).
    render : callable of the state returning PNG bytes
    describe : callable of the state returning str, optional
        The readout's text; default ``state.summary()``.

    Returns
    -------
    ipywidgets.VBox
        Already showing ``compute()``; attributes ``state``, ``readout`` (HTML), ``image``
        (PNG) and the ``controls``; ``still_png()`` is the captioned still its display
        stores (see the module docstring: the static form).
    """
    import ipywidgets as W

    describe = describe or (lambda state: state.summary())
    readout, image = W.HTML(), W.Image(format="png")
    laid_out = [W.HBox(list(r)) if isinstance(r, tuple | list) else r for r in rows]
    box = _box_class()([*laid_out, readout, image])

    def update(*_):
        state = compute()
        box.state = state
        readout.value = f"<code>{describe(state)}</code>"
        image.value = render(state)

    for name, widget in controls.items():
        setattr(box, name, widget)
        widget.observe(update, names="value")
    box.readout, box.image = readout, image
    update()
    box._first_png = image.value
    return box
