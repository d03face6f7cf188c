"""A learner alone in JupyterLab: Run All, then save, shows no note for lecturers and no answer.

JupyterLab un-hides a collapsed markdown cell whenever Run All renders it, so a note kept
in a learner's copy would open by surprise; the learner's copies leave the notes out
(kvstaff.student). This runs the real thing in Chromium: `make lab`'s learners' Lab rooted
at a fresh workbook made by kvstaff.student, every lesson opened in turn (among them 05,
whose graded statements the lesson must not settle before the learner does, and 16, whose
exercise used to sit under a note naming its traps), Run All, save; then what the page
shows and what was saved are read. CI's second stage (`make test-course`).
"""

from __future__ import annotations

import re
import time

import nbformat
import pytest
from chromium import Chromium, find_chromium
from conftest import NOTEBOOKS
from labserver import running_lab
from nbfixtures import solution_lines
from pieces import need

from attnlib import checks
from kvstaff import student

pytestmark = [pytest.mark.slow, pytest.mark.second_stage]

LESSONS = tuple(p.stem for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")))
START_TIMEOUT = 120.0
RUN_TIMEOUT = 300.0  # Run All of one lesson in a browser kernel (~30-60 s here)
# a numbered statement printed beside a verdict ("true   3. the separate head ...",
# "statement 3: false"): lesson 05's graded statements settled for the learner
VERDICT = re.compile(
    r"(?im)^(?=[^\n]*\b(true|false)\b)(?=[^\n]*(\b\d\s*[.:)]\s|statement\s*\d))[^\n]*$"
)

STATE_JS = """(() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  const ctx = panel && panel.context;
  return {
    app: !!app,
    path: ctx ? ctx.path : null,
    dirty: ctx ? ctx.model.dirty : null,
    kernel: panel && panel.sessionContext ? panel.sessionContext.kernelDisplayStatus : null,
    text: document.body ? document.body.innerText : "",  // null while a page is loading
  };
})()"""


def _run(page, js: str):
    return page.evaluate(
        "(async () => { await window.jupyterapp.commands.execute(" + js + "); return true; })()",
        timeout=60,
    )


def _start(page, js: str):
    """Start a command without waiting for it: Run All's promise settles only when the last
    cell has run (over 60 s for one lesson on a loaded machine); the loop below polls."""
    return page.evaluate(
        "(() => { window.jupyterapp.commands.execute(" + js + "); return true; })()", timeout=60
    )


def _has_statements(nb) -> bool:
    """Does the lesson grade true/false statements (a blind exercise: its visible check
    judges the format only, so nothing in the lesson may settle them)?"""
    source = "\n".join(c.source for c in nb.cells)
    names = re.findall(r"""checks\.check(?:_hidden)?\(\s*["'](\w+)["']""", source)
    return any(checks.get_exercise(n).blind for n in names if n in checks.exercises())


def _outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            data = out.get("data", {})
            parts += [data.get("text/plain", ""), data.get("text/markdown", "")]
            parts.append("\n".join(out.get("traceback", [])))
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


@pytest.fixture(scope="module")
def workbook(tmp_path_factory):
    wb = tmp_path_factory.mktemp("learner") / "workbook"
    student.generate(NOTEBOOKS, wb)
    return wb


def test_run_all_then_save_shows_no_lecturer_note_and_no_answer(workbook, tmp_path):
    need("chromium")
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    args = ("--LabApp.expose_app_in_browser=True",)
    statements = 0
    with (
        running_lab(runtime, START_TIMEOUT, root=workbook, extra_args=args) as lab,
        Chromium(find_chromium()) as browser,
    ):
        for stem in LESSONS:
            page = browser.new_page(1400, 1000)
            page.goto(f"{lab['base']}/lab/tree/{stem}.ipynb?token={lab['token']}", timeout=120)
            deadline = time.monotonic() + 120
            state = page.evaluate(STATE_JS)
            while time.monotonic() < deadline and not (
                state["app"] and state["path"] == f"{stem}.ipynb" and state["kernel"] == "idle"
            ):
                time.sleep(1.0)
                state = page.evaluate(STATE_JS)
            assert state["path"] == f"{stem}.ipynb", f"{stem} did not open: {state['path']}"
            _start(page, "'notebook:run-all-cells'")
            deadline, saved = time.monotonic() + RUN_TIMEOUT, None
            while time.monotonic() < deadline:
                time.sleep(3.0)
                state = page.evaluate(STATE_JS)
                if state["kernel"] != "idle":
                    continue
                _run(page, "'docmanager:save'")
                saved = nbformat.read(workbook / f"{stem}.ipynb", as_version=4)
                code = [c for c in saved.cells if c.cell_type == "code"]
                if all(c.execution_count is not None for c in code):
                    break
            assert saved is not None, f"{stem}: Run All did not finish in {RUN_TIMEOUT:.0f} s"
            code = [c for c in saved.cells if c.cell_type == "code"]
            assert all(c.execution_count is not None for c in code), f"{stem}: not every cell ran"
            # what the page shows after Run All: no note for lecturers, opened or collapsed
            assert "For lecturers" not in state["text"], stem
            # what was saved: no note, no hidden cell, no solution in any source or output
            assert not [c for c in saved.cells if student.is_lecturer_note(c)], stem
            hidden = [c for c in saved.cells if c.metadata.get("jupyter", {}).get("source_hidden")]
            assert not hidden, f"{stem}: {len(hidden)} collapsed cells in the learner's copy"
            lesson = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
            text = "\n".join(c.source for c in saved.cells) + "\n" + _outputs_text(saved)
            shown = re.sub(  # what the lesson shows anyway (a naive version before the fix)
                r"### BEGIN SOLUTION\n.*?### END SOLUTION",
                "",
                "\n".join(c.source for c in lesson.cells),
                flags=re.S,
            )
            leaked = [ln for ln in solution_lines(lesson) if ln in text and ln not in shown]
            assert not leaked, f"{stem}: solution lines in the learner's copy: {leaked[:3]}"
            if _has_statements(lesson):  # graded true/false statements (lesson 05's)
                verdicts = [m.group(0) for m in VERDICT.finditer(_outputs_text(saved))]
                assert not verdicts, f"{stem}: an output settles a statement: {verdicts[:3]}"
                statements += 1
            errors = [o for c in code for o in c.outputs if o.get("output_type") == "error"]
            assert not errors, f"{stem}: Run All of the untouched copy raised: {errors[0]}"
            print(
                f"\n{stem}: Run All then save in Chromium: {len(code)} code cells ran, "
                f"{len(saved.cells)} cells, no note, no solution"
            )
    assert statements >= 1, "no lesson with graded statements was read"
