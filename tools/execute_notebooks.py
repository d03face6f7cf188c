"""Run lessons top to bottom in a fresh kernel and store them with their outputs.

    python tools/execute_notebooks.py notebooks/03_attention.ipynb [more.ipynb ...]
    python tools/execute_notebooks.py            # every lesson in notebooks/

Each notebook runs in its own fresh kernel (the course's ``key-vectors`` kernel), from its
own folder, exactly as strict nbval will rerun it. Volatile metadata (execution
timestamps, widget state) is stripped; outputs and execution counts are kept. A cell that
raises stops the run and the notebook is *not* written, so a broken lesson never lands
with a stored error.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
KERNELSPEC = {"name": "key-vectors", "display_name": "Key Vectors (Python 3)", "language": "python"}


def clean(nb: nbformat.NotebookNode) -> None:
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata.setdefault("language_info", {"name": "python"})
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("ExecuteTime", None)
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                # widget views reference a model id that changes every run
                data = out.get("data", {})
                data.pop("application/vnd.jupyter.widget-view+json", None)


def execute(path: Path, timeout: int = 300) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="key-vectors",
        resources={"metadata": {"path": str(path.parent)}},
    )
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    clean(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    status = 0
    for p in paths:
        try:
            secs = execute(p)
            print(f"ran {p} in {secs:.1f} s")
        except CellExecutionError as err:
            print(f"FAILED {p}: not written\n{err}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
