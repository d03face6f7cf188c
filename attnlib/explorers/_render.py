"""What every explorer shares: its figure as PNG bytes, and the widget box around it.

* :func:`figure_png` draws on a fresh matplotlib ``Figure`` with an Agg canvas in the
  course style (no pyplot state is touched) and returns the PNG bytes;
* :func:`explorer_box` stacks the controls, an HTML readout and a PNG image in an
  ``ipywidgets.VBox``, redraws whenever a control's value changes, and exposes ``state``
  (what is shown now), ``readout``, ``image`` and every control as attributes of the box.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["explorer_box", "figure_png"]


def figure_png(draw: Callable[[Any], object], figsize: tuple[float, float]) -> bytes:
    """``draw(fig)`` on a new constrained-layout figure of ``figsize`` inches, as PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from attnlib.plot import course_style

    with course_style():
        fig = Figure(figsize=figsize, layout="constrained")
        FigureCanvasAgg(fig)
        draw(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    return buf.getvalue()


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
        (PNG) and the ``controls``.
    """
    import ipywidgets as W

    describe = describe or (lambda state: state.summary())
    readout, image = W.HTML(), W.Image(format="png")
    laid_out = [W.HBox(list(r)) if isinstance(r, tuple | list) else r for r in rows]
    box = W.VBox([*laid_out, readout, image])

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
    return box
