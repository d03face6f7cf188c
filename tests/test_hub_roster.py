"""The class hub's bad input (staff/kvstaff/hub.py): a roster with an unknown learner, a
duplicate, a bad name, a wrong role or no instructor; an exchange folder with the wrong
permissions. Each gets a message naming the file, the line or the folder."""

from __future__ import annotations

import os
import shutil

import pytest

from kvstaff import hub
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


CANVAS_HEADER = "username,role,name,section,canvas_id,sis_user_id,sis_login_id\n"


@pytest.mark.parametrize(
    "rows, message",
    [
        (
            ["ada,learner,A,,1001,S1,ada1", "bob,learner,B,,1001,S2,bob1"],
            r"line 4: duplicate canvas_id '1001' of 'bob': already 'ada''s \(line 3\)",
        ),
        (  # the same number spelt otherwise is the same Canvas user
            ["ada,learner,A,,1001,,", "bob,learner,B,,01001,,"],
            r"line 4: duplicate canvas_id '01001' of 'bob': already 'ada''s \(line 3\)",
        ),
        (
            ["ada,learner,A,,1001,S1,", "bob,learner,B,,1002,S1,"],
            r"line 4: duplicate sis_user_id 'S1' of 'bob': already 'ada''s \(line 3\)",
        ),
        (
            ["ada,learner,A,,,,alovelace", "bob,learner,B,,,,ALovelace"],
            r"line 4: duplicate sis_login_id 'ALovelace' of 'bob': already 'ada''s \(line 3\)",
        ),
        (  # an instructor's identity counts too
            ["bob,learner,B,,2,,"],
            r"line 3: duplicate canvas_id '2' of 'bob': already 'prof''s \(line 2\)",
        ),
    ],
)
def test_two_people_with_one_canvas_identity_are_refused_with_the_lines(tmp_path, rows, message):
    path = tmp_path / "roster.csv"
    prof = "prof,instructor,P,,2,,\n" if "'prof''s" in message else "prof,instructor,P,,,,\n"
    path.write_text(CANVAS_HEADER + prof + "\n".join(rows) + "\n")
    with pytest.raises(RosterError, match=message):
        read_roster(path)


def test_empty_canvas_identities_are_no_duplicates_and_every_clash_is_named(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(CANVAS_HEADER + "prof,instructor,P,,,,\nada,learner,A,,,,\nbob,learner,B,,,,\n")
    assert [p.username for p in read_roster(path).learners] == ["ada", "bob"]
    path.write_text(
        CANVAS_HEADER + "prof,instructor,P,,,,\nada,learner,A,,7,S7,a\nbob,learner,B,,7,S7,a\n"
        "cy,learner,C,,8,,\ndee,learner,D,,8,,\n"
    )
    with pytest.raises(RosterError) as err:
        read_roster(path)
    text = str(err.value)
    for column in ("canvas_id '7'", "sis_user_id 'S7'", "sis_login_id 'a'"):
        assert f"line 4: duplicate {column} of 'bob'" in text
    assert "line 6: duplicate canvas_id '8' of 'dee': already 'cy''s (line 5)" in text
