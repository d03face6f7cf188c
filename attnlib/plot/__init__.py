"""attnlib.plot — every figure in the course, so that they all look alike.

Rows of an attention map are query positions and columns are key positions. Functions take
an optional ``ax`` and return the Axes (or the Figure for multi-panel plots); none calls
``plt.show()``, and none changes matplotlib's global settings.

One projector style (see :mod:`attnlib.plot._base`): text of 12 pt (nothing under 10 pt),
figures at most 8 in wide, stored at 150 dpi, the Okabe–Ito colour-blind-safe palette with a
second channel (marker, line style, hatch or a direct label) for every series, colourbars
on heat maps and masked cells hatched grey with a legend entry. Importing changes nothing:
figures are drawn inside :func:`course_style`; a lesson that also draws with plain
matplotlib calls :func:`use_course_style` once, or makes its panels with :func:`subplots`.

Topic-specific figures live in private submodules (``_scaling.py`` for lesson 04, ...) and
are re-exported here, so lessons always write ``from attnlib import plot`` and
``plot.heatmap(...)``.
"""

from attnlib.plot._base import (
    DPI,
    HATCHES,
    LINESTYLES,
    MARKERS,
    MAX_WIDTH,
    MIN_FONT,
    OKABE_ITO,
    PALETTE,
    SCORES_CMAP,
    STYLE,
    WEIGHTS_CMAP,
    attention_grid,
    bars,
    course_style,
    fit_width,
    heatmap,
    masked_patch,
    new_axes,
    series_style,
    subplots,
    use_course_style,
    vectors,
)

__all__ = [
    "DPI",
    "HATCHES",
    "LINESTYLES",
    "MARKERS",
    "MAX_WIDTH",
    "MIN_FONT",
    "OKABE_ITO",
    "PALETTE",
    "SCORES_CMAP",
    "STYLE",
    "WEIGHTS_CMAP",
    "attention_grid",
    "bars",
    "course_style",
    "fit_width",
    "heatmap",
    "masked_patch",
    "new_axes",
    "series_style",
    "subplots",
    "use_course_style",
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
    grad_norm_curves,
    learning_curves,
)

__all__ += ["entropy_curve", "grad_norm_curves", "learning_curves"]

from attnlib.plot._live import LiveCurve  # noqa: E402

__all__ += ["LiveCurve"]

# Lesson 05: how wide must a tied K = V head be; key and value spaces.
from attnlib.plot._lookup import feature_spaces, width_sweep  # noqa: E402

__all__ += ["feature_spaces", "width_sweep"]

# Lessons 10–12: decoding cost, blockwise memory and score tiles, positions.
from attnlib.plot._decoding import (  # noqa: E402
    cost_curves,
    position_codes,
    score_tiles,
    score_vs_offset,
)

__all__ += ["cost_curves", "position_codes", "score_tiles", "score_vs_offset"]

# Lesson 09: keys that find syntactic roles.
from attnlib.plot._syntax import grouped_bars, role_scatter  # noqa: E402

__all__ += ["grouped_bars", "role_scatter"]

# Lesson 13: keys built from another head's output (induction heads).
from attnlib.plot._induction import (  # noqa: E402
    ablation_bars,
    composition_maps,
    head_patterns,
    induction_view,
    phase_change,
)

__all__ += ["ablation_bars", "composition_maps", "head_patterns", "induction_view", "phase_change"]

# Lesson 14: fewer keys to keep.
from attnlib.plot._fewer_keys import (  # noqa: E402
    accuracy_vs_distance,
    cache_bars,
    keys_kept_view,
    tradeoff_scatter,
)

__all__ += ["accuracy_vs_distance", "cache_bars", "keys_kept_view", "tradeoff_scatter"]
from attnlib.plot._block import curves  # noqa: E402 - lesson 15: measured curves

__all__ += ["curves"]

# Lesson 17: choosing a token (the sampling explorer's figure and its static stand-in).
from attnlib.plot._sampling import sampling_view, sampling_views  # noqa: E402

__all__ += ["sampling_view", "sampling_views"]
