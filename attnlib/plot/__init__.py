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

# Lesson 04: why divide by √d_k.
from attnlib.plot._scaling import (  # noqa: E402
    entropy_gradient_vs_scale,
    explorer_grid,
    explorer_view,
    gradient_vs_width,
    saturation_vs_width,
    score_histograms,
    training_curves,
    variance_vs_width,
)

__all__ += [
    "entropy_gradient_vs_scale",
    "explorer_grid",
    "explorer_view",
    "gradient_vs_width",
    "saturation_vs_width",
    "score_histograms",
    "training_curves",
    "variance_vs_width",
]

# Lessons 05 and 06: keys versus values, learning keys.
from attnlib.plot._learning import (  # noqa: E402
    entropy_curve,
    feature_spaces,
    grad_norm_curves,
    learning_curves,
)

__all__ += ["entropy_curve", "feature_spaces", "grad_norm_curves", "learning_curves"]

# Lessons 10–12: decoding cost, blockwise memory, positions.
from attnlib.plot._decoding import cost_curves, position_codes, score_vs_offset  # noqa: E402

__all__ += ["cost_curves", "position_codes", "score_vs_offset"]

# Lesson 09: keys that find syntactic roles.
from attnlib.plot._syntax import grouped_bars, role_scatter  # noqa: E402

__all__ += ["grouped_bars", "role_scatter"]
