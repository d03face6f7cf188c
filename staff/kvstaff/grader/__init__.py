"""The grader wing: nbgrader driven through a sandbox, verdicts made outside the kernel.

One concern per module; the arrows are the only imports between them::

    cli ──> autograde ──> execution ──> judging ──> sandbox
     │         │    │                    └────> answer_keys
     │         │    └───> audit ──> audit_rules
     │         ├────────> shards ──> export
     │         └────────> export ──> course
     ├──> shards
     └──> canvas ──> export
    (execution, judging and audit also read attnlib.checks.protocol: the contract with
    the kernel side, attnlib.checks.grading; the kernel side never imports this package)

* :mod:`~kvstaff.grader.sandbox` — bubblewrap around every kernel: read-only
  system, venv and attnlib; writable only ``work/``, ``run/`` and ``exchange/out/``, each
  a mount point the kernel cannot rename; no network; its own uid as root; limits.
  Deep trees are removed iteratively without following links (:func:`remove_tree`).
* :mod:`~kvstaff.grader.execution` — nbgrader's preprocessors: ``ResilientExecute``
  (kernels in sandboxes, hidden regions run silently and judged by the grader with the
  kernel stopped, restarts after timeouts and crashes, output caps in bytes and counts),
  ``StderrIsNotFailure``, ``ShortenHiddenTracebacks``, ``results_are_not_scores``.
* :mod:`~kvstaff.grader.judging` — the grader's side of the exchange: inputs out,
  outputs read back as plain data (never through a link) and compared with the reference.
* :mod:`~kvstaff.grader.answer_keys` — the keys of exercises whose answer is a
  choice (lesson 05's true/false statements): held only here, installed into the
  grader's process; the sandbox hides this package from every kernel.
* :mod:`~kvstaff.grader.audit` (with :mod:`~kvstaff.grader.audit_rules`) —
  the source audit of every learner cell, linear in the notebook's size.
* :mod:`~kvstaff.grader.autograde` — the class run: workers, the gradebook lock,
  wall clocks, the audit in the worker, each submission's :class:`Outcome`.
* :mod:`~kvstaff.grader.export` — the report, the CSV (``NOT GRADED`` and
  ``FLAGGED`` never carry a number), text made safe for consoles and spreadsheets, the
  feedback pages (each under a wall clock).
* :mod:`~kvstaff.grader.canvas` — grades.csv in Canvas's gradebook-import layout
  (``FLAGGED`` and ``NOT GRADED`` cells blank, listed in ``canvas_review.csv``).
* :mod:`~kvstaff.grader.shards` — grading a lesson in N shards (a learner's shard is a
  hash of their id alone; each shard writes only its own gradebook copy, report and CSV)
  and ``merge-shards``, which refuses a missing or doubled learner before it merges.
* :mod:`~kvstaff.grader.course` — the course folder and nbgrader's applications.
* :mod:`~kvstaff.grader.cli` — ``python -m kvstaff.gradebook ...``.

The trust boundary: everything here runs as the staff user (or root) outside the
sandbox and reads what the kernel wrote as untrusted data; the kernel side
(:mod:`attnlib.checks.grading`, :mod:`attnlib.checks.trust`) only records and can only take
credit away. Each point has a test in ``tests/test_grading.py``, ``tests/test_sandbox.py``,
``tests/test_grader_attacks.py`` or ``tests/test_grading_units.py``.
"""
