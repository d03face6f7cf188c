"""`make slides` / `make html` (attnlib.course.lecture): offline reveal.js decks and handouts.

The builds run on copies of two real lessons in a temporary folder (all lessons take a
minute; `make slides`/`make html` build them all). Built pages are parsed with
html.parser: nothing loaded over http(s), every local script/stylesheet present, figures
embedded as data:image/png, slide structure following the cells' slideshow metadata.
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser

import nbformat
import pytest
from conftest import NOTEBOOKS, ROOT

from attnlib.course.lecture import (
    build_handouts,
    build_slides,
    discover_lessons,
    index_html,
    lesson_info,
    local_resources,
    remote_resources,
    without_solutions,
)

NODE_MODULES = ROOT / "node_modules"
SAMPLE = ("00_welcome.ipynb", "03_attention.ipynb")


class Page(HTMLParser):
    """Title, h1 texts, <img> srcs, index links, and the reveal slide tree of one page."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.title, self.h1, self.imgs, self.links = "", [], [], []
        self.top_sections, self.fragments = 0, 0
        self._stack: list[str] = []
        self._in = None
        self._section_depth = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("title", "h1"):
            self._in, self._buf = tag, ""
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if "fragment" in (a.get("class") or "").split():
            self.fragments += 1
        if tag == "section":
            if self._section_depth == 0:
                self.top_sections += 1
            self._section_depth += 1

    def handle_endtag(self, tag):
        if tag == "section":
            self._section_depth -= 1
        if tag == self._in:
            text = self._buf.strip().rstrip("¶").strip()
            self.title = text if tag == "title" else self.title
            if tag == "h1":
                self.h1.append(text)
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._buf += data


# ------------------------------------------------------------------ no build needed


def test_lessons_are_discovered_in_order_with_titles_and_times():
    lessons = discover_lessons(NOTEBOOKS)
    names = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert [lesson.path.name for lesson in lessons] == names and len(names) >= 2
    assert [lesson.number for lesson in lessons] == [n[:2] for n in names]
    for lesson in lessons:
        nb = nbformat.read(lesson.path, as_version=4)
        first_md = next(c.source for c in nb.cells if c.cell_type == "markdown")
        assert first_md.startswith("# " + lesson.title), lesson.path.name
    # a lesson's own time, not an exercise's
    welcome = lesson_info(NOTEBOOKS / "00_welcome.ipynb")
    assert welcome.title.startswith("00 · ") and re.fullmatch(r"~\d+ minutes", welcome.time)


def test_lesson_info_errors(tmp_path):
    with pytest.raises(ValueError, match="named like a lesson"):
        lesson_info(tmp_path / "notes.ipynb")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("no heading here")])
    nbformat.write(nb, tmp_path / "01_x.ipynb")
    with pytest.raises(ValueError, match="heading"):
        lesson_info(tmp_path / "01_x.ipynb")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        discover_lessons(tmp_path / "missing")


def test_offline_checker_catches_what_the_stock_templates_load():
    from nbconvert import HTMLExporter, SlidesExporter

    nb = nbformat.read(NOTEBOOKS / "00_welcome.ipynb", as_version=4)
    for exporter, expect in [
        (SlidesExporter(), {"unpkg.com/reveal.js", "require.js", "jquery", "mathjax"}),
        (HTMLExporter(), {"require.js", "mathjax", "mermaid"}),
    ]:
        body, _ = exporter.from_notebook_node(nb)
        found = " ".join(u for _, u in remote_resources(body)).lower()
        for what in expect:
            assert what in found, (type(exporter).__name__, what, found)
    page = (
        '<link rel="stylesheet" href="//cdn.x/a.css"><script src="ok.js"></script>'
        '<img src="data:image/png;base64,AAAA"><style>@import url("https://f.x/f.css");</style>'
        '<script>const m = await import("https://m.x/m.mjs");</script>'
    )
    assert remote_resources(page) == [
        ("stylesheet", "//cdn.x/a.css"),
        ("css-import", "https://f.x/f.css"),
        ("module-import", "https://m.x/m.mjs"),
    ]
    assert local_resources(page) == ["ok.js"]


def test_index_lists_lessons_in_order():
    lessons = discover_lessons(NOTEBOOKS)
    page = Page(index_html(lessons, ".html", "handouts"))
    assert page.links == [f"{lesson.stem}.html" for lesson in lessons]
    text = index_html(lessons, ".html", "handouts")
    positions = [text.index(lesson.title) for lesson in lessons]
    assert positions == sorted(positions)
    for lesson in lessons:
        assert lesson.time in text


# ------------------------------------------------------------------ builds


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    if not (NODE_MODULES / "reveal.js" / "dist" / "reveal.js").exists():
        pytest.skip("node_modules/ is missing: run `npm ci` (make slides / make html do)")
    nbdir = tmp_path_factory.mktemp("notebooks")
    for name in SAMPLE:
        shutil.copy(NOTEBOOKS / name, nbdir / name)
    return nbdir


