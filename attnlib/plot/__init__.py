"""attnlib.plot — every figure in the course, so that they all look alike.

Rows of an attention map are query positions and columns are key positions. Functions take
an optional ``ax`` and return the Axes (or the Figure for multi-panel plots); none calls
``plt.show()``, and none changes matplotlib's global settings.

Topic-specific figures live in private submodules (``_scaling.py`` for lesson 04, ...) and
are re-exported here, so lessons always write ``from attnlib import plot`` and
``plot.heatmap(...)``.
"""

from attnlib.plot._base import (
    PALETTE,
    SCORES_CMAP,
    WEIGHTS_CMAP,
    attention_grid,
    bars,
    course_style,
    heatmap,
    new_axes,
    vectors,
)

__all__ = [
    "PALETTE",
    "SCORES_CMAP",
    "WEIGHTS_CMAP",
    "attention_grid",
    "bars",
    "course_style",
    "heatmap",
    "new_axes",
    "vectors",
]
