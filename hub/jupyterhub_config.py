"""JupyterHub configuration of the Key Vectors class hub (`make hub`; README, "A class hub").

One hub for one course: an instructor and learners from a roster (hub/roster.csv), each
signed in to their own JupyterLab server, running as their own system account, with
nbgrader's exchange between them. Started by `python -m kvstaff.hub start`, which
first creates the accounts and the exchange and then runs `jupyterhub -f` on this file; the
same file runs a real server (see the README for what to change: the authenticator, the
address, TLS).

Settings come from the environment, so that the test hub (tests/test_hub.py) and `make hub`
share this one file:

    KV_HUB_ROSTER  the roster CSV               (default hub/roster.csv)
    KV_EXCHANGE    nbgrader's exchange folder   (default /srv/nbgrader/exchange)
    KV_HUB_STATE   the hub's own files: its database, cookie secret, passwords (build/hub)
    KV_HUB_PORT    the port on 127.0.0.1        (default 8000)
    KV_HUB_AUTH    "shared" (one password per role, made in KV_HUB_STATE) or "pam" (the
                   accounts' own system passwords: a real server)
    KV_HUB_API_TOKEN  if set, a service "kv-course" holding this token may start and stop
                   servers and list users (the test drives the hub with it)
    KV_HUB_HOMES   the folder of the accounts' homes (default /home), hidden from learners

A learner's server runs in a view of its own, with limits (CourseSpawner below): the
checkout (lesson 05's answer keys in staff/, every solution in notebooks/, the git history),
any other folder outside the operating system's own (another copy of the course) and the
shared temporary folders are not there at all, and a fork bomb or a huge allocation
stops at that learner's limits. tests/test_hub_isolation.py runs this file's spawner as
real accounts and tries both.
"""

import asyncio
import os
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821 - provided by JupyterHub's config loader

REPO = Path(__file__).resolve().parents[1]  # the course checkout this file is in
# The roster reader and the spawner's pieces (a learner's view, limits, cgroups):
# kvstaff.roster and kvstaff.hub import the standard library only (attnlib, which would load
# torch into the hub, is never imported by them; the instructor's steps in kvstaff.hub import
# nbgrader inside themselves).
from kvstaff import hub as kvhub  # noqa: E402
from kvstaff.roster import COURSE_ID, read_roster  # noqa: E402

VENV_BIN = Path(sys.executable).parent  # the course environment JupyterHub runs from
ROSTER = read_roster(os.environ.get("KV_HUB_ROSTER", REPO / "hub" / "roster.csv"))
STATE = Path(os.environ.get("KV_HUB_STATE", REPO / "build" / "hub"))
EXCHANGE = os.environ.get("KV_EXCHANGE", "/srv/nbgrader/exchange")
HOMES = os.environ.get("KV_HUB_HOMES", "/home")
INSTRUCTORS = {p.username for p in ROSTER.instructors}