def _assert_offline(path):
    text = path.read_text(encoding="utf-8")
    assert remote_resources(text) == [], path.name
    for url in local_resources(text):
        assert (path.parent / url).is_file(), (path.name, url)
    return text


def test_handouts(sample, tmp_path):
    out = tmp_path / "html"
    written = build_handouts(sample, out, NODE_MODULES)
    assert [p.name for p in written] == [n.replace(".ipynb", ".html") for n in SAMPLE]
    index = Page(_assert_offline(out / "index.html"))
    assert index.links == [p.name for p in written]
    for name, page_path in zip(SAMPLE, written, strict=True):
        nb = nbformat.read(sample / name, as_version=4)
        text = _assert_offline(page_path)
        page = Page(text)
        title = lesson_info(sample / name).title
        assert page.title == title and page.h1[0] == title
        n_png = sum(
            "image/png" in o.get("data", {})
            for c in nb.cells
            if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("solution")
            for o in c.outputs
        )
        # every stored figure is in the page, embedded; nothing was re-executed
        assert n_png > 0 and sum(s.startswith("data:image/png;base64,") for s in page.imgs) == n_png
        assert all(s.startswith("data:") for s in page.imgs)
        assert 'src="vendor/mathjax/MathJax.js' in text


def test_slides(sample, tmp_path):
    out = tmp_path / "slides"
    written = build_slides(sample, out, NODE_MODULES)
    assert (out / "reveal.js" / "dist" / "reveal.js").is_file()
    assert (out / "reveal.js" / "plugin" / "notes" / "notes.js").is_file()
    for name, deck in zip(SAMPLE, written, strict=True):
        text = _assert_offline(deck)
        assert '"reveal.js/dist/reveal.js"' in text and "Reveal.initialize" in text
        nb = nbformat.read(sample / name, as_version=4)
        kinds = [c.metadata["slideshow"]["slide_type"] for c in nb.cells]
        page = Page(text)
        # one top-level <section> per "slide" cell (the first cell opens one too)
        assert kinds[0] == "slide" and page.top_sections == kinds.count("slide")
        assert page.fragments >= kinds.count("fragment")
        # skipped cells (set-up code, checks) are not on any slide
        for cell, kind in zip(nb.cells, kinds, strict=True):
            line = next((ln for ln in cell.source.splitlines() if len(ln) > 25), None)
            if kind == "skip" and cell.cell_type == "markdown" and line:
                assert line not in text
        assert page.title == f"{lesson_info(sample / name).title} slides"


def _solution_lines(nb):
    """Lines inside BEGIN/END SOLUTION regions that appear nowhere else in the notebook."""
    lines, elsewhere = [], []
    for c in nb.cells:
        if not c.metadata.get("nbgrader", {}).get("solution"):
            elsewhere.append(c.source)
            for o in c.get("outputs", []):
                elsewhere.append(
                    str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                )
        inside = False
        for ln in c.source.splitlines():
            if "### END SOLUTION" in ln:
                inside = False
            elif inside and len(ln.strip()) > 12:
                lines.append(ln.strip())
            elif "### BEGIN SOLUTION" in ln:
                inside = True
            else:
                elsewhere.append(ln)  # the stub around the region stays in the student copy
    other = "\n".join(elsewhere).replace("`", "")  # markdown `code` renders without them
    return [ln for ln in lines if ln not in other]


def test_without_solutions_hides_answers_and_keeps_other_outputs():
    nb = nbformat.read(NOTEBOOKS / "03_attention.ipynb", as_version=4)
    answers = _solution_lines(nb)
    assert answers, "03_attention has exercises with solutions"
    hidden = without_solutions(nb)
    text = "\n".join(c.source for c in hidden.cells)
    assert not [a for a in answers if a in text]
    assert "raise NotImplementedError()" in text
    for orig, cell in zip(nb.cells, hidden.cells, strict=True):
        if orig.cell_type != "code":
            continue
        if orig.metadata.get("nbgrader", {}).get("solution"):
            assert cell.outputs == []
        else:
            assert cell.outputs == orig.outputs
    assert _solution_lines(nb) == answers  # the input notebook is not changed


def test_handouts_hide_solutions_unless_asked(sample, tmp_path):
    name = "03_attention.ipynb"
    answers = _solution_lines(nbformat.read(sample / name, as_version=4))
    assert answers
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    shutil.copy(sample / name, nbdir / name)
    import html as _html

    student = build_handouts(nbdir, tmp_path / "s", NODE_MODULES)[0].read_text()
    teacher = build_handouts(nbdir, tmp_path / "t", NODE_MODULES, solutions=True)[0].read_text()

    # nbconvert highlights code into spans: compare on the page's text
    def page_text(t):
        return _html.unescape(re.sub(r"<[^>]+>", "", t))

    student, teacher = page_text(student), page_text(teacher)
    assert all(a in teacher for a in answers)
    assert not [a for a in answers if a in student]
