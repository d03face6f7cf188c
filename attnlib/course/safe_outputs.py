"""Nothing a learner's kernel produced runs as code in a page staff or learners open.

Every output of a graded notebook comes from the learner's kernel — also those of the
instructor's own cells, since a solution cell can change what later cells display. An
object with ``_repr_html_`` or ``_repr_javascript_`` would put a ``<script>`` into the
feedback HTML (and into the formgrader, where staff review flagged work with their
session). :class:`SafeOutputs` keeps only plain text and raster images (``text/plain``,
``image/png``, ``image/jpeg``) of every output, and neutralises markdown and raw cells
that carry active HTML. It runs in ``make autograde`` (so the autograded notebook staff
open is clean) and again in ``make feedback``. The course's lessons show only text and
PNG figures, so nothing of theirs is lost.
"""

from __future__ import annotations

import html
import re

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

SAFE_MIME = ("text/plain", "image/png", "image/jpeg")
REMOVED = "[a rich output (HTML, JavaScript, SVG, markdown...) removed by the grader]"
_ACTIVE = re.compile(
    r"<\s*/?\s*(script|iframe|object|embed|style|link|meta|form|svg|math|img|a|input|"
    r"button|base|video|audio|source|details|template)\b|\son\w+\s*=|javascript:|data:text",
    re.I,
)


def safe_output(out) -> None:
    """Keep only the plain-text and raster-image parts of one output (in place)."""
    data = out.get("data")
    if not isinstance(data, dict):
        return
    kept = {k: v for k, v in data.items() if k in SAFE_MIME}
    if len(kept) != len(data):
        kept.setdefault("text/plain", REMOVED)
        out["data"] = nbformat.from_dict(kept)
        meta = out.get("metadata")
        if isinstance(meta, dict):
            out["metadata"] = nbformat.from_dict({k: v for k, v in meta.items() if k in kept})


class SafeOutputs(NbGraderPreprocessor):
    """Drop every output type that a browser would run or render as HTML; see the module."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                safe_output(out)
        elif cell.cell_type == "markdown":
            if _ACTIVE.search(cell.source):
                cell.source = html.escape(cell.source, quote=False)
            cell.pop("attachments", None)
        elif cell.cell_type == "raw":
            meta = cell.get("metadata", {})
            for key in ("format", "raw_mimetype"):
                meta.pop(key, None)
        return cell, resources
