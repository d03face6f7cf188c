"""Interactive explorers (ipywidgets) for lectures and self-study.

One module per explorer — :mod:`~attnlib.explorers.dot` (lesson 01),
:mod:`~attnlib.explorers.query` (03),
:mod:`~attnlib.explorers.scale` (04), :mod:`~attnlib.explorers.heads` (07),
:mod:`~attnlib.explorers.mask` (08), :mod:`~attnlib.explorers.induction` (13),
:mod:`~attnlib.explorers.keys_kept` (14), :mod:`~attnlib.explorers.reading` (16),
:mod:`~attnlib.explorers.sampling` (17) —
and one helper, ``_render``, that draws a figure to
PNG in the course style and wires controls, readout and image into a widget box.

Each explorer is a pure *state* function (control values in, everything shown out) and a
builder that wires widgets to it, so it can be tested without a browser. Lessons write
``from attnlib.explorers import query_explorer, query_state``.
"""

from attnlib.explorers.dot import DotState, dot_explorer, dot_state
from attnlib.explorers.heads import HeadState, head_explorer, head_state
from attnlib.explorers.induction import InductionState, induction_explorer, induction_state
from attnlib.explorers.keys_kept import KeysKeptState, keys_kept_explorer, keys_kept_state
from attnlib.explorers.mask import MASK_MODES, MaskState, mask_explorer, mask_state
from attnlib.explorers.query import QueryState, query_explorer, query_state
from attnlib.explorers.reading import ReadingState, reading_explorer, reading_state
from attnlib.explorers.sampling import (
    SamplingState,
    plays_next_logits,
    sampling_explorer,
    sampling_state,
)
from attnlib.explorers.scale import ExplorerState, explorer_state, scaling_explorer

__all__ = [
    "MASK_MODES",
    "DotState",
    "ExplorerState",
    "HeadState",
    "InductionState",
    "KeysKeptState",
    "MaskState",
    "QueryState",
    "ReadingState",
    "SamplingState",
    "dot_explorer",
    "dot_state",
    "explorer_state",
    "head_explorer",
    "head_state",
    "induction_explorer",
    "induction_state",
    "keys_kept_explorer",
    "keys_kept_state",
    "mask_explorer",
    "mask_state",
    "plays_next_logits",
    "query_explorer",
    "query_state",
    "reading_explorer",
    "reading_state",
    "sampling_explorer",
    "sampling_state",
    "scaling_explorer",
]
