"""Every lesson follows CONTRIBUTING.md ("Lesson files", "Shape of a lesson", "Rules that
make strict nbval pass on any machine", "Exercises (nbgrader form)").

Parametrised over notebooks/NN_*.ipynb: a lesson that does not exist yet is simply not
collected. Each rule is its own test, so a failure names the rule and the cells.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from conftest import NOTEBOOKS

# CONTRIBUTING.md, "Lesson files": the file name of every lesson number.
LESSON_FILES = {
    "00": "00_welcome.ipynb",
    "01": "01_relevance.ipynb",
    "02": "02_projections.ipynb",
    "03": "03_attention.ipynb",
    "04": "04_scaling.ipynb",
    "05": "05_keys_vs_values.ipynb",
    "06": "06_learning_keys.ipynb",
    "07": "07_multi_head.ipynb",
    "08": "08_masks.ipynb",
    "09": "09_syntactic_roles.ipynb",
    "10": "10_kv_cache.ipynb",
    "11": "11_blockwise.ipynb",
    "12": "12_positions.ipynb",
    "13": "13_induction_heads.ipynb",
    "14": "14_fewer_keys.ipynb",
    "15": "15_block.ipynb",
    "16": "16_real_text.ipynb",
    "17": "17_inference.ipynb",
}
# "notes": speaker notes (reveal.js, key S), placed right after the slide they belong to.
SLIDE_TYPES = {"slide", "subslide", "fragment", "-", "skip", "notes"}
KERNEL = "key-vectors"

PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
_cache: dict[Path, nbformat.NotebookNode] = {}


def load(path: Path) -> nbformat.NotebookNode:
    if path not in _cache:
        _cache[path] = nbformat.read(path, as_version=4)
    return _cache[path]


def code_cells(nb):
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def lesson(path: Path) -> str:
    return path.name[:2]


def ignores_output(cell) -> bool:
    # nbval only honours the marker as a whole comment line: "# NBVAL_IGNORE_OUTPUT".
    # Anything after it on the line ("# NBVAL_IGNORE_OUTPUT  (timing)") is silently ignored.
    first = cell.source.lstrip().splitlines()[:1]
    marker = bool(first) and first[0].strip().lstrip("#").strip() == "NBVAL_IGNORE_OUTPUT"
    return marker or "nbval-ignore-output" in cell.get("metadata", {}).get("tags", [])


def output_text(out) -> str:
    if out.output_type == "stream":
        return out.text
    return str(out.get("data", {}).get("text/plain", ""))


pytestmark = pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])


# --- Lesson files ---------------------------------------------------------------------------


def test_file_name_is_the_lesson_name(path):
    assert LESSON_FILES.get(lesson(path)) == path.name, (
        f"{path.name}: lesson {lesson(path)} is named {LESSON_FILES.get(lesson(path))} in "
        "CONTRIBUTING.md"
    )


# --- Shape of a lesson ------------------------------------------------------------------------


def test_title_cell(path):
    first = load(path).cells[0]
    assert first.cell_type == "markdown", "the first cell must be markdown (title cell)"
    src = first.source
    title = src.lstrip().splitlines()[0]
    assert re.fullmatch(rf"# {lesson(path)} · \S.*", title), (
        f"title must be '# NN · Title': {title!r}"
    )
    for part in ("**Learning goals**", "**Prerequisites**", "**Time**"):
        assert part in src, f"title cell lacks {part}"
    goals = src.split("**Learning goals**", 1)[1].split("**Prerequisites**", 1)[0]
    bullets = [ln for ln in goals.splitlines() if re.match(r"\s{0,3}([*-]|\d+\.)\s", ln)]
    assert 3 <= len(bullets) <= 5, f"Learning goals: 3-5 bullets, found {len(bullets)}"
    time = src.split("**Time**", 1)[1][:40]
    assert re.match(r"\W*~\s*\d+(\s*[–-]\s*\d+)?\s*min", time), (
        f"Time must read '~N minutes': {time!r}"
    )


def test_first_code_cell_imports_seeds_and_sets_print_options(path):
    _, cell = code_cells(load(path))[0]
    src = cell.source
    assert re.search(r"^import attnlib\b", src, re.M), "first code cell: `import attnlib`"
    assert re.search(r"\battnlib\.seed_everything\(\s*\d+\s*\)", src), (
        "first code cell must call attnlib.seed_everything(n)"
    )
    if re.search(r"^import numpy as np", src, re.M):
        assert re.search(r"np\.set_printoptions\(precision=4", src), (
            "np.set_printoptions(precision=4, ...)"
        )
    if re.search(r"^import torch\b", src, re.M):
        assert re.search(r"torch\.set_printoptions\(precision=4", src), (
            "torch.set_printoptions(precision=4)"
        )


def test_last_cell_is_the_summary(path):
    # the summary's speaker notes (the deck's summary slide, issue 38) may follow it
    cells = [
        c
        for c in load(path).cells
        if c.get("metadata", {}).get("slideshow", {}).get("slide_type") != "notes"
    ]
    last = cells[-1]
    assert last.cell_type == "markdown", "the last cell must be markdown (Summary)"
    assert "Summary" in last.source, "the last cell must hold the **Summary**"
    assert re.search(r"attnlib names", last.source, re.I), (
        "the last cell must list the **attnlib names from this lesson**"
    )


# --- Executed top to bottom, stored cleanly ----------------------------------------------------


def test_executed_top_to_bottom_in_one_run(path):
    counts = [c.execution_count for _, c in code_cells(load(path))]
    unrun = [i for (i, c) in code_cells(load(path)) if c.execution_count is None]
    assert not unrun, f"code cells never executed: {unrun} (run tools/execute_notebooks.py)"
    assert counts == list(range(1, len(counts) + 1)), f"execution counts {counts} are not 1..n"


def test_no_stored_errors(path):
    errors = [
        (i, o.get("ename"))
        for i, c in code_cells(load(path))
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert not errors, f"cells with stored errors: {errors}"


def test_kernelspec(path):
    assert load(path).metadata.get("kernelspec", {}).get("name") == KERNEL


def test_no_volatile_metadata(path):
    nb = load(path)
    assert "widgets" not in nb.metadata, "widget state stored in notebook metadata"
    bad = [i for i, c in enumerate(nb.cells) if {"execution", "ExecuteTime"} & set(c.metadata)]
    assert not bad, f"cells with execution timestamps in metadata: {bad}"
    views = [
        i
        for i, c in code_cells(nb)
        for o in c.outputs
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert not views, f"widget views (random model ids) stored in outputs: {views}"


# --- Rules that make strict nbval pass on any machine ---------------------------------------


FORBIDDEN = [
    (r"\bsys\.path\b", "sys.path changes"),
    (r"\bos\.chdir\(", "os.chdir"),
    (r"^\s*from\s+\S+\s+import\s+\*", "star imports"),
    (
        r"\burlopen\(|\burlretrieve\(|\brequests\.get\(|torch\.hub\.|load_state_dict_from_url",
        "downloads",
    ),
    (r"^\s*!\s*(wget|curl|pip)\b|^\s*%pip\b", "downloads/installs"),
]


def test_no_sys_path_chdir_star_imports_or_downloads(path):
    found = [
        (i, what)
        for i, c in code_cells(load(path))
        for pattern, what in FORBIDDEN
        if re.search(pattern, c.source, re.M)
    ]
    assert not found, f"forbidden by CONTRIBUTING.md: {found}"


def test_no_trailing_semicolon(path):
    bad = [i for i, c in code_cells(load(path)) if c.source.rstrip().endswith(";")]
    assert not bad, f"code cells ending in ';' (assign to _ or end with plt.show()): {bad}"


def test_ignore_output_marker_is_on_the_first_line(path):
    bad = [
        i
        for i, c in code_cells(load(path))
        if "NBVAL_IGNORE_OUTPUT" in c.source and not ignores_output(c)
    ]
    assert not bad, f"# NBVAL_IGNORE_OUTPUT must start the cell: {bad}"


UNSTABLE = [
    (r"0x[0-9a-fA-F]{6,}", "a memory address"),
    (r"/tmp/", "a temp path"),
    (r"^\[?<matplotlib\.|^Text\(|^<Axes:", "a matplotlib object repr (end with plt.show())"),
]


def test_compared_outputs_are_stable(path):
    found = [
        (i, what)
        for i, c in code_cells(load(path))
        if not ignores_output(c)
        for o in c.outputs
        for pattern, what in UNSTABLE
        if re.search(pattern, output_text(o), re.M)
    ]
    assert not found, f"unstable text in compared outputs: {found}"


def test_every_cell_has_slide_metadata(path):
    bad = [
        (i, c.metadata.get("slideshow"))
        for i, c in enumerate(load(path).cells)
        if c.metadata.get("slideshow", {}).get("slide_type") not in SLIDE_TYPES
    ]
    assert not bad, f"cells without slideshow.slide_type in {sorted(SLIDE_TYPES)}: {bad}"


# --- Exercises (nbgrader form) ----------------------------------------------------------------


def nbgrader_cells(nb):
    return [
        (i, c, c.metadata["nbgrader"]) for i, c in enumerate(nb.cells) if "nbgrader" in c.metadata
    ]


def test_nbgrader_metadata_is_valid(path):
    from nbgrader.nbgraderformat import MetadataValidator

    MetadataValidator().validate_nb(load(path))
    ids = [g.get("grade_id") for _, _, g in nbgrader_cells(load(path))]
    assert len(ids) == len(set(ids)), f"grade_ids repeat: {ids}"


def test_exercises_have_the_three_cell_form(path):
    nb, nn = load(path), lesson(path)
    for i, cell, meta in nbgrader_cells(nb):
        if not meta.get("solution"):
            continue
        where = f"cell {i} ({meta.get('grade_id')})"
        # 2. the solution cell
        assert meta == {
            "grade": False,
            "solution": True,
            "locked": False,
            "grade_id": meta["grade_id"],
            "schema_version": 3,
        }, f"{where}: solution metadata {meta}"
        name = re.fullmatch(rf"l{nn}-([a-z0-9]+(?:-[a-z0-9]+)*)-solution", meta["grade_id"])
        assert name, f"{where}: grade_id must be 'l{nn}-name-solution'"
        assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source, where
        # 1. the exercise's markdown: the run of markdown cells right before the solution
        # starts with the '### Exercise N.k — title' cell
        j = i - 1
        while (
            j > 0
            and nb.cells[j].cell_type == "markdown"
            and not nb.cells[j].source.startswith("### Exercise")
        ):
            j -= 1
        intro = nb.cells[j]
        assert intro.cell_type == "markdown" and re.match(
            rf"### Exercise {int(nn)}\.\d+ — \S", intro.source
        ), f"{where}: must follow a markdown cell starting '### Exercise {int(nn)}.k — title'"
        for part in ("**Goal**", "**Difficulty**", "**Time**"):
            assert part in intro.source, f"{where}: exercise cell lacks {part}"
        assert re.search(r"\*\*Difficulty\*\*\W*★{1,3}(?!★)", intro.source), f"{where}: ★ to ★★★"
        assert re.search(r"\*\*Time\*\*\W*~\s*\d+\s*min", intro.source), f"{where}: Time ~N min"
        # 3. the graded, locked check cell: the next nbgrader cell after the solution (usually
        # the very next cell; a "predict, run, then check" exercise may put prose and code
        # in between, but never another exercise)
        later = [(j, c) for j, c in enumerate(nb.cells) if j > i and "nbgrader" in c.metadata]
        assert later, f"{where}: no graded check cell after the solution"
        j, check = later[0]
        cmeta = check.metadata["nbgrader"]
        assert check.cell_type == "code" and cmeta.get("grade") is True, (
            f"{where}: the next nbgrader cell (cell {j}) must be its graded check cell"
        )
        assert cmeta.get("locked") is True and cmeta.get("solution") is False, (
            f"{where}: check cell must be locked and not a solution: {cmeta}"
        )
        assert cmeta.get("grade_id") == f"l{nn}-{name.group(1)}-check", (
            f"{where}: check grade_id {cmeta.get('grade_id')!r}"
        )
        points = cmeta.get("points")
        assert isinstance(points, int | float) and points > 0, f"{where}: points {points!r}"
        # (a blind exercise — true/false statements, lesson 05 — records the answers with
        # ex_keys_values.recorded instead: its visible check must not judge them)
        assert re.search(r"\bchecks\.check\(|\brecorded\(", check.source), (
            f"{where}: check cell calls checks.check"
        )
        hidden = ("### BEGIN HIDDEN TESTS" in check.source, "### END HIDDEN TESTS" in check.source)
        assert hidden[0] == hidden[1], f"{where}: unbalanced HIDDEN TESTS markers"


def test_every_graded_cell_checks_an_earlier_solution(path):
    nb, nn = load(path), lesson(path)
    seen = set()
    for i, _cell, meta in nbgrader_cells(nb):
        if meta.get("solution"):
            seen.add(meta["grade_id"].removesuffix("-solution"))
        elif meta.get("grade"):
            gid = meta.get("grade_id", "")
            assert re.fullmatch(rf"l{nn}-[a-z0-9-]+-check", gid), f"cell {i}: grade_id {gid!r}"
            base = gid.removesuffix("-check")
            # an exercise in parts grades each part in its own cell: l{nn}-name-part-check
            assert base in seen or any(base.startswith(s + "-") for s in seen), (
                f"graded cell {i} ({gid}) has no solution before it"
            )


# How many graded exercises each lesson must have, from the issues that asked for them
# (the foundation issue: two each in 01-03; lesson 04's: three; 05-09: one per lesson
# each, at least two per lesson here; 10-12: one each).
MIN_GRADED = {
    "01": 2,
    "02": 2,
    "03": 2,
    "04": 3,
    "05": 2,
    "06": 2,
    "07": 2,
    "08": 2,
    "09": 2,
    "14": 2,
    "15": 2,
    "16": 2,
    "17": 3,
}


def test_lessons_from_01_have_their_graded_exercises(path):
    graded = [
        g["grade_id"]
        for _, _, g in nbgrader_cells(load(path))
        if g.get("grade") and g.get("locked")
    ]
    if lesson(path) == "00":  # the welcome lesson's practice check is never graded
        assert graded == [], f"{path.name} is practice only, yet grades {graded}"
        return
    need = MIN_GRADED.get(lesson(path), 1)
    assert len(graded) >= need, f"{path.name}: {len(graded)} graded exercises, need >= {need}"


# --- No assert-only cells (issue 38) -----------------------------------------------------------


def assert_only_cells(nb) -> list[int]:
    """Code cells that are only ``assert`` statements (loops of asserts too), apart from
    nbgrader's graded test cells and cells tagged ``check``: an assert belongs in the cell
    that prints the number it checks (a deck leaves check cells out, and a lead-in before
    one would dangle)."""
    from kvstaff.lecture_deck import CHECK_TAG, is_check_cell

    return [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        and is_check_cell(c)
        and not c.metadata.get("nbgrader", {}).get("grade", False)
        and CHECK_TAG not in c.metadata.get("tags", [])
    ]


def test_no_assert_only_cell(path):
    bad = assert_only_cells(load(path))
    assert not bad, (
        f"{path.name}: cells {bad} hold only asserts: fold each into the cell that prints the "
        "number it checks (or tag it 'check' if it is a check the learner runs)"
    )
