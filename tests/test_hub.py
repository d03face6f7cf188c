"""The class on a real JupyterHub, end to end: real system accounts, a real hub
(hub/jupyterhub_config.py, configurable-http-proxy, LocalProcessSpawner), nbgrader's exchange.

A roster of one instructor and six learners becomes system accounts (removed afterwards, even
when the test fails). The hub starts; the instructor releases the first fixture lesson
(tests/nbfixtures.py) and a second release of it is refused. The learners:

* ``honest`` works through the hub: signs in on the hub's login page in headless Chromium
  (the hub starts their server), opens the Assignments panel and presses Fetch; the answer is
  written through the server's contents API and submitted through its nbgrader handlers; their
  server is then stopped mid-flow, started again through the hub's REST API, and fetches the
  feedback (without Chromium the REST API starts the server and the handlers fetch);
* ``wrong`` (softmax right, attend wrong), ``hostile`` (a solution cell that reaches for the
  gradebook and other homes, and a forged submission folder in ``wrong``'s name), ``resub``
  (hands in the stubs, then the answer: the latest counts), ``misnamed`` (the answer under
  another file name: refused at collect, and named) submit before the due date;
* ``late`` submits after it; ``absent`` never submits.

Each learner step runs as that learner's account (``setpriv``), through nbgrader's exchange.
The instructor (their own account too) collects — the forged folder is refused —, autogrades
in the bubblewrap sandbox (two at a time), generates and returns feedback. Every learner
fetches their own feedback and then fails to read anyone else's home, the exchange's inbound
and feedback folders, and the instructor's course (gradebook, grades.csv, submissions).

Asserted: every grade, the lateness, each feedback page's owner and its equality with the
instructor's page for that learner, the modes that keep one learner out of another's work,
and the Canvas export of the class. Runs as root only (CI): it needs useradd and setpriv.
"""

from __future__ import annotations

import filecmp
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest
from chromium import find_chromium
from conftest import ROOT, project_python
from nbfixtures import LESSONS, reference_source, set_solution, write_lessons

from kvstaff import hub
from kvstaff.grader.canvas import canvas_rows

A = "01_fixture"
PROXY = ROOT / "node_modules" / ".bin" / "configurable-http-proxy"
PREFIX = "kvt-"
INSTRUCTOR = f"{PREFIX}teach"
KINDS = ("honest", "wrong", "hostile", "resub", "misnamed", "late", "absent")
LEARNERS = {k: f"{PREFIX}{k}" for k in KINDS}

pytestmark = [
    pytest.mark.second_stage,  # CI's second stage: make test-course
    pytest.mark.grading,
    # each a failure, not a skip, in CI (tests/pieces.py)
    pytest.mark.needs("root", "bubblewrap", "account tools", "npm assets"),
]


