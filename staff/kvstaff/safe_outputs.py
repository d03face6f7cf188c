"""Nothing a learner's kernel produced runs as code in a page staff or learners open.

Every output of a graded notebook comes from the learner's kernel — also those of the
instructor's own cells, since a solution cell can change what later cells display. An
object with ``_repr_html_`` or ``_repr_javascript_`` would put a ``<script>`` into the
feedback HTML (and into the formgrader, where staff review flagged work with their
session). :class:`SafeOutputs` keeps only plain text and raster images (``text/plain``,
``image/png``, ``image/jpeg``) of every output (of their metadata only a numeric image
size: nbconvert writes it into an unquoted attribute), and neutralises raw cells and
markdown cells that carry active HTML, HTML with a ``class`` or ``id`` (styled as the
page's own: a fake score box) or link to a scheme other than http, https or mailto —
judged on the source, on its entity-decoded text and on the HTML nbconvert renders from
it, with patterns linear in the cell's size; such a cell is shown as its escaped text.
It runs in ``make autograde`` (so the autograded notebook staff open is clean) and
again in ``make feedback``. The course's lessons show only text and PNG figures, so
nothing of theirs is lost.
"""

from __future__ import annotations

import html
import math
import re
from html.parser import HTMLParser

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

SAFE_MIME = ("text/plain", "image/png", "image/jpeg")
REMOVED = "[a rich output (HTML, JavaScript, SVG, markdown...) removed by the grader]"
_ACTIVE = re.compile(
    r"<\s*/?\s*(script|iframe|frame|frameset|object|embed|applet|style|link|meta|form|svg|"
    r"math|img|image|a|input|button|textarea|select|base|video|audio|source|track|details|"
    r"template|body|html|head|marquee|noscript|isindex|keygen|portal)\b"
    r"|[\s/\"'`]on\w+\s*=|(java|vb)script\s*:|\\(href|url|class|style|unicode)\b",
    re.I,
)
# a tag of the learner's own HTML with a class or id: the page's styles would dress it as
# the page's own (a fake "alert-success" score box). The renderer's own classes and ids
# (code highlighting, heading anchors) are not in the source. Linear: a match never runs
# past the next "<" or ">".
_STYLED = re.compile(r"<[A-Za-z][^<>]*?[\s/\"'](?:class|id)\s*=", re.I)
# where a markdown link or image can point (after the browser's decoding)
SAFE_SCHEMES = ("http", "https", "mailto")
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*):")
_LINK_TARGETS = re.compile(
    r"\]\(\s*<?([^)\s>]*)"  # [text](url) and ![alt](url)
    r"|^[ \t]{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)"  # [ref]: url (one line)
    r"|<([a-zA-Z][a-zA-Z0-9+.\-]*:[^>\s]*)>",  # <scheme:autolink>
    re.M,
)
# the only tags and attributes the markdown of a learner's cell may render to
_PLAIN_TAGS = frozenset(
    "p a img em strong code pre h1 h2 h3 h4 h5 h6 ul ol li blockquote table thead tbody tr "
    "th td br hr span div del s sup sub dl dt dd kbd".split()
)
_PLAIN_ATTRS = frozenset("href src alt title class id align start".split())
NEUTRAL_OPEN = '<pre class="kv-neutralised">'
_NEUTRALISED = re.compile(r"\A" + re.escape(NEUTRAL_OPEN) + r"[^<]*</pre>\Z")
_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")


def url_ok(url: str) -> bool:
    """True if a link or image URL is relative, an anchor, or uses http, https or mailto."""
    for _ in range(3):  # entities decoded more than once still cannot hide a scheme
        url = html.unescape(url)
    m = _SCHEME.match(_CONTROL.sub("", url))
    return m is None or m.group(1).lower() in SAFE_SCHEMES


class _RenderedCheck(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ok = True

    def handle_starttag(self, tag, attrs):
        if tag not in _PLAIN_TAGS:
            self.ok = False
        for name, value in attrs:
            if name not in _PLAIN_ATTRS or (name in ("href", "src") and not url_ok(value or "")):
                self.ok = False

    handle_startendtag = handle_starttag


def markdown_is_active(source: str) -> bool:
    """True if a markdown cell could run code, or link to code, in a browser (any renderer)."""
    if _NEUTRALISED.match(source):
        return False
    texts = [source]
    for _ in range(2):
        texts.append(html.unescape(texts[-1]))
    for text in texts:
        if _ACTIVE.search(text) or _ACTIVE.search(_CONTROL.sub("", text)):
            return True
        if _STYLED.search(text) or _STYLED.search(_CONTROL.sub("", text)):
            return True
        for m in _LINK_TARGETS.finditer(text):
            if not url_ok(next(g for g in m.groups() if g is not None)):
                return True
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    check = _RenderedCheck()
    check.feed(markdown2html_mistune(source))
    check.close()
    return not check.ok


def neutralise_markdown(source: str) -> str:
    """The cell's text shown verbatim: escaped, in a ``<pre>`` (no markdown, no MathJax)."""
    return NEUTRAL_OPEN + html.escape(source, quote=False) + "</pre>"


def safe_output(out) -> None:
    """Keep only the plain-text and raster-image parts of one output (in place).

    The output's metadata goes too: nbconvert writes an image's ``width``/``height`` into an
    unquoted attribute, so only numbers are kept there.
    """
    data = out.get("data")
    if isinstance(data, dict):
        kept = {k: v for k, v in data.items() if k in SAFE_MIME}
        if len(kept) != len(data):
            kept.setdefault("text/plain", REMOVED)
            out["data"] = nbformat.from_dict(kept)
    if "metadata" in out:
        out["metadata"] = nbformat.from_dict(_safe_metadata(out.get("metadata"), out.get("data")))


def _safe_metadata(meta, data) -> dict:
    if not isinstance(meta, dict) or not isinstance(data, dict):
        return {}
    safe = {}
    for mime in ("image/png", "image/jpeg"):
        sub = meta.get(mime)
        if mime in data and isinstance(sub, dict):
            size = {
                k: v
                for k, v in sub.items()
                if k in ("width", "height")
                and type(v) in (int, float)
                and math.isfinite(v)
                and 0 < v < 100_000
            }
            if size:
                safe[mime] = size
    return safe


class SafeOutputs(NbGraderPreprocessor):
    """Drop every output type that a browser would run or render as HTML; see the module."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                safe_output(out)
        elif cell.cell_type == "markdown":
            if markdown_is_active(cell.source):
                cell.source = neutralise_markdown(cell.source)
            cell.pop("attachments", None)
        elif cell.cell_type == "raw":
            meta = cell.get("metadata", {})
            for key in ("format", "raw_mimetype"):
                meta.pop(key, None)
        return cell, resources
