"""`make slides` / `make html` (kvstaff.lecture): offline reveal.js decks and handouts.

The builds run on copies of two real lessons in a temporary folder (all lessons take a
minute; `make slides`/`make html` build them all), and on a small made-up lesson that uses
every lecture convention: a lecture deck chosen by ``metadata["lecture"]`` (the default
deck, with its printable outline; the whole notebook as slides is the second build),
speaker notes (``slideshow.slide_type == "notes"``, an aside in handouts), alt text
(``metadata["alt_text"]``, str or list), check cells (graded, tagged ``check``, asserts
only), a stub and its check, harness markers, a progress line, an explorer still. Built
pages are parsed with html.parser: nothing loaded over http(s), every local
script/stylesheet present, figures embedded as data:image/png with their alt text, slide
structure following the cells' slideshow metadata. tests/test_browser.py measures every
slide of every lesson in Chromium.
"""

from __future__ import annotations

import re
import shutil
from html import escape as html_escape
from html.parser import HTMLParser

import nbformat
import pytest
from conftest import NOTEBOOKS, ROOT
from pieces import need

from kvstaff.lecture import (
    LECTURER_MARK,
    SLIDE_SIZE,
    alt_text_problems,
    alt_texts,
    build_handouts,
    build_slides,
    discover_lessons,
    index_html,
    inline_markdown,
    is_check_cell,
    lecture_notebook,
    lecture_slides,
    lesson_info,
    lesson_time,
    local_resources,
    remote_resources,
    without_solutions,
)

NODE_MODULES = ROOT / "node_modules"
SAMPLE = ("00_welcome.ipynb", "03_attention.ipynb")


