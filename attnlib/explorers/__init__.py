"""Interactive explorers (ipywidgets) for lectures and self-study.

Each explorer is a pure *state* function (control values in, everything shown out) and a
builder that wires widgets to it, so it can be tested without a browser.
"""

from attnlib.explorers._all import (
    MASK_MODES,
    HeadState,
    MaskState,
    QueryState,
    head_explorer,
    head_state,
    mask_explorer,
    mask_state,
    query_explorer,
    query_state,
)
from attnlib.explorers.scale import ExplorerState, explorer_state, scaling_explorer

__all__ = [
    "MASK_MODES",
    "ExplorerState",
    "HeadState",
    "MaskState",
    "QueryState",
    "explorer_state",
    "head_explorer",
    "head_state",
    "mask_explorer",
    "mask_state",
    "query_explorer",
    "query_state",
    "scaling_explorer",
]
