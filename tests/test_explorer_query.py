"""The query explorer's figure (lesson 03): read from the back of the room.

Every axis is named (the scores' axis says what was divided by), tick labels never run into
each other, the key names are written once and horizontally, and no text is under the
course minimum. The state itself is tested in test_explorers.py.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.text import Text

from attnlib import plot
from attnlib.explorers.query import VALUE_NAMES, query_state, render_query

WORDS = ["the", "cats", "chase", "a", "small", "mouse"]
KEYS = np.array([[0.0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1], [1, 0, 0]])
VALUES = np.array([[0.0, 0], [1, 0], [0, 1], [0, 0], [0.5, 0], [1, 0]])


def lesson_state(**kw):
    """Lesson 03's own setting: its sentence, its (thing, action) values."""
    return query_state(
        0.0,
        keys=KEYS,
        values=VALUES,
        plane=np.eye(3)[[0, 2]],
        length=4.0,
        labels=WORDS,
        value_names=("thing", "action"),
        **kw,
    )


def drawn(state):
    """The figure render_query draws for ``state``, drawn (so tick labels exist)."""
    captured = []
    real = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        captured.append(fig)
        return real(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt.Figure, "savefig", keep)
        render_query(state)
    assert len(captured) == 1
    return captured[0]


STATES = {
    "lesson": lesson_state,
    "lesson, T = 0.25": lambda: lesson_state(temperature=0.25),
    "random keys": lambda: query_state(30.0, 16),
    "unscaled, T = 0.2": lambda: query_state(150.0, 512, 0.2, scaled=False),
}


@pytest.mark.parametrize("name", STATES)
def test_every_axis_is_named_and_no_ticks_crowd(name):
    state = STATES[name]()
    fig = drawn(state)
    ax_s, ax_w, ax_v = fig.axes
    assert ax_s.get_xlabel().startswith("score") and ax_s.get_ylabel() == "key"
    assert ax_w.get_xlabel() == "weight"
    assert (ax_v.get_xlabel(), ax_v.get_ylabel()) == state.value_names
    # the key names: once, on the scores' rows, horizontal, in the keys' order from the top
    names = [t.get_text() for t in ax_s.get_yticklabels()]
    assert names == [state.key_name(j) for j in range(state.seq_k)]
    assert all(t.get_rotation() == 0 for t in ax_s.get_yticklabels())
    assert not any(t.get_text() for t in ax_w.get_yticklabels())
    assert ax_s.get_ylim()[0] > ax_s.get_ylim()[1]  # key 0 on top
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            boxes = sorted(
                (t.get_window_extent(renderer) for t in labels), key=lambda b: (b.x0, b.y0)
            )
            assert len(boxes) <= max(state.seq_k, 4), (name, [t.get_text() for t in labels])
            for a, b in zip(boxes, boxes[1:], strict=False):
                assert not a.overlaps(b), (name, [t.get_text() for t in labels])
    small = {
        (t.get_text(), t.get_fontsize())
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < plot.MIN_FONT
    }
    assert not small, small
    plt.close(fig)


def test_the_scores_axis_says_what_was_divided_by():
    labels = [
        drawn(s).axes[0].get_xlabel()
        for s in (
            query_state(0.0, 16),
            query_state(0.0, 16, 2.0),
            query_state(0.0, 16, scaled=False),
            query_state(0.0, 16, 2.0, scaled=False),
        )
    ]
    assert labels == [
        "score  q · k / √d_k",
        "score  q · k / (√d_k · T)",
        "score  q · k",
        "score  q · k / T",
    ]


def test_value_names_default_and_errors():
    assert query_state(0.0, 16).value_names == VALUE_NAMES
    assert lesson_state().value_names == ("thing", "action")
    for bad in ("thing", ("only one",), ("a", "b", "c"), 3):
        with pytest.raises(ValueError, match="value_names"):
            query_state(0.0, 16, value_names=bad)
