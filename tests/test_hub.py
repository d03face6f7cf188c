"""The class on a real JupyterHub, end to end: real system accounts, a real hub
(hub/jupyterhub_config.py, configurable-http-proxy, LocalProcessSpawner), nbgrader's exchange.

A roster of one instructor and nine learners becomes system accounts (removed afterwards,
even when the test fails). Before the exchange is prepared, a learner puts a link to a
classmate's home where the course's folder goes (the exchange's root is world-writable):
root's set-up refuses it and changes nothing through it. The hub starts; the instructor
releases the first fixture lesson (tests/nbfixtures.py) and a second release of it is
refused. The learners:

* ``honest`` works through the hub: signs in on the hub's login page in headless Chromium
  (the hub starts their server), opens the Assignments panel and presses Fetch; the answer is
  written through the server's contents API and submitted through its nbgrader handlers; their
  server is then stopped mid-flow, started again through the hub's REST API, and fetches the
  feedback (without Chromium the REST API starts the server and the handlers fetch);
* ``wrong`` (softmax right, attend wrong), ``hostile`` (a solution cell that reaches for the
  gradebook and other homes, a forged submission folder in ``wrong``'s name, one for someone
  not in the class, and every attack on the exchange below), ``resub`` (hands in the stubs,
  then the answer: the latest counts), ``misnamed`` (the answer under another file name:
  refused at collect, and named) submit before the due date;
* ``racer`` submits wrong's answer, then watches its submission folder (inotify) and, 20 ms
  after collect opens it, swaps the notebook for a link to ``honest``'s collected notebook:
  graded with its own work (collect copied it once, before) or refused, never honest's;
* ``late`` submits after it; ``backdated`` makes its submission folder by hand after it,
  with a name and a timestamp.txt an hour before it (late all the same: collect takes the
  time from the exchange); ``absent`` never submits.

``hostile``'s attacks on nbgrader's filesystem exchange, each an inbound entry refused and
named while the rest of the class is collected: a name with a '+' too many (nbgrader
collected it as the student ``<me>+zz``, through links to a classmate's notebook and the
gradebook), a fake student ``zz+y`` and a proper name whose secret is a link to a
classmate's collected secret (forged feedback), a timestamp that does not parse, a dangling
link (its old ``.refused-`` name taken in advance), 1,100 nested folders, a sparse 101 MB
file, a link to /dev/zero, a FIFO, a folder closed to the instructor, and a link as the
whole submission folder.

Each learner step runs as that learner's account (``setpriv``), through nbgrader's exchange.
The instructor (their own account too) collects, autogrades in the bubblewrap sandbox (two
at a time), generates and returns feedback. Every learner fetches their own feedback and then
fails to read anyone else's home, the exchange's inbound and feedback folders, and the
instructor's course (gradebook, grades.csv, submissions).

Asserted: every grade, the lateness, every refusal and its reason, each feedback page's
owner and its equality with the instructor's page for that learner, the exchange's feedback
folder holding exactly one page per collected learner (named by its own secret), the modes
that keep one learner out of another's work, and the Canvas export of the class. Runs as
root only (CI): it needs useradd and setpriv.
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import pwd
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from chromium import find_chromium
from conftest import ROOT, free_port_block, project_python
from nbfixtures import LESSONS, reference_source, set_solution, write_lessons

from kvstaff import hub
from kvstaff.grader.canvas import canvas_rows

A = "01_fixture"
PROXY = ROOT / "node_modules" / ".bin" / "configurable-http-proxy"
PREFIX = "kvt-"
INSTRUCTOR = f"{PREFIX}teach"
KINDS = (
    "honest",
    "wrong",
    "hostile",
    "resub",
    "misnamed",
    "late",
    "absent",
    "racer",
    "backdated",
)
LEARNERS = {k: f"{PREFIX}{k}" for k in KINDS}

pytestmark = [
    pytest.mark.second_stage,  # CI's second stage: make test-course
    pytest.mark.grading,
    # each a failure, not a skip, in CI (tests/pieces.py)
    pytest.mark.needs("root", "bubblewrap", "account tools", "npm assets"),
]


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
        if {"hostile", "wrong"} <= set(self.learners):
            self.set_up_attack = self.link_in_the_exchange_root()
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

    def link_in_the_exchange_root(self) -> dict:
        """Attack 6: before the exchange is prepared, a learner puts a link where the
        course's folder goes (the root is world-writable), to a classmate's home; root's
        set-up must refuse it, changing nothing through it."""
        self.exchange.mkdir()
        os.chmod(self.exchange, 0o1777)
        victim = self.home(self.learners["wrong"])
        link = self.exchange / hub.COURSE_ID
        attacker = self.learners["hostile"]
        argv = ["setpriv", f"--reuid={attacker}", f"--regid={attacker}", "--clear-groups"]
        subprocess.run([*argv, "ln", "-s", str(victim), str(link)], check=True)
        out = {"link_owner": link.lstat().st_uid, "refused": ""}
        try:
            hub.prepare_exchange(self.exchange, self.instructor)
        except hub.ExchangeError as err:
            out["refused"] = str(err)
        st = victim.stat()
        out["victim"] = (st.st_uid, stat.S_IMODE(st.st_mode), sorted(os.listdir(victim)))
        link.unlink()
        return out

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
            course=str(h.course),
        )
        for k in ("wrong", "hostile", "resub", "misnamed")
    }
    # submits, then waits, watching its submission folder, for collect to open it
    target = h.course / "submitted" / LEARNERS["honest"] / A / f"{A}.ipynb"
    racer = h.act(
        LEARNERS["racer"], "learn", kind="racer", exchange=str(h.exchange), target=str(target)
    )
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
    claim = (due - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    late = {
        k: h.act(LEARNERS[k], "learn", kind=k, exchange=str(h.exchange), claim=claim)
        for k in ("late", "backdated")
    }
    out["late"] = {k: h.result(p) for k, p in late.items()}
    ready = h.home(LEARNERS["racer"]) / "race-ready"
    for _ in range(600):  # the racer watches before collect begins
        if ready.exists() or racer.poll() is not None:
            break
        time.sleep(0.1)
    assert ready.exists(), h.result(racer)
    phase("learners fetch and submit (s)")

    h.spawn(LEARNERS["honest"])  # starts while the instructor grades
    out["grade"] = h.result(
        h.act(INSTRUCTOR, "grade", roster=str(h.roster_path), due=due.isoformat(), **paths),
        timeout=400,
    )
    out["race"] = h.result(racer, timeout=60)
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
        subprocess.run(["rm", "-rf", str(base)])  # 1,100 nested folders: not shutil.rmtree
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
    for kind, res in [*out["learn"].items(), *out["late"].items(), ("racer", out["race"])]:
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


def race_outcome(h: ClassHub) -> str:
    """'collected' (its own notebook, copied before the swap) or 'refused' (the swap landed
    while collect copied the folder): either is right; the classmate's work never is."""
    row = h.out["grade"]["rows"][LEARNERS["racer"]]
    return "collected" if row["status"] == "graded" else "refused"