def free_port_block(n: int = 3) -> int:
    """A port p with p, p+1, ..., p+n-1 free on 127.0.0.1 (the hub, its API, the proxy's)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            for i in range(1, n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
    raise RuntimeError("no block of free ports")


class ClassHub:
    """The accounts, the exchange, the running hub, and a way to act as each account."""

    def __init__(
        self, base: Path, learners: dict[str, str] = LEARNERS, instructor: str = INSTRUCTOR
    ):
        self.base, self.learners, self.instructor = base, learners, instructor
        self.homes, self.exchange = base / "home", base / "exchange"
        self.state, self.notebooks = base / "state", base / "notebooks"
        self.roster_path = base / "roster.csv"
        lines = [
            "username,role,name,section,canvas_id,sis_user_id,sis_login_id",
            f'{instructor},instructor,"Hopper, Grace",,,,',
        ]
        for i, (kind, user) in enumerate(learners.items()):
            lines.append(f'{user},learner,"{kind.title()}, Learner",A,{2000 + i},S{i},{kind}')
        self.roster_path.write_text("\n".join(lines) + "\n")
        self.roster = hub.read_roster(self.roster_path)
        self.token = os.urandom(16).hex()
        self.port = free_port_block()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.timings: dict[str, float] = {}

    # -- accounts and processes --------------------------------------------------------------
    def home(self, user: str) -> Path:
        return Path(pwd.getpwnam(user).pw_dir)

    @property
    def course(self) -> Path:
        return self.home(self.instructor) / hub.COURSE_ID

    def view(self, argv: list[str]) -> list[str]:
        return hub.private_view(argv, [hub.python_prefix(), ROOT], self.base / "view")

    def act(self, user: str, action: str, **payload) -> subprocess.Popen:
        """Start tests/hub_actor.py ACTION as ``user`` (their uid, gid, home; no groups)."""
        env = [
            "env",
            "-i",
            f"HOME={self.home(user)}",
            f"USER={user}",
            f"LOGNAME={user}",
            f"PATH={Path(project_python()).parent}:/usr/bin:/bin",
            "LANG=C.UTF-8",
            "OMP_NUM_THREADS=1",
        ]
        argv = [
            "setpriv",
            f"--reuid={user}",
            f"--regid={user}",
            "--clear-groups",
            *env,
            project_python(),
            str(ROOT / "tests" / "hub_actor.py"),
            action,
            json.dumps(payload),
        ]
        return subprocess.Popen(
            self.view(argv),
            cwd=self.home(user),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @staticmethod
    def result(proc: subprocess.Popen, timeout: float = 240) -> dict:
        out, err = proc.communicate(timeout=timeout)
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, f"{out[-2000:]}\n{err[-4000:]}"
        return json.loads(lines[-1].removeprefix("RESULT "))

    # -- the hub -------------------------------------------------------------------------------
    def start(self) -> None:
        hub.ensure_accounts(self.roster, self.homes, echo=lambda *_: None)
        hub.prepare_exchange(self.exchange, self.instructor)
        hub.instructor_course(self.roster.instructors[0], self.homes)
        hub.hub_state(self.state, self.roster)
        env = dict(
            os.environ,
            KV_HUB_ROSTER=str(self.roster_path),
            KV_EXCHANGE=str(self.exchange),
            KV_HUB_STATE=str(self.state),
            KV_HUB_PORT=str(self.port),
            KV_HUB_API_TOKEN=self.token,
        )
        argv = [
            str(Path(project_python()).parent / "jupyterhub"),
            "-f",
            str(ROOT / "hub" / "jupyterhub_config.py"),
        ]
        self.log = open(self.base / "hub.log", "w")
        self.proc = subprocess.Popen(
            self.view(argv),
            env=env,
            cwd=self.state,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_up(self, timeout: float = 60) -> float:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            assert self.proc.poll() is None, (self.base / "hub.log").read_text()[-3000:]
            try:
                self.api("GET", "/hub/api/")
                return time.perf_counter() - t0
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the hub did not answer: " + (self.base / "hub.log").read_text())

    def api(self, method: str, path: str, data: dict | None = None, body: bytes | None = None):
        if data is not None:
            body = urllib.parse.urlencode(data).encode()
        req = urllib.request.Request(
            self.url + path,
            data=body,
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read().decode()
            return resp.status, (json.loads(text) if text.strip() else None)

    def spawn(self, user: str) -> None:
        status, _ = self.api("POST", f"/hub/api/users/{user}/server")
        assert status in (201, 202), status

    def wait_ready(self, user: str, timeout: float = 90) -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            _, info = self.api("GET", f"/hub/api/users/{user}")
            if info["servers"].get("", {}).get("ready"):
                return
            time.sleep(0.2)
        raise AssertionError(f"{user}'s server never became ready")

    def stop_server(self, user: str) -> None:
        self.api("DELETE", f"/hub/api/users/{user}/server")
        for _ in range(300):
            _, info = self.api("GET", f"/hub/api/users/{user}")
            if not info["servers"]:
                return
            time.sleep(0.1)
        raise AssertionError(f"{user}'s server did not stop")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
        if self.proc:
            self.log.close()


def through_the_hub(h: ClassHub, user: str) -> None:
    """Fetch, answer and submit as ``user`` through their hub server's nbgrader handlers."""
    base = f"/user/{user}"
    ids = {"course_id": hub.COURSE_ID, "assignment_id": A}
    if not (h.home(user) / A).exists():
        _, listing = h.api("POST", f"{base}/assignments/fetch", ids)
        assert listing["success"], listing
    path = f"{base}/api/contents/{A}/{A}.ipynb"
    _, model = h.api("GET", path)
    nb = nbformat.from_dict(model["content"])
    set_solution(nb, "l01-softmax-solution", reference_source("softmax"))
    set_solution(nb, "l01-attend-solution", reference_source("attend"))
    body = json.dumps({"type": "notebook", "format": "json", "content": nb}).encode()
    status, _ = h.api("PUT", path, body=body)
    assert status in (200, 201)
    _, listing = h.api("POST", f"{base}/assignments/submit", ids)
    assert listing["success"], listing


