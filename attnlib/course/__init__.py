"""Course staff tooling: lesson discovery, student versions, nbgrader grading, the class
misconception report (``report``), lecture builds (slides and handouts) and the benchmark
table.

The only part of attnlib that imports nbgrader, nbconvert, nbformat or nbclient (the
``course`` extra of the package). Run its modules as commands (``python -m
attnlib.course.gradebook ...``); the Makefile targets do it for you. Nothing in the
library, the tasks, the figures, the explorers or the checks imports from here.
"""