def test_every_grade(class_hub):
    rows = class_hub.out["grade"]["rows"]
    got = {k: (rows[u]["status"], rows[u]["score"]) for k, u in LEARNERS.items()}
    racer = got.pop("racer")
    assert got == {
        "honest": ("graded", "3.0"),  # through the hub
        "wrong": ("graded", "1.0"),  # softmax right (1 point), attend wrong (0 of 2)
        "hostile": ("FLAGGED", ""),  # reached for the gradebook: no number, a person looks
        "resub": ("graded", "3.0"),  # the stubs first, the answer later: the latest counts
        "misnamed": ("no submission", "0.0"),  # refused at collect: the wrong file name
        "late": ("graded", "3.0"),
        "absent": ("no submission", "0.0"),
        "backdated": ("graded", "3.0"),  # graded, and late (below)
    }, got
    # its own answer (1 point), never the classmate's it linked to (3 points)
    assert racer in {("graded", "1.0"), ("no submission", "0.0")}, racer
    assert rows[LEARNERS["hostile"]]["needs_review"] == "yes"
    assert "sqlite3" in rows[LEARNERS["hostile"]]["notes"]
    assert all(
        rows[u]["sandbox"] == "bubblewrap"
        for k, u in LEARNERS.items()
        if rows[u]["status"] != "no submission"
    )