def _wait_js(page, condition: str, timeout: float) -> None:
    """Poll a JavaScript condition (a page that is navigating may not answer for a while)."""
    from chromium import ProtocolError

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            if page.evaluate(f"Boolean({condition})", timeout=10):
                return
        except (ProtocolError, TimeoutError):
            pass
        time.sleep(0.2)
    shot = Path(tempfile.gettempdir()) / "kv-hub-browser-failed.png"
    shot.write_bytes(page.screenshot())
    raise AssertionError(
        f"the page never showed {condition}; at "
        f"{page.evaluate('location.href')} (screenshot: {shot})"
    )


def _click(page, selector: str, text: str) -> None:
    """A real mouse click (DevTools input events) on the element with this visible text."""
    box = page.evaluate(
        f"(() => {{ const e = [...document.querySelectorAll({json.dumps(selector)})]"
        f".find(x => x.innerText.trim() === {json.dumps(text)}); if (!e) return null;"
        " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
    )
    assert box, f"no {selector} reading {text!r}"
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        page.send(
            "Input.dispatchMouseEvent",
            {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1},
        )


def in_the_browser(h: ClassHub, user: str) -> bytes:
    """As ``user`` in headless Chromium: sign in on the hub's login page (the hub starts the
    server), open the Assignments panel (Nbgrader menu > Assignment List) and press Fetch.
    Returns a screenshot of the panel after the fetch."""
    from chromium import Chromium, find_chromium

    password = (h.state / "learner_password").read_text().strip()
    with Chromium(find_chromium(), timeout=120) as browser:
        page = browser.new_page(1280, 800)
        page.goto(f"{h.url}/hub/login", timeout=60)
        page.evaluate(
            f"(() => {{ document.querySelector('#username_input').value = {json.dumps(user)};"
            f" document.querySelector('#password_input').value = {json.dumps(password)};"
            " document.querySelector('form').submit(); return true; })()"
        )
        _wait_js(
            page,
            f"location.pathname.startsWith('/user/{user}/lab') && "
            "!document.querySelector('#jupyterlab-splash') && "
            "[...document.querySelectorAll('.lm-MenuBar-itemLabel')]"
            ".some(e => e.innerText.trim() === 'Nbgrader')",
            120,
        )
        item = (
            "[...document.querySelectorAll('.lm-Menu-itemLabel')]"
            ".some(e => e.innerText.trim() === 'Assignment List')"
        )
        for _ in range(10):  # Lab may still be wiring its menus when it first shows them
            _click(page, ".lm-MenuBar-itemLabel", "Nbgrader")
            try:
                _wait_js(page, item, 3)
                break
            except AssertionError:
                continue
        _wait_js(page, item, 1)
        _click(page, ".lm-Menu-itemLabel", "Assignment List")
        _wait_js(
            page,
            "[...document.querySelectorAll('button')].some(b => b.innerText.trim() === 'Fetch')",
            60,
        )
        _click(page, "button", "Fetch")
        fetched = h.home(user) / A / f"{A}.ipynb"
        for _ in range(300):
            if fetched.exists():
                break
            time.sleep(0.1)
        assert fetched.exists(), "the Fetch button fetched nothing"
        _wait_js(
            page,
            "[...document.querySelectorAll('button')].some(b => b.innerText.trim() === 'Submit')",
            30,
        )
        return page.screenshot()


