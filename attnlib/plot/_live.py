"""A curve that redraws in place while a training loop runs (lesson 16's live run).

The only figure of the course that changes while its cell runs. In a notebook it is one
display with a ``display_id``: shown once when the curve is made, updated in place every
``every`` points, and closed with a last update, so the notebook stores the final curve
(its ``text/plain`` is the figure's fixed repr: strict nbval compares that, never the image).
Outside a kernel nothing is displayed; the figure is still drawn and returned by
:meth:`LiveCurve.close`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from attnlib.plot._base import course_style, fit_width, series_style
from attnlib.training import in_kernel

__all__ = ["LiveCurve"]


class LiveCurve:
    """One line, extended point by point and redrawn in place.

    Parameters
    ----------
    xlabel, ylabel : str
    label : str
        The line's legend entry.
    every : int, default 20
        Redraw after every ``every`` new points (drawing costs ~0.1 s).
    xlim, ylim : (float, float), optional
        Fixed axis ranges, so that the curve does not jump while it grows.
    reference : float, optional
        A dotted horizontal line at this height, labelled ``reference_label``.

    Examples
    --------
    >>> curve = LiveCurve(xlabel="step", ylabel="loss", label="training loss", xlim=(0, 3))
    >>> for step, loss in enumerate([4.0, 3.1, 2.7]):
    ...     curve.add(step, loss)
    >>> ax = curve.close()          # the finished figure's Axes
    >>> [round(float(y), 1) for y in ax.lines[0].get_ydata()]
    [4.0, 3.1, 2.7]
    """

    def __init__(
        self,
        *,
        xlabel: str,
        ylabel: str,
        label: str,
        every: int = 20,
        xlim=None,
        ylim=None,
        reference: float | None = None,
        reference_label: str | None = None,
    ):
        if int(every) < 1:
            raise ValueError(f"LiveCurve: every must be >= 1, got {every!r}")
        self.every = int(every)
        self.x: list[float] = []
        self.y: list[float] = []
        with course_style():
            self.fig, self.ax = plt.subplots(figsize=fit_width(7.5, 3.6), layout="constrained")
            (self.line,) = self.ax.plot([], [], label=label, **{**series_style(0), "marker": None})
            if reference is not None:
                self.ax.axhline(reference, color="0.45", ls=":", lw=1.5, label=reference_label)
            self.ax.set_xlabel(xlabel)
            self.ax.set_ylabel(ylabel)
            if xlim is not None:
                self.ax.set_xlim(*xlim)
            if ylim is not None:
                self.ax.set_ylim(*ylim)
            self.ax.legend(loc="upper right")
        plt.close(self.fig)  # never shown by the inline backend at the cell's end: only here
        self._handle = None
        if in_kernel():
            from IPython.display import display

            self._handle = display(self.fig, display_id=True)
        self._closed = False

    def add(self, x: float, y: float) -> None:
        """Append one point; redraw after every ``every`` points."""
        if self._closed:
            raise RuntimeError("LiveCurve.add: the curve is closed")
        self.x.append(float(x))
        self.y.append(float(y))
        if len(self.x) % self.every == 0:
            self._redraw()

    def _redraw(self) -> None:
        self.line.set_data(np.asarray(self.x), np.asarray(self.y))
        self.ax.relim()
        self.ax.autoscale_view()
        if self._handle is not None:
            self._handle.update(self.fig)

    def close(self):
        """Draw the last points and stop updating; returns the Axes."""
        if not self._closed:
            self._redraw()
            self._closed = True
        return self.ax