# --- where the hub listens and keeps its state ---------------------------------------------
# Only this machine can reach the local hub; a real server puts a TLS proxy (or
# c.JupyterHub.ssl_cert/ssl_key) in front and binds where its users reach it.
PORT = int(os.environ.get("KV_HUB_PORT", "8000"))
c.JupyterHub.bind_url = f"http://127.0.0.1:{PORT}"
# The hub talks to its proxy and to the servers on loopback too, on the two ports after
# PORT (not JupyterHub's fixed 8081 and 8001, so that two hubs can run side by side).
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = PORT + 1
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PORT + 2}"
# Its database (users, servers, tokens), cookie secret and pid file live in KV_HUB_STATE
# (mode 0700, made by kvstaff.hub), not in the folder the hub is started from.
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
# The proxy is configurable-http-proxy from npm, pinned in package.json (npm ci installs it).
c.ConfigurableHTTPProxy.command = [str(REPO / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
# Stop the proxy with the hub (the default leaves it running for a restart).
c.JupyterHub.cleanup_proxy = True
c.JupyterHub.cleanup_servers = True

# --- who may sign in -------------------------------------------------------------------------
# Exactly the roster: its learners and instructors; the instructors are the hub's admins.
c.Authenticator.allowed_users = {p.username for p in ROSTER.people}
c.Authenticator.admin_users = INSTRUCTORS
if os.environ.get("KV_HUB_AUTH", "shared") == "pam":
    # A real server: each account signs in with its own system password (set with passwd),
    # or replace this with the university's sign-in (an OAuthenticator, LTI for an LMS).
    c.JupyterHub.authenticator_class = "pam"
else:
    # The local hub: one password for every learner, a longer one for the instructor, both
    # made once in KV_HUB_STATE. Whoever has the learners' password can sign in as ANY
    # learner: for trying the class on one machine (127.0.0.1), never for a class.
    c.JupyterHub.authenticator_class = "shared-password"
    c.SharedPasswordAuthenticator.user_password = (STATE / "learner_password").read_text().strip()
    c.SharedPasswordAuthenticator.admin_password = (STATE / "admin_password").read_text().strip()

# --- each user's server ----------------------------------------------------------------------
# LocalProcessSpawner (each server a process running as the system account of the same name,
# made from the roster, in its home folder, mode 0700), with one change for learners: the
# preexec_fn its start() passes to Popen is kvhub.server_preexec, which, in the forked child
# and before it becomes the learner, puts it in its cgroup, in LEARNER_VIEW and under
# LEARNER_LIMITS. Kernels and terminals are the server's children: they inherit all three.
# Instructors get JupyterHub's own preexec_fn (the hub's view: the whole checkout).

# What a learner's server sees: the operating system's folders and nothing else. Each folder
# of `hide` is covered by an empty tmpfs owned by root (the options: its mode and the most it
# may hold, counted in the learner's memory). First every folder directly under / but the
# system's own (kvhub.SYSTEM_FOLDERS: /usr, /etc, /var, ...): /root, /srv, /opt, /mnt, and
# whatever holds this checkout or another copy of the course (a staff member's clone with
# its solutions in /srv or /work is not there); then what inside the system folders is
# shared between accounts. A copy of the course kept under /usr or /var stays visible: keep
# checkouts out of them.
HIDE = {folder: "mode=0755,size=1m" for folder in kvhub.beyond_the_system()}
HIDE |= {
    str(REPO): "mode=0755,size=1m",  # the checkout: staff/, notebooks/, tests/, build/, .git
    "/tmp": "mode=1777,size=512m",  # a private /tmp (others' scratch copies of lessons)
    "/var/tmp": "mode=1777,size=64m",
    "/dev/shm": "mode=1777,size=256m",
    HOMES: "mode=0755,size=1m",  # other homes are 0700 anyway; now they are not there
    str(STATE): "mode=0700,size=1m",  # the hub's database, cookie secret and passwords
}
# ...and these are bound back from where they are: the Python the course environment is made
# from (e.g. pyenv's, under /root) and the environment itself (this Python's venv), the
# learners' package and its data, the learners' Lab settings (all read-only), and nbgrader's
# exchange (as it is, with its modes); server_preexec adds the learner's own home. The venv
# still names kvstaff (an editable install pointing into staff/), which is not there.
LEARNER_VIEW = kvhub.View(
    hide=HIDE,
    read_only=(
        str(kvhub.python_prefix()),
        sys.prefix,
        *(str(REPO / p) for p in ("attnlib", "data", "jupyter/hub-learner")),
    ),
    writable=(EXCHANGE,),
    own_processes=True,  # its /proc lists the learner's own processes only (hidepid=2)
)
# Per learner (not the instructor, whose server runs the grader). These are caps, not
# reservations: 300 learners x 4 GiB is more than a machine has, but they are seldom all busy;
# what the caps prevent is one learner taking what the others and the grader need.
LEARNER_LIMITS = kvhub.ServerLimits(
    # every task (process or thread) of the account (RLIMIT_NPROC) and of the server's
    # cgroup (pids.max): a server with one lesson kernel is 18 (test_hub_isolation); a fork
    # bomb stops here
    processes=256,
    # all the server's processes together (the cgroup's memory limit): a lesson's kernel
    # peaks at 0.37-0.71 GiB run whole, but lesson 16's at 1.99 GiB (its per-position loss
    # over the whole play; tools/measure_server.py, with a server of 0.1 GiB), so the server
    # and lesson 16 with room to spare; past it the kernel that asks is killed, no one else
    memory=4 * 2**30,
    # each process (RLIMIT_AS): as in the grading sandbox (6 GiB: torch reserves address
    # space it never uses), so what runs here also grades; a 30 GB array is a MemoryError
    # at once, even where there are no cgroups
    address_space=6 * 2**30,
    # one core (the cgroup's CPU quota): a lesson runs on one thread (OMP_NUM_THREADS below)
    # in 5-16 s
    cpu=1.0,
    # the largest file a process may write (RLIMIT_FSIZE); disk space itself is not limited
    file_size=2 * 2**30,
)
# The learners' cgroups, under the hub's own cgroup (cgroup v1 or v2; without them the
# limits are LEARNER_LIMITS' rlimits only, and the hub says so when it starts).
CGROUPS = kvhub.Cgroups()
if CGROUPS.problem:
    print(f"kv hub: learners' cgroups: {CGROUPS.problem}", file=sys.stderr)


class CourseSpawner(LocalProcessSpawner):
    """LocalProcessSpawner; a learner's server (anyone not an instructor of the roster) in
    its own view, cgroup and limits. start() is LocalProcessSpawner's own."""

    def make_preexec_fn(self, name):
        if name in INSTRUCTORS:
            return super().make_preexec_fn(name)
        return kvhub.server_preexec(
            name,
            view=LEARNER_VIEW,
            limits=LEARNER_LIMITS,
            cgroups=CGROUPS.create(name, LEARNER_LIMITS),
            no_new_privileges=True,  # setuid programs (su, mount) raise nobody's rights
        )

    async def stop(self, now=False):
        await super().stop(now=now)
        if self.user.name not in INSTRUCTORS:  # what outlived the server, and its cgroups
            await asyncio.to_thread(CGROUPS.close, self.user.name)


c.JupyterHub.spawner_class = CourseSpawner
# The course environment's own single-user server (JupyterLab, the course kernel, nbgrader).
c.Spawner.cmd = [str(VENV_BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
# A server gets this long to start (JupyterLab and nbgrader's extensions load in seconds).
c.Spawner.http_timeout = 60
c.Spawner.start_timeout = 90
# The course environment first on PATH (its python, jupyter and nbgrader in a terminal).
c.Spawner.environment = {"PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def per_role(spawner):
    """Learners get the learners' Lab (the Assignments panel only: fetch, submit, fetch
    feedback); instructors the staff Lab (formgrader, course list, Validate, Create
    Assignment) with the course folder in their home. Both see the class's exchange."""
    name = spawner.user.name
    role = "hub-instructor" if name in INSTRUCTORS else "hub-learner"
    config_path = [REPO / "jupyter" / role]
    if name in INSTRUCTORS:
        config_path.append(REPO / "jupyter" / "staff")  # nbgrader's tools switched on
    spawner.environment["JUPYTER_CONFIG_PATH"] = os.pathsep.join(map(str, config_path))
    spawner.environment["KV_EXCHANGE"] = EXCHANGE
    spawner.environment["KV_COURSE_ID"] = COURSE_ID
    if name not in INSTRUCTORS:  # as many threads as the learner's cores; shown in the server
        spawner.environment["OMP_NUM_THREADS"] = str(max(1, int(LEARNER_LIMITS.cpu)))
        spawner.mem_limit = LEARNER_LIMITS.memory  # (MEM_LIMIT, CPU_LIMIT in its environment)
        spawner.cpu_limit = LEARNER_LIMITS.cpu


c.Spawner.pre_spawn_hook = per_role

# --- a service for scripts (the test, a course's own tooling) --------------------------------
TOKEN = os.environ.get("KV_HUB_API_TOKEN")
if TOKEN:
    c.JupyterHub.services = [{"name": "kv-course", "api_token": TOKEN}]
    c.JupyterHub.load_roles = [
        {
            "name": "kv-course",
            "scopes": ["list:users", "read:users", "admin:servers", "servers", "access:servers"],
            "services": ["kv-course"],
        }
    ]
