"""Collect, feedback and the exchange's set-up against a learner who attacks nbgrader's
filesystem exchange (staff/kvstaff/exchange.py), on real file trees in tmp folders.

The folder's owner decides who handed a submission in; here the uid -> learner mapping is
given to collect (``accounts``), so that most tests run as any user: the test's own uid is
the learner ``ada`` (or the attacker). The tests with several learners at once give each
a uid of its own (chown: root, as in CI). The same attacks by real accounts through a real
hub are in tests/test_hub.py.

The attacks (each a test below): 1 an inbound name with a '+' too many (nbgrader collects
it as a student ``ada+zz``, following its links); 2 a forged feedback page (a secret that
is a link to, or a copy of, a classmate's); 3 the notebook swapped for a link while collect
works; 4 one entry that stopped collect for the whole class (a timestamp that does not
parse, a taken ``.refused-`` name, 1,100 nested folders, a dangling link, a sparse 101 MB
file, a link to /dev/zero, a FIFO); 5 a submission backdated by its own timestamp.txt;
6 root's set-up following a learner's link.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import secrets
import select
import shutil
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest

from kvstaff import collect as exchange_collect
from kvstaff import exchange
from kvstaff.collect import collect_inbound
from kvstaff.exchange import ExchangeError, check_exchange
from kvstaff.feedback import publish_feedback
from kvstaff.roster import Person, Roster

L = "03_attention"
ME = os.getuid()
STAMP = "2026-03-01 10:00:00.000000 UTC"
NB_TEXT = nbformat.writes(
    nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("answer = 42")])
)
VICTIM = "VICTIM'S WORK: never to be copied for anyone else"


def make_roster(*learners: str) -> Roster:
    people = [Person("prof", "instructor")] + [Person(n, "learner") for n in learners]
    return Roster(Path("roster.csv"), people)


ROSTER = make_roster("ada", "bob", "cyd")


@pytest.fixture
def site(tmp_path):
    """An inbound folder, a course folder with a classmate's (bob's) collected submission
    and gradebook, and the exchange's feedback folder."""
    inbound, course, feedback = tmp_path / "inbound", tmp_path / "course", tmp_path / "feedback"
    for d in (inbound, course, feedback):
        d.mkdir()
    bob = course / "submitted" / "bob" / L
    bob.mkdir(parents=True)
    (bob / f"{L}.ipynb").write_text(VICTIM)
    (bob / "submission_secret.txt").write_text("b" * 128)
    (course / "gradebook.db").write_text("GRADEBOOK: everyone's grades")
    yield inbound, course, feedback
    subprocess.run(["rm", "-rf", str(inbound)], check=True)  # 1,100 folders deep: not rmtree


def random_part() -> str:
    return secrets.token_urlsafe(9)  # 12 characters, as nbgrader's submit


def submit(
    inbound: Path,
    student: str = "ada",
    *,
    name: str | None = None,
    notebook: str | None = NB_TEXT,
    secret: str | None = None,
    stamp: str = STAMP,
) -> Path:
    """A submission folder as nbgrader 0.9.6's submit writes it (or as told)."""
    folder = inbound / (name or f"{student}+{L}+{stamp}+{random_part()}")
    folder.mkdir()
    if notebook is not None:
        (folder / f"{L}.ipynb").write_text(notebook)
    (folder / "timestamp.txt").write_text(stamp)
    (folder / "submission_secret.txt").write_text(secret or secrets.token_hex(64))
    return folder


def run(site, accounts=None, roster=ROSTER, lesson=L):
    inbound, course, _ = site
    lines: list[str] = []
    got = collect_inbound(
        course, lesson, inbound, roster, accounts=accounts or {ME: "ada"}, echo=lines.append
    )
    got.lines = lines
    return got


def refusal(got, folder: Path | str) -> str:
    name = folder if isinstance(folder, str) else folder.name
    mine = [r for r in got.refused if r.startswith(exchange.printable(name) + ": ")]
    assert len(mine) == 1, (name, got.refused)
    return mine[0]


