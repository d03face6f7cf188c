"""Small lesson notebooks in the course's nbgrader markup, for the student and grading tests.

Two fixture lessons use the registered exercises "softmax", "attend", "causal_mask" and
"padding_mask" exactly as CONTRIBUTING.md describes: a solution cell with
``### BEGIN SOLUTION`` / ``### END SOLUTION`` and a locked check cell calling
``checks.check`` and, in a hidden-test region, ``checks.check_hidden``. A third
(``PART_LESSONS``) grades "decode_step" in two parts of one point, one check cell each.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

KERNELSPEC = {"name": "key-vectors", "display_name": "Key Vectors (Python 3)", "language": "python"}

# name -> (signature line, reference body, points, lesson number)
EXERCISES = {
    "softmax": (
        "def softmax(x):",
        "m = x.max(axis=-1, keepdims=True)\n"
        "e = np.exp(x - m)  # stable: every exponent <= 0\n"
        "return e / e.sum(axis=-1, keepdims=True)",
        1,
    ),
    "attend": (
        "def attend(q, k, v, mask=None):",
        "s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., seq_q, seq_k)\n"
        "if mask is not None:\n"
        "    s = np.where(mask, s, -np.inf)\n"
        "m = s.max(axis=-1, keepdims=True)\n"
        "m = np.where(np.isfinite(m), m, 0.0)  # a fully masked row has max -inf\n"
        "e = np.exp(s - m)\n"
        "total = e.sum(axis=-1, keepdims=True)\n"
        "w = e / np.where(total > 0, total, 1.0)\n"
        "return w @ v, w",
        2,
    ),
    "causal_mask": (
        "def causal_mask(seq):",
        "return np.tril(np.ones((seq, seq), dtype=bool))  # query i sees keys 0..i",
        1,
    ),
    "padding_mask": (
        "def padding_mask(lengths, seq_k):",
        "real = np.arange(seq_k)[None, :] < np.asarray(lengths)[:, None]  # (batch, seq_k)\n"
        "return real[:, None, :]  # (batch, 1, seq_k)",
        1,
    ),
}

LESSONS = {
    "01_fixture": ["softmax", "attend"],
    "02_fixture_masks": ["causal_mask", "padding_mask"],
}

# An exercise graded in parts: one solution cell, then one locked 1-point check cell per
# part (attnlib.checks.part), as lessons 05 and 09-12 do.
EXERCISES["decode_step"] = (
    "def decode_step(q_new, k_new, v_new, k_cache, v_cache):",
    "k_all = np.concatenate([k_cache, k_new], axis=-2)  # (..., seq_past + seq_new, d_k)\n"
    "v_all = np.concatenate([v_cache, v_new], axis=-2)\n"
    'mask = attnlib.causal_mask(q_new.shape[-2], k_all.shape[-2], align="bottom_right")\n'
    "out, _ = attnlib.attend(q_new, k_all, v_all, mask)\n"
    "return out, k_all, v_all",
    2,
)
PARTS = {"decode_step": ["decode_step_cache", "decode_step_output"]}
PART_LESSONS = {"03_fixture_parts": ["decode_step"]}


def _indent(code: str, n: int = 4) -> str:
    return "\n".join((" " * n + line) if line else line for line in code.splitlines())


def _meta(slide="-", **nbgrader):
    meta = {"slideshow": {"slide_type": slide}}
    if nbgrader:
        meta["nbgrader"] = {"schema_version": 3, **nbgrader}
    return meta


def lesson(stem: str, names: list[str]) -> nbformat.NotebookNode:
    """A lesson notebook with one exercise (three cells) per name."""
    num = stem[:2]
    cells = [
        nbformat.v4.new_markdown_cell(
            f"# {num} · Fixture lesson\n\nA test fixture.", metadata=_meta("slide")
        ),
        nbformat.v4.new_code_cell(
            "import numpy as np\n\nimport attnlib\n\nattnlib.seed_everything(0)",
            metadata=_meta("skip"),
        ),
    ]
    for i, name in enumerate(names, 1):
        sig, body, points, *_ = EXERCISES[name]
        cells.append(
            nbformat.v4.new_markdown_cell(
                f"### Exercise {int(num)}.{i} — {name}\n\n**Goal**: write `{name}`.\n\n"
                "**Difficulty**: ★\n\n**Time**: ~5 min",
                metadata=_meta(),
            )
        )
        cells.append(
            nbformat.v4.new_code_cell(
                f'{sig}\n    """Fixture exercise."""\n    ### BEGIN SOLUTION\n{_indent(body)}\n'
                "    ### END SOLUTION",
                metadata=_meta(
                    grade=False, solution=True, locked=False, grade_id=f"l{num}-{name}-solution"
                ),
            )
        )
        parts = PARTS.get(name, [name])
        for k, checked in enumerate(parts):
            suffix = "" if k == 0 else "-" + checked.removeprefix(name + "_")
            cells.append(
                nbformat.v4.new_code_cell(
                    f'from attnlib import checks\n\nchecks.check("{checked}", {name})\n'
                    f'### BEGIN HIDDEN TESTS\nchecks.check_hidden("{checked}", {name})\n'
                    "### END HIDDEN TESTS",
                    metadata=_meta(
                        grade=True,
                        solution=False,
                        locked=True,
                        points=points if len(parts) == 1 else 1,
                        grade_id=f"l{num}-{name}{suffix}-check",
                    ),
                )
            )
    cells.append(nbformat.v4.new_markdown_cell("**Summary**: a fixture.", metadata=_meta()))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def write_lessons(folder: Path, lessons: dict[str, list[str]] | None = None) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, names in (lessons or LESSONS).items():
        path = folder / f"{stem}.ipynb"
        nbformat.write(lesson(stem, names), path)
        paths.append(path)
    return paths


def solution_lines(nb: nbformat.NotebookNode) -> list[str]:
    """Non-trivial lines inside BEGIN/END SOLUTION regions of a notebook."""
    lines = []
    for cell in nb.cells:
        for region in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S):
            lines += [ln.strip() for ln in region.splitlines() if len(ln.strip()) >= 12]
    return lines


def hidden_lines(nb: nbformat.NotebookNode) -> list[str]:
    lines = []
    for cell in nb.cells:
        for region in re.findall(
            r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S
        ):
            lines += [ln.strip() for ln in region.splitlines() if ln.strip()]
    return lines


def set_solution(nb: nbformat.NotebookNode, grade_id: str, source: str) -> None:
    """Replace the whole source of the cell with this grade_id (as a learner's edit)."""
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source = source
            return
    raise KeyError(grade_id)


def reference_source(name: str, extra: str = "") -> str:
    sig, body, *_ = EXERCISES[name]
    return f"{sig}\n{_indent(body)}\n{extra}"
