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
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - provided by JupyterHub's config loader

REPO = Path(__file__).resolve().parents[1]  # the course checkout this file is in
# The roster reader: kvstaff.roster imports the standard library only (attnlib, which would
# load torch into the hub, is never imported by it).
from kvstaff.roster import COURSE_ID, read_roster  # noqa: E402

VENV_BIN = Path(sys.executable).parent  # the course environment JupyterHub runs from
ROSTER = read_roster(os.environ.get("KV_HUB_ROSTER", REPO / "hub" / "roster.csv"))
STATE = Path(os.environ.get("KV_HUB_STATE", REPO / "build" / "hub"))
EXCHANGE = os.environ.get("KV_EXCHANGE", "/srv/nbgrader/exchange")
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
# The default spawner: each server is a process running as the system account of the same
# name (created from the roster), in its home folder (mode 0700).
c.JupyterHub.spawner_class = "localprocess"
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