def nothing_of_bobs_reached_ada(course: Path) -> None:
    for path in (course / "submitted").rglob("*"):
        if path.is_file() and "bob" not in path.parts:
            data = path.read_bytes()
            assert b"VICTIM" not in data and b"GRADEBOOK" not in data, path
    assert not (course / ".exchange" / "staging").exists()


def chown_tree(path: Path, uid: int) -> None:
    subprocess.run(["chown", "-R", "-h", f"{uid}:{uid}", str(path)], check=True)


# ---- what nbgrader writes is collected, with the exchange's time -----------------------------


def test_a_submission_is_copied_once_with_the_exchanges_time_and_recorded(site):
    inbound, course, _ = site
    t0 = time.time_ns()
    folder = submit(inbound, secret="a" * 128)
    (folder / "data").mkdir()
    (folder / "data" / "notes.txt").write_text("mine")
    (folder / ".ipynb_checkpoints").mkdir()  # nbgrader's ignored names: never copied
    (folder / ".ipynb_checkpoints" / "x").symlink_to("/etc/shadow")
    copied = [p for p in folder.rglob("*") if ".ipynb_checkpoints" not in p.parts]
    newest = max(p.lstat().st_ctime_ns for p in [folder, *copied])
    got = run(site)
    assert got.refused == [] and list(got.accepted) == ["ada"]
    dest = course / "submitted" / "ada" / L
    assert (dest / f"{L}.ipynb").read_text() == NB_TEXT
    assert (dest / "data" / "notes.txt").read_text() == "mine"
    assert not (dest / ".ipynb_checkpoints").exists()
    stamp = (dest / "timestamp.txt").read_text()
    assert stamp == exchange_collect._stamp(newest) and stamp != STAMP
    assert datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=UTC).timestamp() >= (
        t0 // 10**9 - 1
    )
    rec = json.loads((course / ".exchange" / f"collected-{L}.json").read_text())
    assert rec["ada"]["entry"] == folder.name and rec["ada"]["secret"] == "a" * 128
    assert rec["ada"]["notebooks"] == [L]
    assert folder.exists()  # left in inbound, as nbgrader leaves it
    assert not (course / ".exchange" / "staging").exists()
    # collected again: nothing changed, nothing is copied again
    inode = (dest / f"{L}.ipynb").stat().st_ino
    again = run(site)
    assert again.unchanged == ["ada"] and again.accepted == {} and again.refused == []
    assert (dest / f"{L}.ipynb").stat().st_ino == inode


def test_the_latest_submission_by_the_exchanges_time_wins_not_by_its_name(site):
    inbound, course, _ = site
    submit(inbound, stamp="2099-01-01 00:00:00.000000 UTC", notebook=NB_TEXT.replace("42", "1"))
    time.sleep(0.02)
    later = submit(inbound, stamp="2001-01-01 00:00:00.000000 UTC")
    got = run(site)
    assert got.accepted["ada"]["entry"] == later.name
    assert "answer = 42" in (course / "submitted" / "ada" / L / f"{L}.ipynb").read_text()


def test_a_forged_submission_in_another_learners_name_is_refused(site):
    inbound, _, _ = site
    forged = submit(inbound, "ada")
    got = run(site, accounts={ME: "bob"})  # this uid is bob's
    assert "handed in as 'ada' by the account 'bob'" in refusal(got, forged)
    assert got.accepted == {} and not forged.exists()


# ---- attack 1: a name with a '+' too many ----------------------------------------------------


