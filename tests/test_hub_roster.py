"""The class hub's bad input (staff/kvstaff/hub.py): a roster with an unknown learner, a
duplicate, a bad name, a wrong role or no instructor; an exchange folder with the wrong
permissions. Each gets a message naming the file, the line or the folder."""

from __future__ import annotations

import os
import shutil

import pytest

from kvstaff import exchange, hub
from kvstaff.hub import ExchangeError, RosterError, check_exchange, read_roster

HEADER = "username,role,name\n"


def roster(tmp_path, body: str):
    path = tmp_path / "roster.csv"
    path.write_text(HEADER + body)
    return path


def test_a_good_roster_is_read_with_its_roles(tmp_path):
    r = read_roster(roster(tmp_path, 'prof,instructor,P\nada,learner,"Lovelace, Ada"\n'))
    assert [p.username for p in r.instructors] == ["prof"]
    assert [(p.username, p.name) for p in r.learners] == [("ada", "Lovelace, Ada")]


@pytest.mark.parametrize(
    "body, message",
    [
        ("prof,instructor,\nAda,learner,\n", r"line 3: bad name 'Ada'"),
        ("prof,instructor,\nada+x,learner,\n", r"line 3: bad name 'ada\+x'"),
        ("prof,instructor,\n,learner,\n", r"line 3: bad name ''"),
        (
            "prof,instructor,\nada,learner,\nada,learner,\n",
            r"line 4: duplicate 'ada' \(first on line 3\)",
        ),
        ("prof,instructor,\nada,student,\n", r"line 3: 'ada' has role 'student'"),
        ("ada,learner,\n", r"no instructor"),
    ],
)
def test_bad_rosters_are_refused_with_the_line(tmp_path, body, message):
    with pytest.raises(RosterError, match=message):
        read_roster(roster(tmp_path, body))


def test_every_problem_is_reported_at_once(tmp_path):
    with pytest.raises(RosterError) as err:
        read_roster(roster(tmp_path, "prof,instructor,\nBad,learner,\nprof,learner,\n"))
    text = str(err.value)
    assert "line 3: bad name 'Bad'" in text and "line 4: duplicate 'prof'" in text


def test_a_bad_header_and_a_missing_file_are_named(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("user,role\nprof,instructor\n")
    with pytest.raises(RosterError, match=r"missing column\(s\) \['username'\].*unknown column"):
        read_roster(path)
    with pytest.raises(RosterError, match="nope.csv: no such file"):
        read_roster(tmp_path / "nope.csv")


def test_an_unknown_learner_is_named(tmp_path):
    r = read_roster(roster(tmp_path, "prof,instructor,\nada,learner,\n"))
    with pytest.raises(RosterError, match="unknown learner 'bob': not in the roster"):
        r.get("bob")


def test_the_repository_roster_is_valid():
    r = read_roster(hub.course_root() / "hub" / "roster.csv")
    assert len(r.instructors) == 1 and len(r.learners) >= 5


@pytest.mark.needs("root")  # chown to root
def test_an_exchange_with_wrong_permissions_is_named_with_the_fix(tmp_path):
    ex = tmp_path / "exchange"
    hub.prepare_exchange(ex, "root")
    check_exchange(ex, "root")  # as made: fine
    assert oct(os.stat(ex).st_mode & 0o7777) == "0o1777"
    assert oct(os.stat(ex / "key-vectors" / "inbound").st_mode & 0o7777) == "0o2733"
    os.chmod(ex, 0o777)  # nbgrader's own mode: no sticky bit
    os.chmod(ex / "key-vectors" / "feedback", 0o755)  # learners could list feedback
    with pytest.raises(ExchangeError) as err:
        check_exchange(ex, "root")
    text = str(err.value)
    assert f"{ex} has mode 0777, needs 1777" in text and f"chmod 1777 {ex}" in text
    assert "feedback has mode 0755, needs 0711" in text
    shutil.rmtree(ex)
    with pytest.raises(ExchangeError, match="no such folder"):
        check_exchange(ex, "root")


def test_what_collect_refuses_inside_a_submission_is_named(tmp_path):
    sub = tmp_path / "ada+03_attention+2026"
    (sub / "deep").mkdir(parents=True)
    (sub / "03_attention.ipynb").write_text("{}")
    assert exchange._inside_problem(sub) is None
    (sub / "deep" / "gb").symlink_to("/etc/passwd")
    assert exchange._inside_problem(sub) == "holds 'deep/gb', which is not a plain file or folder"
    (sub / "deep" / "gb").unlink()
    os.mkfifo(sub / "pipe")
    assert "'pipe'" in exchange._inside_problem(sub)