def test_the_late_submissions_are_late_and_the_others_are_not(class_hub):
    late = class_hub.out["grade"]["late"]
    assert late[LEARNERS["late"]] > 0
    assert late[LEARNERS["backdated"]] > 0  # made after the due date, claiming before it
    on_time = ["honest", "wrong", "hostile", "resub"]
    if race_outcome(class_hub) == "collected":
        on_time.append("racer")
    assert all(late[LEARNERS[k]] == 0 for k in on_time), late


def test_attack5_a_backdated_submission_gets_the_exchanges_time(class_hub):
    h = class_hub
    claim = h.out["late"]["backdated"]["backdated"]["claim"]
    stamp = (h.course / "submitted" / LEARNERS["backdated"] / A / "timestamp.txt").read_text()
    assert stamp != claim and stamp > claim  # same format: the strings sort as the times
    notes = [ln for ln in h.out["grade"]["lines"] if ln.startswith("NOTE ")]
    assert any(f"claims {claim}; the exchange records {stamp}" in ln for ln in notes), notes


def refusals(h: ClassHub) -> dict[str, str]:
    """entry name -> why, for every refusal collect returned."""
    out = {}
    for line in h.out["grade"]["refused"]:
        name, _, why = line.partition(": ")
        assert name not in out, line
        out[name] = why
    return out


def test_a_forged_submission_in_another_learners_name_is_refused(class_hub):
    refused = refusals(class_hub)
    forged = class_hub.out["learn"]["hostile"]["forged"]
    assert f"by the account '{LEARNERS['hostile']}'" in refused[forged]
    stranger = class_hub.out["learn"]["hostile"]["stranger"]
    assert "unknown learner 'kvt-nobody'" in refused[stranger]
    # nor could the forger list the inbound folder to find anyone's real submission
    assert class_hub.out["learn"]["hostile"]["listed_inbound"] is None


def test_a_submission_under_the_wrong_file_name_is_refused_and_named(class_hub):
    mine = {n: w for n, w in refusals(class_hub).items() if n.startswith(LEARNERS["misnamed"])}
    assert len(mine) == 1, mine
    (why,) = mine.values()
    assert f"no {A}.ipynb in it" in why and "my_answers.ipynb" in why


def test_attacks_1_2_4_each_entry_is_refused_with_its_reason_and_the_class_collected(class_hub):
    h = class_hub
    made = dict(h.out["learn"]["hostile"]["attacks"])
    taken = made.pop("taken refused name")
    victim = h.course / "submitted" / LEARNERS["wrong"] / A
    expected = {
        "plus in the name": "5 '+'-separated fields, not 4",  # attack 1
        "fake student zz+y": "5 '+'-separated fields, not 4",  # attack 2
        "secret linked": f"'submission_secret.txt' is a symbolic link (to {victim}/",
        "bad timestamp": "the timestamp '2026-02-30 25:61:00.000000 UTC' does not parse",
        "dangling link": "'gone' is a symbolic link (to ",
        "1,100 nested folders": "folders nested more than 8 deep",
        "sparse 101 MB": "'big.bin' is 96.3 MiB (more than 20 MiB)",
        "link to /dev/zero": f"'{A}.ipynb' is a symbolic link (to /dev/zero)",
        "a FIFO": "'pipe' is a FIFO, not a plain file",
        "a closed folder": "the folder cannot be read",
        "a link as the folder": f"it is a symbolic link (to {victim})",
    }
    assert set(made) == set(expected)
    refused = refusals(h)
    for label, name in made.items():
        assert expected[label] in refused.get(name, ""), (label, refused.get(name))
    others = {n for n in refused if n not in made.values()}
    race = {h.out["race"]["entry"]} if race_outcome(h) == "refused" else set()
    assert others == {
        h.out["learn"]["hostile"]["forged"],
        h.out["learn"]["hostile"]["stranger"],
        *[n for n in refused if n.startswith(LEARNERS["misnamed"] + "+")],
        *race,
    }
    # every refused entry moved aside, the taken name left as it was
    inbound = h.exchange / hub.COURSE_ID / "inbound"
    left = set(os.listdir(inbound))
    assert not left & set(refused), left & set(refused)
    assert len([n for n in left if n.startswith(".refused-")]) == len(refused) + 1
    assert os.listdir(inbound / taken) == ["full"]
    # only the roster's learners were collected, the hostile one with its own work
    assert {p.name for p in (h.course / "submitted").iterdir()} <= set(LEARNERS.values())
    theirs = (h.course / "submitted" / LEARNERS["hostile"] / A / f"{A}.ipynb").read_text()
    assert "sqlite3" in theirs
    seconds = h.out["grade"]["autograde_seconds"]["collect"]
    print(f"collect of the class ({len(refused)} refused): {seconds:.2f} s")