def run_class(h: ClassHub) -> dict:
    """The whole flow; returns what each step reported, and each phase's seconds."""
    t = {}
    clock = [time.perf_counter()]
    start = clock[0]

    def phase(name: str) -> None:
        now = time.perf_counter()
        t[name] = round(now - clock[0], 1)
        clock[0] = now

    h.start()
    write_lessons(h.notebooks, {A: LESSONS[A]})
    paths = dict(course=str(h.course), notebooks=str(h.notebooks), exchange=str(h.exchange))
    release = h.act(INSTRUCTOR, "release", **paths)  # while the hub starts
    t["hub up (s)"] = round(h.wait_up(), 1)
    out = {"release": h.result(release)}
    phase("accounts + hub + release (s)")

    others = [str(h.home(u)) for u in LEARNERS.values() if u != LEARNERS["hostile"]]
    gradebook = str(h.course / "gradebook.db")
    procs = {
        k: h.act(
            LEARNERS[k],
            "learn",
            kind=k,
            exchange=str(h.exchange),
            gradebook=gradebook,
            others=others,
            victim=LEARNERS["wrong"],
        )
        for k in ("wrong", "hostile", "resub", "misnamed")
    }
    if find_chromium():  # signs in, the hub starts the server, the panel fetches
        out["screenshot"] = in_the_browser(h, LEARNERS["honest"])
    else:  # no browser here (the browser test below then skips, or fails in CI)
        h.spawn(LEARNERS["honest"])
        h.wait_ready(LEARNERS["honest"])
    t["honest signed in and fetched (s)"] = round(time.perf_counter() - clock[0], 1)
    through_the_hub(h, LEARNERS["honest"])
    h.stop_server(LEARNERS["honest"])  # stopped mid-flow; started again for the feedback
    out["learn"] = {k: h.result(p) for k, p in procs.items()}
    due = datetime.now(UTC)
    time.sleep(1.0)
    out["late"] = h.result(h.act(LEARNERS["late"], "learn", kind="late", exchange=str(h.exchange)))
    phase("learners fetch and submit (s)")

    h.spawn(LEARNERS["honest"])  # starts while the instructor grades
    out["grade"] = h.result(
        h.act(INSTRUCTOR, "grade", roster=str(h.roster_path), due=due.isoformat(), **paths),
        timeout=400,
    )
    phase("collect + autograde + feedback (s)")
    t["of which (s)"] = {k: round(v, 1) for k, v in out["grade"]["autograde_seconds"].items()}

    h.wait_ready(LEARNERS["honest"])
    ids = {"course_id": hub.COURSE_ID, "assignment_id": A}
    _, listing = h.api("POST", f"/user/{LEARNERS['honest']}/assignments/fetch_feedback", ids)
    assert listing["success"], listing
    probes = probe_paths(h)
    with ThreadPoolExecutor(len(LEARNERS)) as pool:
        futures = {
            k: pool.submit(
                lambda k=k: h.result(
                    h.act(
                        LEARNERS[k],
                        "feedback",
                        exchange=str(h.exchange),
                        probe=probes[k],
                        fetch=k != "honest",
                    )
                )
            )
            for k in KINDS
        }
        out["feedback"] = {k: f.result() for k, f in futures.items()}
    phase("learners fetch feedback + probes (s)")
    t["total (s)"] = round(time.perf_counter() - start, 1)
    out["timings"] = t
    print("class hub phases:", t)
    return out


def probe_paths(h: ClassHub) -> dict[str, list[str]]:
    """For each learner: paths that are someone else's (all must exist: checked here)."""
    course = h.course
    theirs = [
        h.home(INSTRUCTOR),
        course / "gradebook.db",
        course / "grades.csv",
        course / "submitted",
        course / "autograded" / LEARNERS["wrong"],
        h.exchange / hub.COURSE_ID / "inbound",
        h.exchange / hub.COURSE_ID / "feedback",
    ]
    probes = {}
    for kind, user in LEARNERS.items():
        paths = list(theirs)
        for other in LEARNERS.values():
            if other != user:
                paths.append(h.home(other))
                fb = h.course / "feedback" / other / A / f"{A}.html"
                if fb.exists():  # the instructor's copy of another learner's feedback
                    paths.append(fb)
        for p in paths:
            assert Path(p).exists(), p
        probes[kind] = [str(p) for p in paths]
    return probes


@pytest.fixture(scope="module")
def class_hub():
    base = Path(tempfile.mkdtemp(prefix="kv-hub-test-"))  # not under pytest's 0700 folder
    os.chmod(base, 0o755)
    h = ClassHub(base)
    try:
        h.out = run_class(h)
        yield h
    finally:
        h.stop()
        hub.remove_accounts(h.roster, echo=lambda *_: None)
        shutil.rmtree(base, ignore_errors=True)
    assert not any(_exists(u) for u in [INSTRUCTOR, *LEARNERS.values()]), "accounts left"


def _exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


def test_each_step_ran_as_its_own_account(class_hub):
    out = class_hub.out
    uid = {u: pwd.getpwnam(u).pw_uid for u in [INSTRUCTOR, *LEARNERS.values()]}
    assert out["release"]["uid"] == out["grade"]["uid"] == uid[INSTRUCTOR] != 0
    for kind, res in out["learn"].items():
        assert res["uid"] == uid[LEARNERS[kind]]
    for kind, res in out["feedback"].items():
        assert res["uid"] == uid[LEARNERS[kind]]


@pytest.mark.needs("chromium")
def test_one_learner_signed_in_and_fetched_in_a_real_browser(class_hub):
    png = class_hub.out["screenshot"]
    assert png.startswith(b"\x89PNG")
    shot = Path(tempfile.gettempdir()) / "kv-hub-assignments.png"
    shot.write_bytes(png)
    print(f"screenshot of the Assignments panel after Fetch: {shot}")


def test_a_lesson_released_twice_is_refused(class_hub):
    assert "already released to the exchange" in class_hub.out["release"]["refused_twice"]
    assert "--force" in class_hub.out["release"]["refused_twice"]


