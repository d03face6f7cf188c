"""The hub's spawning side, without the rest of the hub (tests/test_hub_isolation.py).

Run as root in the hub's private view (as `kvstaff.hub start` runs JupyterHub). It loads
hub/jupyterhub_config.py as JupyterHub does (its settings from the environment:
KV_HUB_ROSTER, KV_HUB_STATE, KV_EXCHANGE, KV_HUB_HOMES) and starts commands as the roster's
accounts through the spawner class it configures: the pre_spawn_hook, then start() (for
CourseSpawner that is LocalProcessSpawner's own: one Popen with the spawner's preexec_fn
and environment), later stop(). A command started here therefore runs where that account's
hub server would run — its view, its limits, its cgroup, its environment — only the
command differs (a probe, a fork bomb, a Jupyter server).

JSON lines on stdin, one answer line each on stdout:

    {"op": "config"}                                    -> the spawner class and its cgroups
    {"op": "start", "key": K, "user": U, "cmd": [...]}  -> {"key": K, "pid": P}
    {"op": "wait", "key": K, "timeout": S}              -> {"key": K, "returncode": RC|null}
    {"op": "stop", "key": K}                            -> {"key": K, "returncode": RC}
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

from traitlets.config import Config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "hub" / "jupyterhub_config.py"


def load_config() -> tuple[Config, dict]:
    """Execute the hub's configuration file as JupyterHub's loader does (``c`` from
    ``get_config()``); returns the config and the file's namespace."""
    cfg = Config()
    namespace = {"get_config": lambda: cfg, "__file__": str(CONFIG)}
    exec(compile(CONFIG.read_text(), str(CONFIG), "exec"), namespace)  # noqa: S102
    return cfg, namespace


def make_spawner(cfg: Config, user: str):
    """The configured spawner class for ``user``, with the few hub objects its
    environment needs (no hub is running: the URLs lead nowhere)."""
    hub = SimpleNamespace(
        public_host="", api_url="http://127.0.0.1:9/hub/api", base_url="/hub/", url="/hub/"
    )
    who = SimpleNamespace(name=user, escaped_name=user, url=f"/user/{user}/")
    return cfg.JupyterHub.spawner_class(config=cfg, user=who, hub=hub)


def main() -> None:
    answers = os.fdopen(os.dup(1), "w")  # the answers; what the commands print goes to stderr
    os.dup2(2, 1)
    cfg, namespace = load_config()
    spawners: dict[str, object] = {}
    for line in sys.stdin:
        req = json.loads(line)
        op, key = req["op"], req.get("key")
        out: dict = {"key": key}
        if op == "config":
            cls = cfg.JupyterHub.spawner_class
            out |= {
                "spawner": f"{cls.__module__}.{cls.__qualname__}",
                "bases": [b.__qualname__ for b in cls.__mro__],
                "start": cls.start.__qualname__,
                "cgroups_problem": namespace["CGROUPS"].problem,
                "cgroups": {c: [k, str(p)] for c, (k, p) in namespace["CGROUPS"].trees.items()},
            }
        elif op == "start":
            sp = make_spawner(cfg, req["user"])
            sp.run_pre_spawn_hook()
            sp.cmd = req["cmd"]
            asyncio.run(sp.start())
            spawners[key] = sp
            out["pid"] = sp.pid
        elif op == "wait":
            try:
                out["returncode"] = spawners[key].proc.wait(timeout=req.get("timeout", 60))
            except Exception:  # noqa: BLE001 - still running
                out["returncode"] = None
        elif op == "stop":
            sp = spawners.pop(key)
            asyncio.run(sp.stop())
            out["returncode"] = sp.proc.returncode if sp.proc else None
        print(json.dumps(out), file=answers, flush=True)
    for sp in spawners.values():  # stdin closed: stop whatever is left
        asyncio.run(sp.stop(now=True))


if __name__ == "__main__":
    os.umask(0o022)
    main()