def test_attack1_a_name_with_a_plus_too_many_is_refused_and_nothing_it_links_is_read(site):
    inbound, course, _ = site
    bobs = course / "submitted" / "bob" / L
    # nbgrader's collect: rsplit('+', 3) -> student 'ada+zz'; copied following links
    zz = submit(inbound, name=f"ada+zz+{L}+{STAMP}+r1")
    (zz / f"{L}.ipynb").unlink()
    (zz / f"{L}.ipynb").symlink_to(bobs / f"{L}.ipynb")
    (zz / "gradebook.html").symlink_to(course / "gradebook.db")
    # and the same links under a name that parses
    plain = submit(inbound, notebook=None)
    (plain / f"{L}.ipynb").symlink_to(bobs / f"{L}.ipynb")
    got = run(site)
    assert "5 '+'-separated fields, not 4" in refusal(got, zz)
    why = refusal(got, plain)
    assert f"'{L}.ipynb' is a symbolic link (to {bobs / f'{L}.ipynb'})" in why
    assert got.accepted == {}
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["bob"]
    nothing_of_bobs_reached_ada(course)
    moved = [p.name for p in inbound.iterdir()]
    assert all(n.startswith(".refused-") for n in moved) and len(moved) == 2


@pytest.mark.parametrize(
    "name, reason",
    [
        (f"ada+{L}+{STAMP}", "3 '+'-separated fields"),  # no random part: guessable
        (f"ada+{L}+{STAMP}+short", "random part 'short'"),
        (f"Ada+{L}+{STAMP}+abcdefghijkl", "'Ada' is not an account name"),
        (f"ada+{L}+2026-13-45 99:00:00.000000 UTC+abcdefghijkl", "does not parse"),
        (f"ada+{L}+yesterday+abcdefghijkl", "timestamp 'yesterday' does not parse"),
        (f"ada+{L}+{STAMP}\n+abcdefghijkl", "does not parse"),
        (f"ada\x1b[2J+{L}+{STAMP}+abcdefghijkl", "is not an account name"),
    ],
)
def test_names_are_parsed_strictly_and_refusals_print_safely(site, name, reason):
    inbound, _, _ = site
    entry = submit(inbound, name=name)
    good = submit(inbound)
    got = run(site)
    line = refusal(got, entry)
    assert reason in line, line
    assert "\n" not in line and "\x1b" not in line
    assert all("\n" not in ln and "\x1b" not in ln for ln in got.lines)
    assert got.accepted["ada"]["entry"] == good.name  # the rest is collected


def test_a_name_that_is_not_utf8_is_refused_and_printed_escaped(site):
    inbound, course, _ = site
    raw = os.fsencode(inbound) + b"/ada\xff+" + L.encode() + b"+" + STAMP.encode() + b"+r"
    os.mkdir(raw)
    got = run(site)
    assert len(got.refused) == 1 and "\\udcff" in got.refused[0]
    assert not os.path.exists(raw)


# ---- attack 2: feedback under a classmate's secret -------------------------------------------


def test_attack2_a_fake_student_with_a_linked_secret_is_refused(site):
    inbound, course, _ = site
    fake = submit(inbound, name=f"zz+y+{L}+{STAMP}+{random_part()}")
    linked = submit(inbound)
    for folder in (fake, linked):
        (folder / "submission_secret.txt").unlink()
        (folder / "submission_secret.txt").symlink_to(
            course / "submitted" / "bob" / L / "submission_secret.txt"
        )
    got = run(site)
    assert "fields, not 4" in refusal(got, fake)
    assert "'submission_secret.txt' is a symbolic link" in refusal(got, linked)
    assert got.accepted == {}


