#!/usr/bin/env bash
# Create .venv and install the course into it, once per version of requirements.txt.
# Called by `make lab`, `make test` and friends; a second run with unchanged requirements
# returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY_BIN="${PYTHON:-}"
if [ -z "$PY_BIN" ]; then
  for cand in python3.11 python3 python; do
    if command -v "$cand" >/dev/null 2>&1; then PY_BIN="$cand"; break; fi
  done
fi
if [ -z "$PY_BIN" ]; then
  echo "setup: no python3 found; install Python 3.11 and try again" >&2; exit 1
fi

KEY=$(cat requirements.txt pyproject.toml staff/pyproject.toml | "$PY_BIN" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])')
STAMP="$VENV/.installed-$KEY"
if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ]; then
  # the course's Jupyter settings (jupyter/) may have changed: re-copying them is instant
  "$VENV/bin/python" tools/lab_settings.py
  exit 0
fi

"$PY_BIN" - <<'PYCHECK'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"setup: Python >= 3.11 is needed, found {sys.version.split()[0]}")
PYCHECK

echo "setup: creating $VENV and installing requirements.txt (first run takes a few minutes)"
[ -x "$VENV/bin/python" ] || "$PY_BIN" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -r requirements.txt
# attnlib (the learners' package) and kvstaff (the staff side, staff/: grader, answer keys,
# student versions, hub), both editable; a learner's own install is `pip install .` alone.
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e . -e staff
"$VENV/bin/python" -m pip check
# The course kernel lives inside the venv, so JupyterLab, nbval and nbgrader from the venv
# all find it, and nothing outside the project is touched.
"$VENV/bin/python" -m ipykernel install --sys-prefix --name key-vectors \
  --display-name "Key Vectors (Python 3)" >/dev/null
# The learners' JupyterLab, set inside the venv (never ~/.jupyter): nbgrader's extensions
# off (staff: make lab-staff), no news prompt. See tools/lab_settings.py and jupyter/.
"$VENV/bin/python" tools/lab_settings.py
rm -f "$VENV"/.installed-*
touch "$STAMP"
echo "setup: done"