def test_every_grade(class_hub):
    rows = class_hub.out["grade"]["rows"]
    got = {k: (rows[u]["status"], rows[u]["score"]) for k, u in LEARNERS.items()}
    assert got == {
        "honest": ("graded", "3.0"),  # through the hub
        "wrong": ("graded", "1.0"),  # softmax right (1 point), attend wrong (0 of 2)
        "hostile": ("FLAGGED", ""),  # reached for the gradebook: no number, a person looks
        "resub": ("graded", "3.0"),  # the stubs first, the answer later: the latest counts
        "misnamed": ("no submission", "0.0"),  # refused at collect: the wrong file name
        "late": ("graded", "3.0"),
        "absent": ("no submission", "0.0"),
    }, got
    assert rows[LEARNERS["hostile"]]["needs_review"] == "yes"
    assert "sqlite3" in rows[LEARNERS["hostile"]]["notes"]
    assert all(
        rows[u]["sandbox"] == "bubblewrap"
        for k, u in LEARNERS.items()
        if k not in ("absent", "misnamed")
    )


def test_the_late_submission_is_late_and_the_others_are_not(class_hub):
    late = class_hub.out["grade"]["late"]
    assert late[LEARNERS["late"]] > 0
    assert all(late[LEARNERS[k]] == 0 for k in ("honest", "wrong", "hostile", "resub"))


def test_a_forged_submission_in_another_learners_name_is_refused(class_hub):
    forged = class_hub.out["learn"]["hostile"]["forged"]
    refused = [r for r in class_hub.out["grade"]["refused"] if r.startswith(forged)]
    assert len(refused) == 1, class_hub.out["grade"]["refused"]
    assert f"by the account '{LEARNERS['hostile']}'" in refused[0]
    stranger = class_hub.out["learn"]["hostile"]["stranger"]
    named = [r for r in class_hub.out["grade"]["refused"] if r.startswith(stranger)]
    assert len(named) == 1 and "unknown learner 'kvt-nobody'" in named[0], named
    # nor could the forger list the inbound folder to find anyone's real submission
    assert class_hub.out["learn"]["hostile"]["listed_inbound"] is None


def test_a_submission_under_the_wrong_file_name_is_refused_and_named(class_hub):
    refused = class_hub.out["grade"]["refused"]
    assert len(refused) == 3, refused  # the forgery, the stranger and this one, no other
    mine = [r for r in refused if r.startswith(LEARNERS["misnamed"] + "+")]
    assert len(mine) == 1 and f"no {A}.ipynb in it" in mine[0], refused
    assert "my_answers.ipynb" in mine[0]


def test_each_learner_gets_their_own_feedback_and_no_one_elses(class_hub):
    h = class_hub
    for kind, user in LEARNERS.items():
        res = h.out["feedback"][kind]
        if kind in ("absent", "misnamed"):
            assert res["pages"] == []
            continue
        assert len(res["pages"]) >= 1, (kind, res)
        page = Path(res["pages"][-1])
        assert page.is_relative_to(h.home(user))
        st = page.stat()
        assert st.st_uid == pwd.getpwnam(user).pw_uid  # the learner's own file
        assert not st.st_mode & stat.S_IWOTH
        home = h.home(user).stat()
        assert stat.S_IMODE(home.st_mode) == 0o700 and home.st_uid == pwd.getpwnam(user).pw_uid
        # the page is the instructor's page for this learner, not anyone else's
        assert filecmp.cmp(page, h.course / "feedback" / user / A / f"{A}.html", shallow=False)
        assert all(v == "PermissionError" for v in res["probes"].values()), (kind, res["probes"])


def test_the_exchange_keeps_its_modes_after_the_class(class_hub):
    hub.check_exchange(class_hub.exchange, INSTRUCTOR)


def test_the_class_exports_to_canvas_with_the_flagged_row_blank(class_hub):
    rows = list(class_hub.out["grade"]["rows"].values())
    header, table, review = canvas_rows(rows, class_hub.roster.learners, {A: "4101"})
    assert header[5:] == [f"{A} (4101)"] and table[0][0] == "Points Possible"
    by_login = {r[3]: r[5] for r in table[1:]}
    assert by_login == {
        "honest": "3.0",
        "wrong": "1.0",
        "hostile": "",
        "resub": "3.0",
        "misnamed": 0,
        "late": "3.0",
        "absent": 0,
    }
    assert [(r["student"], r["status"]) for r in review] == [(LEARNERS["hostile"], "FLAGGED")]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s"]))
