"""kvstaff — the course staff's side of Key Vectors: lesson discovery, student versions,
nbgrader grading and its answer keys (``grader``), the class misconception report
(``report``), lecture builds (slides and handouts), the benchmark table and the class hub.

A distribution of its own (``staff/pyproject.toml``), never part of a learner's install:
``pip install .`` at the root gives attnlib alone. The only package of the course that
imports nbgrader, nbconvert, nbformat or nbclient. It may import anything of attnlib;
nothing of attnlib imports from here (tests/test_layout.py). Run its modules as commands
(``python -m kvstaff.gradebook ...``); the Makefile targets do it for you.
"""