def test_attack2_a_copied_secret_is_refused_and_only_its_owner_gets_a_page(site):
    inbound, course, feedback = site
    # bob's page, as collect + autograde + generate_feedback leave it
    fb = course / "feedback" / "bob" / L
    fb.mkdir(parents=True)
    (fb / f"{L}.html").write_text("<p>bob's feedback</p>")
    (fb / "submission_secret.txt").write_text("b" * 128)
    (fb / "gradebook.html").write_text("not a page of the lesson: never published")
    state = course / ".exchange"
    state.mkdir(mode=0o700)
    (state / f"collected-{L}.json").write_text(
        json.dumps({"bob": {"entry": "x", "secret": "b" * 128, "notebooks": [L]}})
    )
    # ada hands in bob's secret (a plain copy) and her own page-to-be
    copied = submit(inbound, secret="b" * 128)
    got = run(site)
    assert "has the submission_secret.txt of bob's submission" in refusal(got, copied)
    assert "ada" not in json.loads((state / f"collected-{L}.json").read_text())
    assert publish_feedback(course, L, feedback, echo=lambda *_: None) == 1
    page = hashlib.md5(("b" * 128 + L).encode()).hexdigest() + ".html"
    assert sorted(os.listdir(feedback)) == [page]  # no gradebook.html, nothing of ada's
    assert (feedback / page).read_text() == "<p>bob's feedback</p>"
    assert oct((feedback / page).stat().st_mode & 0o777) == "0o644"


@pytest.mark.needs("root")  # two learners: two uids
def test_attack2_of_two_submissions_with_one_secret_only_the_first_is_collected(site):
    inbound, course, _ = site
    first = submit(inbound, "cyd", secret="c" * 128)
    chown_tree(first, 61002)
    time.sleep(0.02)
    second = submit(inbound, "ada", secret="c" * 128)
    chown_tree(second, 61001)
    got = run(site, accounts={61001: "ada", 61002: "cyd"})
    assert list(got.accepted) == ["cyd"]
    assert "of cyd's submission: a copied secret" in refusal(got, second)


def test_feedback_never_overwrites_another_submissions_page_and_never_reads_a_link(site):
    inbound, course, feedback = site
    submit(inbound, secret="a" * 128)
    run(site)
    fb = course / "feedback" / "ada" / L
    fb.mkdir(parents=True)
    (fb / "submission_secret.txt").write_text("a" * 128)
    (fb / f"{L}.html").symlink_to(course / "gradebook.db")  # a link: never read
    lines: list[str] = []
    assert publish_feedback(course, L, feedback, echo=lines.append) == 0
    assert os.listdir(feedback) == []
    (fb / f"{L}.html").unlink()
    (fb / f"{L}.html").write_text("<p>ada's page</p>")
    page = hashlib.md5(("a" * 128 + L).encode()).hexdigest() + ".html"
    # the page is recorded as bob's (another submission): it is not replaced
    pages = course / ".exchange" / "pages.json"
    pages.write_text(json.dumps({page: {"student": "bob", "lesson": L, "notebook": L}}))
    (feedback / page).write_text("bob's page")
    assert publish_feedback(course, L, feedback, echo=lines.append) == 0
    assert (feedback / page).read_text() == "bob's page"
    assert any("is bob's" in ln for ln in lines), lines
    # a page already there that no return wrote is left alone too
    pages.write_text("{}")
    assert publish_feedback(course, L, feedback, echo=lines.append) == 0
    assert (feedback / page).read_text() == "bob's page"
    # once it is gone, ada's page is published, and again (its own) after a re-grade
    (feedback / page).unlink()
    assert publish_feedback(course, L, feedback, echo=lines.append) == 1
    (fb / f"{L}.html").write_text("<p>ada's page, graded again</p>")
    assert publish_feedback(course, L, feedback, echo=lines.append) == 1
    assert (feedback / page).read_text() == "<p>ada's page, graded again</p>"
    assert os.listdir(feedback) == [page]
    # feedback made for an older submission is not returned for the new one
    (fb / "submission_secret.txt").write_text("e" * 128)
    assert publish_feedback(course, L, feedback, echo=lines.append) == 0
    assert "not for the collected submission" in lines[-1]


# ---- attack 3: the notebook swapped for a link while collect works ---------------------------


