"""The staff's command line: ``python -m kvstaff.gradebook <command>``.

    python -m kvstaff.gradebook release      # build/source from notebooks/, then release/
    python -m kvstaff.gradebook autograde    # grade submitted/<student>/<lesson>/, export
    python -m kvstaff.gradebook autograde LESSON --shard K/N   # only shard K (0..N-1)
    python -m kvstaff.gradebook merge-shards LESSON --shards N # the N shards -> the class
    python -m kvstaff.gradebook export       # gradebook CSV [--to F.csv], review flags
    python -m kvstaff.gradebook feedback     # feedback/<student>/<lesson>/<lesson>.html
    python -m kvstaff.gradebook validate     # nbgrader validate on every source lesson,
                                                    # validate --invert on every release
    python -m kvstaff.gradebook canvas       # grades.csv -> canvas_grades.csv (Canvas's
                                                    # import layout) + canvas_review.csv

``make release``, ``make autograde`` and ``make feedback`` call these (through
:mod:`kvstaff.gradebook`, which runs :func:`main`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kvstaff.grader.autograde import autograde
from kvstaff.grader.canvas import canvas_export
from kvstaff.grader.course import build_source, release, validate
from kvstaff.grader.export import export, feedback
from kvstaff.grader.shards import merge_shards, parse_shard
from kvstaff.lessons import course_root

COMMANDS = [
    *("build", "release", "autograde", "merge-shards"),
    *("export", "feedback", "validate", "canvas"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvstaff.gradebook",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("names", nargs="*", help="lessons (default: every graded lesson)")
    parser.add_argument("--course", type=Path, default=None, help="nbgrader course folder")
    parser.add_argument("--notebooks", type=Path, default=None, help="default: COURSE/notebooks")
    parser.add_argument("--timeout", type=int, default=None, help="seconds per cell")
    parser.add_argument("--student", action="append", default=None, help="only this student")
    parser.add_argument("--to", type=Path, default=None, help="CSV file (default grades.csv)")
    parser.add_argument(
        "--jobs", type=int, default=None, help="submissions graded at once (default: cores)"
    )
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="grade without bubblewrap (learners' kernels can reach the course folder)",
    )
    _shard_arguments(parser)
    _canvas_arguments(parser)
    args = parser.parse_args(argv)
    shard = _shard(args, parser)
    if args.course is None:
        args.course = course_root()
    if args.notebooks is None:
        args.notebooks = args.course / "notebooks"
    if args.command == "build":
        for n in build_source(args.notebooks, args.course):
            print(n)
    elif args.command == "release":
        release(args.course, args.notebooks, args.names or None)
    elif args.command == "autograde":
        outcomes = autograde(
            args.course,
            args.notebooks,
            timeout=args.timeout,
            students=args.student,
            assignments=args.names or None,
            to=args.to,
            jobs=args.jobs,
            unsafe_no_sandbox=args.unsafe_no_sandbox,
            shard=shard,
        )
        return 1 if any(o.status == "NOT GRADED" for o in outcomes) else 0
    elif args.command == "merge-shards":
        if not args.shards or args.shards < 1:
            parser.error("merge-shards needs --shards N (N >= 1)")
        merge_shards(args.course, args.names or None, args.shards, to=args.to)
    elif args.command == "export":
        export(args.course, args.to)
    elif args.command == "feedback":
        feedback(args.course)
    elif args.command == "canvas":
        return _canvas(args, parser)
    elif args.command == "validate":
        return 0 if validate(args.course, args.notebooks) else 1
    return 0


def _shard_arguments(parser) -> None:
    parser.add_argument(
        "--shard",
        default=None,
        metavar="K/N",
        help="autograde: only the learners of shard K of N (K from 0), into "
        "build/shards/LESSON/K-of-N/ (see kvstaff.grader.shards)",
    )
    parser.add_argument(
        "--shards", type=int, default=None, metavar="N", help="merge-shards: how many shards"
    )


def _shard(args, parser) -> tuple[int, int] | None:
    """``--shard K/N`` as ``(K, N)`` (None without it); refused off autograde or malformed."""
    if args.shard is None:
        return None
    if args.command != "autograde":
        parser.error("--shard is for autograde")
    try:
        return parse_shard(args.shard)
    except ValueError as err:
        parser.error(str(err))


def _canvas_arguments(parser) -> None:
    parser.add_argument(
        "--roster", type=Path, default=None, help="canvas: the roster (default hub/roster.csv)"
    )
    parser.add_argument(
        "--assignment-id",
        action="append",
        default=[],
        metavar="LESSON=ID",
        help="canvas: the Canvas assignment id of a lesson (its column becomes 'LESSON (ID)')",
    )


def _canvas(args, parser) -> int:
    from kvstaff.hub import RosterError, read_roster

    ids = {}
    for item in args.assignment_id:
        lesson, sep, canvas_id = item.partition("=")
        if not sep or not lesson or not canvas_id.isdigit():
            parser.error(f"--assignment-id {item!r}: expected LESSON=ID, e.g. 03_attention=4101")
        ids[lesson] = canvas_id
    roster_path = args.roster or args.course / "hub" / "roster.csv"
    try:
        people = read_roster(roster_path).learners
        canvas_export(
            args.course / "grades.csv",
            people,
            args.to or args.course / "canvas_grades.csv",
            assignment_ids=ids,
        )
    except (RosterError, FileNotFoundError, ValueError) as err:
        print(f"canvas: {err}")
        return 2
    return 0
