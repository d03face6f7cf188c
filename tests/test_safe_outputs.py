"""What a learner's kernel or markdown can put into the pages staff and learners open.

The payloads are the second red team's (b02: an image's metadata written into an unquoted
``width`` attribute; b03: a ``<body/onload>`` tag and an entity-encoded ``javascript:`` link
in a markdown cell). The oracle is the HTML nbconvert actually writes, read back with the
standard library's HTML parser.
"""

from __future__ import annotations

from html.parser import HTMLParser

import nbformat
import pytest
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from kvstaff.safe_outputs import SafeOutputs, markdown_is_active, url_ok

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
    "AAAABJRU5ErkJggg=="
)


class _Tags(HTMLParser):
    """Every start tag with its attributes, as the browser would parse them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)


def _text(page: str) -> str:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return "".join(parser.text)


def _tags(page: str) -> list[tuple[str, dict]]:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser.tags


def _safe(cell):
    SafeOutputs().preprocess_cell(cell, {}, 0)
    return cell


def test_image_metadata_cannot_add_attributes():
    from nbconvert import HTMLExporter

    cell = nbformat.v4.new_code_cell("display(...)")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={"image/png": PNG},
            metadata={"image/png": {"width": "1 onerror=alert(document.domain)"}},
        ),
        nbformat.v4.new_output(
            "display_data",
            data={"image/png": PNG, "text/plain": "<Figure>"},
            metadata={"image/png": {"width": 120, "height": 80.5, "unconfined": "x onload=y"}},
        ),
    ]
    nb = nbformat.v4.new_notebook(cells=[_safe(cell)])
    assert dict(cell.outputs[0].metadata) == {}
    assert dict(cell.outputs[1].metadata) == {"image/png": {"width": 120, "height": 80.5}}
    page, _ = HTMLExporter().from_notebook_node(nb)
    attrs = [a for tag, a in _tags(page) if tag == "img"]
    assert len(attrs) == 2
    assert not [name for a in attrs for name in a if name.startswith("on")]
    assert attrs[1].get("width") == "120"


@pytest.mark.parametrize(
    "source",
    [
        "My notes <body/onload=alert(document.domain)> and [link](java&#115;cript:alert(1))",
        "[link](java&#115;cript:alert(1))",
        "[link](java&amp;#115;cript:alert(1))",
        "[l](JAVASCRIPT:alert(1))",
        "[a]: java\tscript:x\n\n[b][a]",
        "<javascript:alert(1)>",
        "![i](data:text/html,<script>x()</script>)",
        "<body onload=x()>",
        "a<x/onclick=1>",
        "$\\href{javascript:alert(1)}{click}$",
    ],
)
def test_active_markdown_renders_as_plain_text(source):
    cell = _safe(nbformat.v4.new_markdown_cell(source))
    assert cell.source != source
    page = markdown2html_mistune(cell.source)
    tags = _tags(page)
    assert [t for t, _ in tags] == ["pre"], page  # one block of text, nothing else
    # what the reader sees is what the learner wrote
    assert _text(page).strip("\n") == source
    # applied twice (autograde, then feedback) it stays the same
    again = _safe(nbformat.v4.new_markdown_cell(cell.source))
    assert again.source == cell.source


def test_plain_markdown_is_left_alone():
    source = (
        "# Notes\n\nSee [the paper](https://arxiv.org/abs/1706.03762), [below](#top), "
        "[a file](notes/a.md) and <mailto:me@example.org>. If $a < b$ then **so**."
    )
    cell = _safe(nbformat.v4.new_markdown_cell(source))
    assert cell.source == source
    assert not markdown_is_active(source)


def test_url_schemes():
    for ok in ("https://x.org", "http://x", "mailto:a@b", "#x", "notes/a.md", "a.md#b:c", ""):
        assert url_ok(ok), ok
    for bad in (
        "javascript:x",
        "java&#115;cript:x",
        " JaVa\tScRiPt:x",
        "data:text/html,x",
        "vbscript:x",
    ):
        assert not url_ok(bad), bad