def test_attack3_a_swap_right_after_collect_lists_the_folder_is_refused(site, monkeypatch):
    inbound, course, _ = site
    folder = submit(inbound)
    listed = exchange_collect._listdir

    def listdir_then_swap(fd, limit=None):
        entries = listed(fd, limit)
        if os.path.samestat(os.fstat(fd), folder.stat()):  # the submission folder
            tmp = folder / ".swap"
            tmp.symlink_to(course / "submitted" / "bob" / L / f"{L}.ipynb")
            os.rename(tmp, folder / f"{L}.ipynb")
        return entries

    monkeypatch.setattr(exchange_collect, "_listdir", listdir_then_swap)
    got = run(site)
    assert f"'{L}.ipynb' is a symbolic link (to " in refusal(got, folder)
    assert got.accepted == {}
    nothing_of_bobs_reached_ada(course)


def test_attack3_a_swap_after_the_copy_changes_nothing_collected(site, monkeypatch):
    inbound, course, _ = site
    folder = submit(inbound)
    check = exchange_collect._check_staged

    def swap_then_check(staged, lesson, released):
        tmp = folder / ".swap"
        tmp.symlink_to(course / "submitted" / "bob" / L / f"{L}.ipynb")
        os.rename(tmp, folder / f"{L}.ipynb")
        return check(staged, lesson, released)

    monkeypatch.setattr(exchange_collect, "_check_staged", swap_then_check)
    got = run(site)
    assert list(got.accepted) == ["ada"]
    assert (folder / f"{L}.ipynb").is_symlink()  # the exchange now holds the link...
    collected = course / "submitted" / "ada" / L / f"{L}.ipynb"
    assert not collected.is_symlink() and collected.read_text() == NB_TEXT  # ...not this
    nothing_of_bobs_reached_ada(course)


def test_attack3_a_folder_changed_while_it_is_copied_is_refused(site, monkeypatch):
    inbound, course, _ = site
    folder = submit(inbound)
    copy = exchange_collect._copy_file

    def copy_then_add(src, dst, name, path, uid, budget):
        copy(src, dst, name, path, uid, budget)
        if name == f"{L}.ipynb":  # the notebook is copied: now the folder changes
            (folder / "later.txt").write_text("added while collect copies")

    monkeypatch.setattr(exchange_collect, "_copy_file", copy_then_add)
    got = run(site)
    assert "the submission folder changed while it was being collected" in refusal(got, folder)
    assert got.accepted == {}


def test_a_file_that_grows_while_it_is_read_is_read_only_up_to_the_cap(site, monkeypatch):
    inbound, course, _ = site
    folder = submit(inbound)
    reopen = exchange_collect._reopen

    def reopen_then_grow(pfd, name, src, st):
        fd = reopen(pfd, name, src, st)
        if name == f"{L}.ipynb":  # its size was checked: now it grows past the cap
            with open(folder / name, "ab") as fh:
                fh.truncate(st.st_size + 2 * exchange_collect.MAX_FILE_BYTES)
        return fd

    monkeypatch.setattr(exchange_collect, "_reopen", reopen_then_grow)
    got = run(site)
    assert f"'{L}.ipynb' is 20.0 MiB (more than 20 MiB)" in refusal(got, folder)
    assert not (course / ".exchange" / "staging").exists()


IN_OPEN = 0x20