class Page(HTMLParser):
    """Title, h1 texts, <img> srcs and alts, index links, notes, and the reveal slide tree."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.title, self.h1, self.imgs, self.links = "", [], [], []
        self.alts: list[str | None] = []
        self.top_sections, self.fragments, self.notes = 0, 0, 0
        self.section_cells: list[str | None] = []
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
            self.alts.append(a.get("alt"))
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if "fragment" in (a.get("class") or "").split():
            self.fragments += 1
        if tag == "aside" and "notes" in (a.get("class") or "").split():
            self.notes += 1
        if tag == "section":
            if self._section_depth == 0:
                self.top_sections += 1
            self.section_cells.append(a.get("data-cell"))
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
    assert welcome.title.startswith("00 · ") and re.match(r"~\d+ minutes\b", welcome.time)


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
        short, full = lesson_time(lesson.path)
        assert f'title="{html_escape(full)}">— {html_escape(short)}</span>' in text
        assert full.startswith(lesson.time)  # the whole paragraph, not its first line


def test_lesson_time_reads_the_whole_paragraph(tmp_path):
    cells = [
        "# 05 · A lesson",
        "### Exercise 5.1\n\n**Difficulty**: ★ · **Time**: ~5 min",
        "**Time**: ~40 minutes, and ~15 for the optional part (the core: about 24 of\n"
        "reading and running, 18 for the two exercises).\n**Prerequisites**: lesson 04.",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(c) for c in cells])
    nbformat.write(nb, tmp_path / "05_x.ipynb")
    assert lesson_time(tmp_path / "05_x.ipynb") == (
        "~40 min + ~15 min optional",
        "~40 minutes, and ~15 for the optional part (the core: about 24 of reading and "
        "running, 18 for the two exercises)",
    )
    # lesson_info keeps the first line only: cut mid-sentence
    assert lesson_info(tmp_path / "05_x.ipynb").time.endswith("about 24 of")
    nb.cells[2].source = "**Time**: about three quarters of an hour"
    nbformat.write(nb, tmp_path / "05_x.ipynb")
    assert lesson_time(tmp_path / "05_x.ipynb") == ("about three quarters of an hour",) * 2


# ------------------------------------------------------------------ builds


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    need("npm assets")
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
    assert [p.name for p in written] == [n.replace(".ipynb", ".slides.html") for n in SAMPLE]
    index = Page(_assert_offline(out / "index.html"))
    for name, deck in zip(SAMPLE, written, strict=True):
        nb = nbformat.read(sample / name, as_version=4)
        stem = name.replace(".ipynb", "")
        # the default deck is the lecture: one top-level <section> per lecture slide, each
        # with its notes, no cell the lesson did not choose
        lecture = Page(_assert_offline(deck))
        slides = lecture_slides(nb)
        assert lecture.top_sections == len(slides) and lecture.notes == len(slides)
        chosen = {str(i) for s in slides for i in s.cells}
        assert set(lecture.section_cells) <= chosen
        # its outline: every slide title, the notes, the minutes; linked from the index
        outline = _assert_offline(out / f"{stem}.outline.html")
        for s in slides:
            assert inline_markdown(s.title or s.label) in outline
        assert "**" not in _text(outline)  # markdown in titles and notes is rendered
        assert f"{sum(s.minutes for s in slides):g} minutes" in outline
        assert f"{stem}.outline.html" in index.links and f"{stem}.full.slides.html" in index.links
        # the whole notebook as slides, the second build
        full = out / f"{stem}.full.slides.html"
        text = _assert_offline(full)
        assert '"reveal.js/dist/reveal.js"' in text and "Reveal.initialize" in text
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
        grading = orig.metadata.get("nbgrader", {})
        if grading.get("solution") or grading.get("grade"):
            # no answer, and no "✔ correct" printed under a stub that raises
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


# ------------------------------------------------------------------ the lecture conventions

PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0g"
    "AAAABJRU5ErkJggg=="
)
NOTES = "Say this aloud: the query asks, every key answers with a score."
LAST_NOTES = "Close the lesson. **Ask the room**: what is a key? **Expected answer**: a label."
DEFAULT_ALT = "No description has been provided for this image"


def _md(text, kind="-", **meta):
    return nbformat.v4.new_markdown_cell(text, metadata={"slideshow": {"slide_type": kind}, **meta})


def _code(src, outputs=(), kind="-", n=None, **meta):
    cell = nbformat.v4.new_code_cell(src, metadata={"slideshow": {"slide_type": kind}, **meta})
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    cell.execution_count = n
    return cell


def _image(text="<Figure size 1200x450 with 1 Axes>"):
    return {
        "output_type": "display_data",
        "data": {"image/png": PNG_1PX, "text/plain": text},
        "metadata": {},
    }


def _stream(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def demo_lesson():
    """A made-up lesson that uses every convention the lecture build knows."""
    grade = {
        "grade": True,
        "solution": False,
        "locked": True,
        "points": 1,
        "grade_id": "l00-demo-check",
        "schema_version": 3,
    }
    solution = {
        "grade": False,
        "solution": True,
        "locked": False,
        "grade_id": "l00-demo-solution",
        "schema_version": 3,
    }
    cells = [
        _md("# 00 · Demo lesson\n\n**Time**: ~10 minutes", "slide", lecture={"slide": "slide"}),
        _md(f"{LECTURER_MARK} · ~1 min\n\n{NOTES}", "notes", lecture={"slide": "notes"}),
        _code("x = 1\nprint(x)", [_stream("1\n")], n=1),
        _md("## 1 · Keys And Values, As Written", "slide"),
        _code(
            "plot.bars(w)\nassert w.sum() == 1",
            [_image()],
            n=2,
            alt_text="A bar chart of six weights.",
            lecture={"show": "output"},
        ),
        _code("two()", [_image(), _image()], n=3, alt_text=["First panel.", "Second panel."]),
        _code("no_alt()", [_image()], n=4),
        _code("assert x == 1\nfor i in range(2):\n    assert i < 2", n=5),
        _code("print('only a check')", [_stream("only a check\n")], n=6, tags=["check"]),
        _md("### Exercise 0.1 — demo\n\n**Goal** g. **Difficulty**: ★ · **Time**: ~1 min"),
        _code(
            "def demo(x):\n    ### BEGIN SOLUTION\n    return x + 41\n    ### END SOLUTION",
            n=7,
            nbgrader=solution,
        ),
        _code(
            "from attnlib import checks\n\nchecks.check('demo', demo)",
            [_stream("✔ demo: correct on all 3 cases\n")],
            n=8,
            nbgrader=grade,
        ),
        _code(
            "# NBVAL_IGNORE_OUTPUT\nt = timed()  # noqa: E731\ny = [1,\n     2]  # fmt: skip",
            [_stream("t\n")],
            n=9,
        ),
        _code(
            "h = train(model, steps=5, desc='demo')",
            [
                {
                    "output_type": "display_data",
                    "data": {"text/plain": "demo: 5 steps"},
                    "metadata": {"attnlib": "progress"},
                }
            ],
            n=10,
        ),
        _md("## Summary\n\n- done", "slide", lecture={"slide": "slide"}),
        _md(f"{LECTURER_MARK} · ~2 min\n\n{LAST_NOTES}", "notes", lecture={"slide": "notes"}),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "key-vectors", "display_name": "K", "language": "python"}
    return nb


def test_check_cells_and_alt_texts_are_recognised():
    nb = demo_lesson()
    checks = [i for i, c in enumerate(nb.cells) if is_check_cell(c)]
    assert checks == [7, 8, 11]  # asserts only (a loop of asserts too), tag "check", graded
    assert not is_check_cell(_code("x = 1\nassert x == 1"))  # computes: stays
    assert not is_check_cell(_code("this is not python ("))
    assert alt_texts(nb.cells[4]) == ["A bar chart of six weights."]
    assert alt_texts(nb.cells[5]) == ["First panel.", "Second panel."]
    assert alt_text_problems(nb) == ["cell 6: 1 image(s) without metadata['alt_text']"]
    bad = _code("f()", [_image(), _image()], alt_text=["only one"])
    nb2 = nbformat.v4.new_notebook(cells=[bad, _code("g()", [_image()], alt_text=3)])
    assert alt_text_problems(nb2) == [
        "cell 0: 1 alt texts for 2 images",
        "cell 1: metadata['alt_text'] must be a str or a list of str, got 3",
    ]


def test_lecture_notebook_shapes_decks_and_handouts():
    nb = demo_lesson()
    deck = lecture_notebook(nb, slides=True)
    kinds = [c.metadata["slideshow"]["slide_type"] for c in deck.cells]
    assert [i for i, k in enumerate(kinds) if k == "skip"] == [7, 8, 11]
    assert [c.metadata["slideshow"]["data"]["cell"] for c in deck.cells] == [
        str(i) for i in range(len(nb.cells))
    ]
    assert deck.cells[12].source == "t = timed()\ny = [1,\n     2]"  # harness lines gone
    assert deck.cells[13].outputs == []  # the progress line is not put on a slide
    assert deck.cells[4].outputs[0].metadata["alt_text"] == "A bar chart of six weights."
    assert [o.metadata["alt_text"] for o in deck.cells[5].outputs] == [
        "First panel.",
        "Second panel.",
    ]
    assert "raise NotImplementedError()" in deck.cells[10].source
    handout = lecture_notebook(nb, slides=False)
    assert handout.cells[11].outputs == []  # no ✔ under the stub
    assert handout.cells[13].outputs[0].data["text/plain"] == "demo: 5 steps"
    assert "slide_type" not in str(handout.cells[7].metadata.get("slideshow", {}).get("data", ""))
    teacher = lecture_notebook(nb, slides=False, solutions=True)
    assert teacher.cells[11].outputs[0].text.startswith("✔ demo")
    assert "return x + 41" in teacher.cells[10].source
    assert nb.cells[12].source.startswith("# NBVAL_IGNORE_OUTPUT")  # the input is unchanged
    # a progress line stored without its metadata (before it existed) is recognised too
    legacy = {"output_type": "display_data", "data": {"text/plain": "run: 7 steps"}, "metadata": {}}
    figure = _image()
    old = nbformat.v4.new_notebook(cells=[_code("train()", [legacy, figure], alt_text="A figure.")])
    (cell,) = lecture_notebook(old, slides=True).cells
    assert [o.output_type for o in cell.outputs] == ["display_data"]
    assert "image/png" in cell.outputs[0].data


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    need("npm assets")
    nbdir = tmp_path_factory.mktemp("demo")
    nbformat.write(demo_lesson(), nbdir / "00_demo.ipynb")
    return nbdir


def _text(page: str) -> str:
    import html as _html

    return _html.unescape(re.sub(r"<[^>]+>", "", page))


def test_demo_lecture_deck_shows_only_what_the_lesson_chose(demo_dir, tmp_path, capsys):
    (deck_path,) = build_slides(demo_dir, tmp_path / "slides", NODE_MODULES)
    err = capsys.readouterr().err
    assert "lecture deck: 00_demo 2 lecture slides (want 12-18)" in err  # the rules, reported
    deck = deck_path.read_text(encoding="utf-8")
    page = Page(deck)
    assert page.top_sections == 2 and page.notes == 2
    assert page.section_cells == ["0", "0", "14", "14"]  # slide, subslide
    assert page.alts == ["A bar chart of six weights."]  # the figure, without its code
    text = _text(deck)
    for gone in ("plot.bars", "assert w.sum()", "x = 1", "raise NotImplementedError", "checks"):
        assert gone not in text, gone
    notes = re.findall(r'<aside class="notes">(.*?)</aside>', deck, re.S)
    assert NOTES in _text(notes[0]) and "For lecturers" in _text(notes[0])
    outline = (tmp_path / "slides" / "00_demo.outline.html").read_text(encoding="utf-8")
    assert "Demo lesson" in outline and "Summary" in outline and NOTES in _text(outline)
    assert "2 slides · 3 minutes" in outline


def test_demo_deck_follows_the_conventions(demo_dir, tmp_path, capsys):
    build_slides(demo_dir, tmp_path / "slides", NODE_MODULES)
    assert "00_demo cell 6: 1 image(s) without metadata['alt_text']" in capsys.readouterr().err
    deck = (tmp_path / "slides" / "00_demo.full.slides.html").read_text(encoding="utf-8")
    page = Page(deck)
    # speaker notes: the notes cell is an <aside class="notes">, not slide text
    assert page.notes == 2
    notes = re.search(r'<aside class="notes">(.*?)</aside>', deck, re.S).group(1)
    assert NOTES in _text(notes)
    # every image has its cell's alt text; the one without says nbconvert's default
    assert page.alts == [
        "A bar chart of six weights.",
        "First panel.",
        "Second panel.",
        DEFAULT_ALT,
    ]
    text = _text(deck)
    # checks, their ✔, harness markers and the progress line are not on any slide
    for gone in (
        "assert x == 1",
        "only a check",
        "checks.check",
        "✔ demo",
        "NBVAL_IGNORE_OUTPUT",
        "noqa",
        "fmt: skip",
        "demo: 5 steps",
    ):
        assert gone not in text, gone
    assert "raise NotImplementedError()" in text  # the stub is the exercise
    # headings as written, 1280 x 720, code that wraps, data-cell on each slide
    assert "Keys And Values, As Written" in text
    assert "--r-heading-text-transform: none" in deck and "text-transform: none" in deck
    assert f"var WIDTH = {SLIDE_SIZE[0]}, HEIGHT = {SLIDE_SIZE[1]};" in deck
    assert "white-space: pre-wrap" in deck and "window.kvSlideFit" in deck
    assert page.section_cells == ["0", "0", "3", "3", "14", "14"]  # slide, subslide
    # the scroll fallback runs after MathJax has typeset the deck, never before
    assert deck.index('StartupHook("End"') < deck.index("Reveal.initialize(")


def test_demo_handouts_with_and_without_solutions(demo_dir, tmp_path):
    (student,) = build_handouts(demo_dir, tmp_path / "s", NODE_MODULES)
    (teacher,) = build_handouts(demo_dir, tmp_path / "t", NODE_MODULES, solutions=True)
    s_page, s_text = Page(student.read_text()), _text(student.read_text())
    assert s_page.alts == [
        "A bar chart of six weights.",
        "First panel.",
        "Second panel.",
        DEFAULT_ALT,
    ]
    # a handout sets the notes apart: a closed "For lecturers" aside, the marker its summary
    student_page = student.read_text()
    asides = re.findall(r'<aside [^>]*class="kv-notes"[^>]*>(.*?)</aside>', student_page, re.S)
    assert len(asides) == 2 and all("<details>" in a for a in asides)
    assert "<summary>For lecturers · ~1 min</summary>" in asides[0]
    assert NOTES in _text(asides[0]) and LECTURER_MARK not in asides[0].split("</summary>")[1]
    assert "checks.check" in s_text and "✔ demo" not in s_text  # no ✔ under the stub
    assert "demo: 5 steps" in s_text and "NBVAL_IGNORE_OUTPUT" not in s_text
    t_text = _text(teacher.read_text())
    assert "✔ demo: correct on all 3 cases" in t_text and "return x + 41" in t_text


def _code_and_outputs(page: str) -> tuple[list[str], list[str]]:
    """The text of every code block and of every text output of a built page."""
    code = re.findall(r'<div class="highlight[^"]*">\s*<pre>(.*?)</pre>', page, re.S)
    outs = re.findall(r'class="jp-RenderedText[^"]*"[^>]*>\s*<pre>(.*?)</pre>', page, re.S)
    return [_text(c) for c in code], [_text(o) for o in outs]


def test_real_decks_leave_checks_and_stub_check_pairs_out(sample, tmp_path):
    for deck in build_slides(sample, tmp_path / "slides", NODE_MODULES):
        nb = nbformat.read(sample / deck.name.replace(".slides.html", ".ipynb"), as_version=4)
        code, _ = _code_and_outputs(deck.read_text(encoding="utf-8"))
        shown = "\n".join(code)
        checks = [c for c in nb.cells if is_check_cell(c)]
        assert checks or deck.name.startswith("00_"), f"{deck.name}: no check cells?"
        for cell in checks:
            line = max(cell.source.splitlines(), key=len).strip()
            assert line not in shown, f"{deck.name}: check cell on a slide: {line!r}"
        # no visible code cell right after a stub prints a ✔
        visible = [
            c
            for c in lecture_notebook(nb, slides=True).cells
            if c.cell_type == "code" and c.metadata["slideshow"]["slide_type"] != "skip"
        ]
        for before, after in zip(visible, visible[1:], strict=False):
            if "raise NotImplementedError()" in before.source:
                printed = "".join(o.get("text", "") for o in after.outputs)
                assert not printed.lstrip().startswith("✔"), f"{deck.name}: stub → ✔"


def test_deck_titles_summary_last_notes_markers_maths_and_print(tmp_path):
    """A lecture spec's "title" is the slide's heading (before a slide's code too); the
    summary slide comes last; both notes markers (plain, and the bold one of the lessons
    before issue 38) are read; → steps through sub-slides; MathJax reads \\text{a\\_b} as
    JupyterLab does; printed handouts wrap code; the outline renders markdown in titles."""
    need("npm assets")

    def notes(first):
        return _md(f"{first} · ~1 min\n\n{NOTES}", "notes", lecture={"slide": "notes"})

    cells = [
        _md("# 00 · Demo\n\nThe lesson.", "slide", lecture={"slide": "slide"}),
        notes(LECTURER_MARK),
        _md("## Summary\n\n- done", "slide", lecture={"slide": "slide", "summary": True}),
        notes("**For lecturers**"),
        _code(
            "plot()",
            [_image()],
            kind="slide",
            n=1,
            alt_text="A figure.",
            lecture={"slide": "slide", "title": "A **figure** slide", "show": "output"},
        ),
        notes(LECTURER_MARK),
        _md(
            "**The fix.** Shift by the row's max: $\\text{seq\\_q}$ rows.",
            "subslide",
            lecture={"slide": "subslide", "title": "The fix"},
        ),
        notes(LECTURER_MARK),
    ]
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=cells), nbdir / "00_demo.ipynb")
    (deck_path,) = build_slides(nbdir, tmp_path / "slides", NODE_MODULES, full=False)
    deck = deck_path.read_text(encoding="utf-8")
    page = Page(deck)
    assert page.top_sections == 3 and page.notes == 4
    # the summary (cell 2) last; the titled figure slide (cell 4) with its sub-slide (6)
    assert [c for c in page.section_cells if c] == ["0", "0", "4", "4", "6", "2", "2"]
    assert re.search(r"<h3[^>]*>A <strong>figure</strong> slide", deck)
    shown = _text(re.sub(r"<(script|style)\b.*?</\1>", "", deck, flags=re.S))
    assert re.search(r"<h3[^>]*>The fix", deck) and "**" not in shown
    assert deck.index("A <strong>figure") < deck.index('<h2 id="Summary')
    assert 'navigationMode: "linear"' in deck and "kvTextMacros" in deck
    assert "notesAsMathML" in deck  # the speaker view: each formula in the notes once
    outline = (tmp_path / "slides" / "00_demo.outline.html").read_text(encoding="utf-8")
    rows = re.findall(r'<td class="t">(.*?)</td>', outline)
    assert rows == ["00 · Demo", "A <strong>figure</strong> slide", "The fix", "Summary"]
    assert "4 slides · 4 minutes" in outline and "kvTextMacros" in outline
    (handout,) = build_handouts(nbdir, tmp_path / "html", NODE_MODULES)
    text = handout.read_text(encoding="utf-8")
    summaries = re.findall(r"<summary>(.*?)</summary>", text)
    assert summaries == ["For lecturers · ~1 min"] * 4  # both markers, shown the same
    assert "**For lecturers**" not in text and "kvTextMacros" in text
    assert "@media print" in text and "white-space: pre-wrap !important" in text