def test_attack3_the_race_gets_the_learners_own_work_or_a_refusal(class_hub):
    h = class_hub
    race = h.out["race"]
    assert race["swapped"], "the racer never saw collect open its folder"
    racer = h.course / "submitted" / LEARNERS["racer"] / A / f"{A}.ipynb"
    outcome = race_outcome(h)
    print(f"the race: {outcome}")
    if outcome == "collected":
        assert not racer.is_symlink()
        assert hashlib.sha256(racer.read_bytes()).hexdigest() == race["own_sha256"]
        # the exchange holds the link now: collect read it once, before
        entry = h.exchange / hub.COURSE_ID / "inbound" / race["entry"]
        assert (entry / f"{A}.ipynb").is_symlink()
    else:
        why = refusals(h)[race["entry"]]
        assert "symbolic link" in why or "changed while it was being collected" in why, why
        assert not racer.exists()


def test_attack6_root_set_up_followed_no_link(class_hub):
    got = class_hub.set_up_attack
    victim = class_hub.home(LEARNERS["wrong"])
    assert got["link_owner"] == pwd.getpwnam(LEARNERS["hostile"]).pw_uid
    assert f"key-vectors is a symbolic link (to {victim})" in got["refused"]
    uid, mode, names = got["victim"]
    assert (uid, mode) == (pwd.getpwnam(LEARNERS["wrong"]).pw_uid, 0o700)
    assert not {"inbound", "outbound", "feedback"} & set(names)


def test_each_learner_gets_their_own_feedback_and_no_one_elses(class_hub):
    h = class_hub
    rows = h.out["grade"]["rows"]
    for kind, user in LEARNERS.items():
        res = h.out["feedback"][kind]
        if rows[user]["status"] == "no submission":
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


def test_the_exchange_holds_one_page_per_collected_learner_under_its_own_secret(class_hub):
    h = class_hub
    feedback = h.exchange / hub.COURSE_ID / "feedback"
    expected = {}
    for user in LEARNERS.values():
        collected = h.course / "submitted" / user / A
        if collected.is_dir():
            secret = (collected / "submission_secret.txt").read_text()
            expected[hashlib.md5((secret + A).encode()).hexdigest() + ".html"] = user
    assert sorted(os.listdir(feedback)) == sorted(expected)
    for page, user in expected.items():
        assert filecmp.cmp(feedback / page, h.course / "feedback" / user / A / f"{A}.html", False)
        assert stat.S_IMODE((feedback / page).lstat().st_mode) == 0o644


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
        "racer": "1.0" if race_outcome(class_hub) == "collected" else 0,
        "backdated": "3.0",
    }
    assert [(r["student"], r["status"]) for r in review] == [(LEARNERS["hostile"], "FLAGGED")]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s"]))
