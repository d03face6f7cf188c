"""Feedback pages back through the exchange, each to its own submission.

**Feedback** (:func:`return_feedback`) is published only for those recorded submissions,
under nbgrader's name for it (``md5(secret + notebook)``, which the learner's *Fetch
Feedback* computes from the secret in its own cache), with the secret from the staged copy,
and only the lesson's own notebooks' pages: never any other ``*.html``, never through a
link, and never over a page that another submission's return wrote
(``<course>/.exchange/pages.json``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from kvstaff.exchange import (
    CLOEXEC,
    COURSE_ID,
    MAX_PAGE_BYTES,
    ExchangeError,
    check_exchange,
    current_account,
    open_dir,
    open_tree,
    read_json,
    state_dir,
    write_json,
)

__all__ = ["page_name", "publish_feedback", "return_feedback"]


# ---- feedback: each page to its own submission -------------------------------------------------


def page_name(secret: str, notebook: str) -> str:
    """The page nbgrader's Fetch Feedback looks for: ``md5(secret + notebook id)``.html."""
    from nbgrader.utils import notebook_hash

    return notebook_hash(secret=secret, notebook_id=notebook) + ".html"


def _read_capped(dir_fd: int, name: str, cap: int) -> bytes | None:
    """A regular file's bytes (at most ``cap``), never through a link; None otherwise."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = fh.read(cap + 1)
    return None if len(data) > cap else data


def publish_feedback(course: Path, lesson: str, feedback: Path | str | int, echo=print) -> int:
    """Each collected submission's feedback pages into the exchange folder ``feedback``.

    Only submissions :func:`collect_inbound` recorded, only the lesson's notebooks' pages
    (``<course>/feedback/<student>/<lesson>/<notebook>.html``), only when that folder's
    ``submission_secret.txt`` is the collected one (the feedback is for that submission),
    under ``md5(secret + notebook)``, and never over a page another submission owns.
    Returns the number of learners whose pages were published."""
    course = Path(course)
    state = state_dir(course)
    record = read_json(state / f"collected-{lesson}.json")
    pages_path = state / "pages.json"
    pages = read_json(pages_path)
    own_fd = not isinstance(feedback, int)
    out_fd = open_dir(str(feedback)) if own_fd else feedback
    published = 0
    try:
        for student, rec in sorted(record.items()):
            try:
                src = open_tree(course, ["feedback", student, lesson])
            except ExchangeError:
                echo(f"no feedback for {student} on {lesson}: none was generated")
                continue
            try:
                secret = _read_capped(src, "submission_secret.txt", 200)
                if secret is None or secret.decode("ascii", "replace") != rec["secret"]:
                    echo(
                        f"NOT RETURNED {student}: the feedback in {course / 'feedback'} is not "
                        "for the collected submission (collected again since it was graded?): "
                        "autograde and return again"
                    )
                    continue
                done = 0
                for nb in rec["notebooks"]:
                    done += _publish_page(src, out_fd, student, lesson, nb, rec, pages, echo)
                published += done > 0
            finally:
                os.close(src)
    finally:
        write_json(pages_path, pages)
        if own_fd:
            os.close(out_fd)
    return published


def _publish_page(src, out_fd, student, lesson, nb, rec, pages, echo) -> int:
    page = page_name(rec["secret"], nb)
    mine = {"student": student, "lesson": lesson, "notebook": nb}
    owner = pages.get(page)
    if owner is not None and {k: owner.get(k) for k in mine} != mine:
        echo(
            f"NOT RETURNED {student}/{nb}: the page {page} is {owner['student']}'s "
            f"({owner['lesson']}/{owner['notebook']}); left as it is"
        )
        return 0
    if owner is None:
        try:
            os.stat(page, dir_fd=out_fd, follow_symlinks=False)
            echo(
                f"NOT RETURNED {student}/{nb}: {page} is already in the exchange and this "
                "course's return did not write it; left as it is (remove it to return this)"
            )
            return 0
        except FileNotFoundError:
            pass
    html = _read_capped(src, f"{nb}.html", MAX_PAGE_BYTES)
    if html is None:
        echo(f"no feedback page {nb}.html for {student} on {lesson}")
        return 0
    tmp = f".{page}.{secrets.token_hex(4)}"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | CLOEXEC, 0o644, dir_fd=out_fd
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(html)
            os.fchmod(fh.fileno(), 0o644)
        os.rename(tmp, page, src_dir_fd=out_fd, dst_dir_fd=out_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=out_fd)
        raise
    pages[page] = {**mine, "entry": rec["entry"]}
    return 1


def return_feedback(course: Path, lesson: str, exchange: Path | str, echo=print) -> int:
    """Feedback pages of ``lesson`` (no hidden tests) into the exchange for learners to
    fetch: generated for every autograded submission, published by :func:`publish_feedback`
    for the submissions :func:`collect` collected."""
    from kvstaff.grader.export import feedback

    check_exchange(exchange, current_account())
    feedback(course, echo=echo)
    out = open_tree(exchange, [COURSE_ID, "feedback"])
    try:
        n = publish_feedback(course, lesson, out, echo=echo)
    finally:
        os.close(out)
    echo(f"returned feedback on {lesson} to {n} learner(s)")
    return n