def swap_on_open(folder: Path, target: Path, ready: threading.Event, out: dict) -> None:
    """A learner's watcher (inotify): when collect opens the folder, swap the notebook for a
    link to ``target``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, os.fsencode(folder), IN_OPEN) >= 0
    ready.set()
    try:
        if select.select([fd], [], [], 30)[0]:
            os.read(fd, 4096)
            tmp = folder / ".swap"
            tmp.symlink_to(target)
            os.rename(tmp, folder / f"{L}.ipynb")
            out["swapped"] = True
    finally:
        os.close(fd)


@pytest.mark.parametrize("attempt", range(3))
def test_attack3_a_real_watcher_swapping_when_collect_opens_the_folder_gets_nothing(site, attempt):
    inbound, course, _ = site
    folder = submit(inbound)
    ready, out = threading.Event(), {}
    target = course / "submitted" / "bob" / L / f"{L}.ipynb"
    watcher = threading.Thread(target=swap_on_open, args=(folder, target, ready, out))
    watcher.start()
    ready.wait(10)
    got = run(site)
    watcher.join(30)
    assert out.get("swapped"), "the watcher never saw collect open the folder"
    collected = course / "submitted" / "ada" / L / f"{L}.ipynb"
    if got.accepted:  # copied before the swap: the learner's own work
        assert collected.read_text() == NB_TEXT
    else:  # the swap landed while collect copied: refused, and named
        why = refusal(got, folder)
        assert "symbolic link" in why or "changed while it was being collected" in why, why
    nothing_of_bobs_reached_ada(course)


# ---- attack 4: one entry never stops the class -----------------------------------------------


def _bad_timestamp(folder):
    return folder.rename(folder.with_name(f"ada+{L}+2026-02-30 25:61:00.000000 UTC+abcdefghijkl"))


def _nested(folder):
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1100):  # one level at a time: no path, no recursion
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)


def _dangling(folder):
    (folder / "gone").symlink_to(folder / "no-such-file")


def _sparse(folder):
    with open(folder / "big.bin", "wb") as fh:
        fh.truncate(101 * 10**6)


def _dev_zero(folder):
    (folder / f"{L}.ipynb").unlink()
    (folder / f"{L}.ipynb").symlink_to("/dev/zero")


def _fifo(folder):
    os.mkfifo(folder / "pipe")


def _total(folder):
    for i in range(3):
        (folder / f"part{i}.bin").write_bytes(b"x" * (19 * 2**20))


def _many(folder):
    for i in range(exchange_collect.MAX_FILES + 1):
        (folder / f"f{i}.txt").write_text("x")


def _entries(folder):
    (folder / "junk").mkdir()
    for i in range(exchange_collect.MAX_ENTRIES + 500):
        (folder / "junk" / f"{i}").touch()


def _hard_link(folder):
    os.link(folder / f"{L}.ipynb", folder / "again.ipynb")


def _not_json(folder):
    (folder / f"{L}.ipynb").write_text('{"cells": [')


def _not_a_notebook(folder):
    (folder / f"{L}.ipynb").write_text("[1, 2, 3]")


def _deep_json(folder):
    (folder / f"{L}.ipynb").write_text("[" * 100_000 + "]" * 100_000)


def _bad_secret(folder):
    (folder / "submission_secret.txt").write_text("../../../../home/bob")


def _no_secret(folder):
    (folder / "submission_secret.txt").unlink()


def _misnamed(folder):
    (folder / f"{L}.ipynb").rename(folder / "my_answers.ipynb")


def _a_file(folder):
    shutil.rmtree(folder)
    folder.write_text("not a folder")


def _top_link(folder):
    shutil.rmtree(folder)
    folder.symlink_to(Path(folder).parents[1] / "course" / "submitted" / "bob" / L)


BAD = {
    "a timestamp that does not parse": (_bad_timestamp, "does not parse"),
    "1,100 nested folders": (_nested, f"nested more than {exchange_collect.MAX_DEPTH} deep"),
    "a dangling link": (_dangling, "'gone' is a symbolic link (to "),
    "a sparse 101 MB file": (_sparse, "'big.bin' is 96.3 MiB (more than 20 MiB)"),
    "a link to /dev/zero": (_dev_zero, f"'{L}.ipynb' is a symbolic link (to /dev/zero)"),
    "a FIFO": (_fifo, "'pipe' is a FIFO, not a plain file"),
    "57 MiB in all": (_total, "more than 50 MiB in all"),
    "too many files": (_many, f"more than {exchange_collect.MAX_FILES} files"),
    "1,500 entries in a folder": (_entries, f"more than {exchange_collect.MAX_ENTRIES} entries"),
    "a hard link": (_hard_link, "is a hard link (2 names for one file)"),
    "a notebook that is not JSON": (_not_json, "is not a notebook nbformat reads"),
    "JSON that is not a notebook": (_not_a_notebook, "is not a notebook nbformat reads"),
    "JSON nested 100,000 deep": (_deep_json, "is not a notebook nbformat reads"),
    "a secret that is not nbgrader's": (_bad_secret, "not the 128 hex digits"),
    "no secret": (_no_secret, "no submission_secret.txt"),
    "the notebook under another name": (_misnamed, f"no {L}.ipynb in it (it holds ['my_a"),
    "a file, not a folder": (_a_file, "it is a file, not a folder"),
    "a link, not a folder": (_top_link, "it is a symbolic link (to "),
}


@pytest.mark.parametrize("what", list(BAD))
def test_attack4_one_bad_entry_is_refused_named_and_the_good_one_collected(site, what):
    inbound, course, _ = site
    make, reason = BAD[what]
    good = submit(inbound)  # the learner's earlier, good submission
    time.sleep(0.01)
    bad = submit(inbound, notebook=NB_TEXT.replace("42", "7"))
    bad = make(bad) or bad
    t0 = time.perf_counter()
    got = run(site)
    assert time.perf_counter() - t0 < 10
    assert reason in refusal(got, bad), got.refused
    assert got.accepted["ada"]["entry"] == good.name  # the latest that passes
    assert "answer = 42" in (course / "submitted" / "ada" / L / f"{L}.ipynb").read_text()
    assert not os.path.lexists(bad)  # moved aside
    assert any(p.name.startswith(".refused-") for p in inbound.iterdir())
    nothing_of_bobs_reached_ada(course)
    staged = sum(p.stat().st_size for p in (course / "submitted").rglob("*") if p.is_file())
    assert staged < 2**20  # /dev/zero, the sparse file: nothing of them was written


def test_attack4_a_taken_refused_name_does_not_stop_the_move(site, monkeypatch):
    inbound, _, _ = site
    bad = submit(inbound, notebook=None)
    # the name the old collect moved it to, made in advance and not empty
    taken = inbound / (".refused-" + bad.name.replace("+", "_"))
    (taken / "inside").mkdir(parents=True)
    # and the first random suffix tried is taken too
    first = f".refused-{bad.name.replace('+', '_')}-00000000"
    (inbound / first / "inside").mkdir(parents=True)
    suffixes = iter(["00000000", "11111111"])
    real = exchange_collect.secrets.token_hex

    def token_hex(n=None):
        return (next(suffixes, None) or real(n)) if n == 4 else real(n)

    monkeypatch.setattr(exchange_collect.secrets, "token_hex", token_hex)
    got = run(site)
    assert "no 03_attention.ipynb in it" in refusal(got, bad)
    assert (inbound / f".refused-{bad.name.replace('+', '_')}-11111111").is_dir()
    assert (taken / "inside").is_dir() and (inbound / first / "inside").is_dir()


@pytest.mark.needs("root")  # a class: each learner its own uid
def test_attack4_a_class_with_every_bad_entry_is_collected_for_the_others(site):
    inbound, course, _ = site
    uids = {61001: "ada", 61002: "bob", 61003: "cyd"}
    good = {}
    for uid, who in uids.items():
        good[who] = submit(inbound, who)
        chown_tree(good[who], uid)
    time.sleep(0.01)
    bad = []
    for make, _reason in BAD.values():
        folder = submit(inbound, "ada")
        folder = make(folder) or folder
        chown_tree(folder, 61001)
        bad.append(folder)
    got = run(site, accounts=uids)
    assert sorted(got.accepted) == ["ada", "bob", "cyd"]
    assert {got.accepted[w]["entry"] for w in uids.values()} == {f.name for f in good.values()}
    assert len(got.refused) == len(BAD)
    for folder, (_make, reason) in zip(bad, BAD.values(), strict=True):
        assert reason in refusal(got, folder)


@pytest.mark.needs("root")
def test_a_file_put_into_a_learners_folder_by_another_account_refuses_it(site):
    inbound, course, _ = site
    folder = submit(inbound)
    chown_tree(folder, 61001)
    os.lchown(folder / f"{L}.ipynb", 61002, 61002)  # the folder is 0777: anyone may add
    got = run(site, accounts={61001: "ada", 61002: "bob"})
    assert f"'{L}.ipynb' belongs to 'bob', not to its learner" in refusal(got, folder)


# ---- attack 5: backdated ---------------------------------------------------------------------


def test_attack5_a_backdated_submission_gets_the_exchanges_time_not_its_own(site):
    inbound, course, _ = site
    due = datetime.now(UTC)
    time.sleep(0.01)
    claim = "2001-01-01 00:00:00.000000 UTC"
    folder = submit(inbound, stamp=claim)
    os.utime(folder / f"{L}.ipynb", (0, 0))  # mtime can be set back; ctime cannot
    os.utime(folder, (0, 0))
    got = run(site)
    stamp = (course / "submitted" / "ada" / L / "timestamp.txt").read_text()
    got_time = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=UTC)
    assert got_time > due
    assert got.accepted["ada"]["claimed"] == claim
    assert any(f"claims {claim}; the exchange records {stamp}" in ln for ln in got.lines)


# ---- attack 6: the exchange's set-up follows no link -----------------------------------------


@pytest.mark.needs("root")  # prepare_exchange chowns
def test_attack6_prepare_refuses_a_link_for_the_course_folder_and_changes_nothing(tmp_path):
    victim = tmp_path / "home-of-bob"
    victim.mkdir(mode=0o700)
    os.chown(victim, 61002, 61002)
    ex = tmp_path / "exchange"
    ex.mkdir()
    os.chmod(ex, 0o1777)
    (ex / "key-vectors").symlink_to(victim)  # a learner's, in the world-writable root
    with pytest.raises(ExchangeError, match=r"key-vectors is a symbolic link \(to .*home-of-bob"):
        exchange.prepare_exchange(ex, "root")
    st = victim.stat()
    assert (st.st_uid, st.st_mode & 0o7777) == (61002, 0o700) and os.listdir(victim) == []
    with pytest.raises(ExchangeError, match="key-vectors is a symbolic link"):
        check_exchange(ex, "root")
    # a course folder a learner made (before the first `make hub`) is refused too
    (ex / "key-vectors").unlink()
    (ex / "key-vectors").mkdir()
    os.chown(ex / "key-vectors", 61002, 61002)
    with pytest.raises(ExchangeError, match="belongs to uid 61002, not to root or root"):
        exchange.prepare_exchange(ex, "root")
    # a link where inbound should be, inside the course folder
    shutil.rmtree(ex / "key-vectors")
    (ex / "key-vectors").mkdir()
    (ex / "key-vectors" / "inbound").symlink_to(victim)
    with pytest.raises(ExchangeError, match="inbound is a symbolic link"):
        exchange.prepare_exchange(ex, "root")
    assert (victim.stat().st_uid, victim.stat().st_mode & 0o7777) == (61002, 0o700)
    (ex / "key-vectors" / "inbound").unlink()
    exchange.prepare_exchange(ex, "root")
    check_exchange(ex, "root")


def test_attack6_check_names_a_link_in_the_layout_without_following_it(tmp_path):
    ex = tmp_path / "exchange"
    (ex / "key-vectors").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ex / "key-vectors" / "feedback").symlink_to(elsewhere)
    with pytest.raises(ExchangeError) as err:
        check_exchange(ex, "root")
    assert f"{ex}/key-vectors/feedback is a symbolic link (to {elsewhere})" in str(err.value)
    assert "elsewhere has mode" not in str(err.value)
    link = tmp_path / "link-to-exchange"
    link.symlink_to(ex)
    with pytest.raises(ExchangeError, match="is a symbolic link"):
        check_exchange(link, "root")
