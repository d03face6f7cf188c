"""The class on Kubernetes (Zero to JupyterHub 4.4.0): the files in k8s/ made from the roster,
the two single-user images' build contexts, and the exchange's layout in its Job.

::

    python -m kvstaff.k8s values [--roster hub/roster.csv] [--check]
    python -m kvstaff.k8s image-context learner|instructor OUT/
    python -m kvstaff.k8s exchange --instructor NAME /srv/nbgrader/exchange   (the Job, as root)

``values`` writes what depends on the roster: ``k8s/config.yaml`` (the chart's values: the
roster's users and admins, the per-role hook ``k8s/hub_extra_config.py`` as
``hub.extraConfig``, one uid per account, resources, culling, the exchange's volume),
``k8s/accounts.yaml`` (a ConfigMap: ``/etc/passwd`` and ``/etc/group`` naming those uids in
every pod) and ``k8s/exchange-job.yaml`` (the Job that gives the exchange its modes);
``--check`` only says whether the files in k8s/ are what the roster makes (tests/test_k8s.py).

**One uid per account.** The exchange's modes (``inbound`` 2733, ``feedback`` 0711, ...) and
collect's rule (the learner is the owner of the submission folder) mean something only if
every pod runs as its own account. A uid here is a hash of the username
(:func:`account_uid`): the same name gets the same uid whatever the order of the roster or
whoever joins later, so files already in the exchange keep their owners. Two names whose
hashes meet are refused (:class:`kvstaff.roster.RosterError`, naming both); rename one.

**The images** are repo2docker build contexts (``requirements.txt``, ``runtime.txt``,
``postBuild``) assembled from an allow-list of the repository's paths
(:data:`IMAGE_PATHS`): the learners' holds ``attnlib/``, ``data/``, the learners' Lab
settings and what builds them, and nothing else, so ``staff/`` (the grader and lesson 05's
answer keys), ``notebooks/`` (the solutions) and ``tests/`` are not left out by a deletion that
could be forgotten: they were never copied in. The requirements are the repository's pins
(:func:`image_requirements`).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from kvstaff.exchange import DEFAULT_EXCHANGE, EXCHANGE_LAYOUT, check_exchange, prepare_exchange
from kvstaff.roster import ACCOUNT_MARK, COURSE_ID, Roster, RosterError, read_roster

__all__ = [
    "ACCOUNTS_CONFIGMAP",
    "CHART_VERSION",
    "COURSE_DIR",
    "CPU_GUARANTEE",
    "CPU_LIMIT",
    "EXCHANGE_CLAIM",
    "IMAGE_PATHS",
    "MEMORY_GUARANTEE",
    "MEMORY_LIMIT",
    "account_uid",
    "accounts",
    "generated_files",
    "image_context",
    "image_requirements",
    "unknown_fields",
    "values",
]

ROOT = Path(__file__).resolve().parents[2]  # the checkout (staff/kvstaff/k8s.py)
K8S = ROOT / "k8s"
CHART_VERSION = "4.4.0"  # Zero to JupyterHub, k8s/chart-4.4.0/PROVENANCE.md
CHART_JUPYTERHUB = "5.5.0"  # the chart's hub (its appVersion): the images' jupyterhub-singleuser

# --- what a course sets (placeholders until then) ---------------------------------------------
IMAGE_REGISTRY = "registry.example.org/key-vectors"  # COURSE: where the two images are pushed
IMAGE_TAG = "0.1.0"  # COURSE: the tag they are built with
# Resources of every single-user pod. PLACEHOLDERS matching the local hub's learner limits
# (hub/jupyterhub_config.py: 4 GiB, one core), to be set from measurement. KubeSpawner reads
# "1G" as 2**30 bytes. CPU_GUARANTEE is given because Kubernetes makes the request equal to
# the limit when only a limit is set: one whole core reserved per learner.
MEMORY_GUARANTEE = "1G"
MEMORY_LIMIT = "4G"
CPU_GUARANTEE = 0.1
CPU_LIMIT = 1.0
CULL_TIMEOUT = 3600  # seconds without activity before a server is stopped
CULL_EVERY = 300

# --- names shared by the files in k8s/ ----------------------------------------------------------
COURSE_DIR = "/srv/key-vectors"  # the course in both images (repo2docker --target-repo-dir)
HOME = "/home/jovyan"  # the chart's home volume (singleuser.storage.homeMountPath)
EXCHANGE_CLAIM = "key-vectors-exchange"  # k8s/exchange-pvc.yaml
EXCHANGE_SUBPATH = "exchange"  # the exchange is this folder of the volume, never its root
ACCOUNTS_CONFIGMAP = "key-vectors-accounts"  # k8s/accounts.yaml
UID_BASE, UID_SPAN = 2**20, 2**30  # uids in [2**20, 2**20 + 2**30): none of a system's own

# Paths of the repository each image is built from (git's tracked and unignored files under
# them). The learners' holds no staff/, notebooks/, tests/ or answer key: none is named here.
_LEARNER = (
    "attnlib",
    "data",
    "pyproject.toml",  # its readme, README.md, is k8s/images/learner/README.md: the course's
    "jupyter/learner",  # README quotes nbgrader's solution markers
    "jupyter/lab-settings",
    "jupyter/hub-learner",
    "tools/lab_settings.py",
)
IMAGE_PATHS = {
    "learner": _LEARNER,
    "instructor": (
        *_LEARNER,
        "README.md",
        "staff",  # kvstaff: the grader, the answer keys, the instructor's steps
        "notebooks",  # the instructor's lessons (releases are made from them)
        "nbgrader_config.py",  # jupyter/hub-instructor/nbgrader_config.py loads it
        "jupyter/hub-instructor",
        "jupyter/staff",
        "hub",
        "tools",
    ),
}
# Pins of requirements.txt the images do without: the tests' and linters', and KubeSpawner's
# (it runs in the chart's hub image, not in a user's server).
IMAGE_LEAVES_OUT = {
    "pytest",
    "pytest-xdist",
    "pytest-timeout",
    "nbval",
    "hypothesis",
    "ruff",
    "jupyterhub-kubespawner",
    "kubernetes-asyncio",
    "escapism",
    "python-slugify",
    "text-unidecode",
}
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


# ---- accounts -----------------------------------------------------------------------------------


def account_uid(username: str) -> int:
    """The uid of a roster account in every pod: a hash of the name, the same in every roster.

    Parameters
    ----------
    username : str
        A roster username (``kvstaff.roster`` has checked it).

    Returns
    -------
    int
        A uid in ``[2**20, 2**20 + 2**30)``: above every system's and image's own accounts.
    """
    digest = hashlib.sha256(f"{COURSE_ID}:{username}".encode()).digest()
    return UID_BASE + int.from_bytes(digest[:8], "big") % UID_SPAN


def accounts(roster: Roster) -> dict[str, dict]:
    """Username -> ``{"role", "uid"}`` for every person of the roster, in its order.

    Raises
    ------
    RosterError
        Two usernames with one uid (a hash collision: about one class in a thousand of 1,500
        learners meets one); the message names both.
    """
    out: dict[str, dict] = {}
    owner: dict[int, str] = {}
    for p in roster.people:
        uid = account_uid(p.username)
        if uid in owner:
            raise RosterError(
                f"roster {roster.path}: {owner[uid]!r} and {p.username!r} would share uid {uid} "
                "on Kubernetes (kvstaff.k8s.account_uid); rename one of them"
            )
        owner[uid] = p.username
        out[p.username] = {"role": p.role, "uid": uid}
    return out


def _passwd_and_group(table: dict[str, dict]) -> tuple[str, str]:
    """/etc/passwd and /etc/group of every pod: the image's own accounts and the roster's."""
    passwd = [
        "root:x:0:0:root:/root:/bin/bash",
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
        f"jovyan:x:1000:1000:the image's files:{HOME}:/bin/bash",
    ]
    group = ["root:x:0:", "users:x:100:", "nogroup:x:65534:", "jovyan:x:1000:"]
    for name, a in table.items():
        passwd.append(
            f"{name}:x:{a['uid']}:{a['uid']}:{ACCOUNT_MARK}, {a['role']}:{HOME}:/bin/bash"
        )
        group.append(f"{name}:x:{a['uid']}:")
    return "\n".join(passwd) + "\n", "\n".join(group) + "\n"


# ---- the chart's values and the manifests -------------------------------------------------------


def image_name(role: str) -> str:
    """``REGISTRY/key-vectors-ROLE:TAG``, the image of one role."""
    return f"{IMAGE_REGISTRY}-{role}:{IMAGE_TAG}"


def _pod_mounts() -> tuple[list[dict], list[dict]]:
    volumes = [
        {"name": "exchange", "persistentVolumeClaim": {"claimName": EXCHANGE_CLAIM}},
        {"name": "accounts", "configMap": {"name": ACCOUNTS_CONFIGMAP}},
    ]
    mounts = [
        {"name": "exchange", "mountPath": DEFAULT_EXCHANGE, "subPath": EXCHANGE_SUBPATH},
        {"name": "accounts", "mountPath": "/etc/passwd", "subPath": "passwd", "readOnly": True},
        {"name": "accounts", "mountPath": "/etc/group", "subPath": "group", "readOnly": True},
    ]
    return volumes, mounts


def values(roster: Roster, extra_config: str) -> dict:
    """The chart's values for the class (k8s/config.yaml).

    Parameters
    ----------
    roster : Roster
        Who is in the class.
    extra_config : str
        The per-role hook's source (k8s/hub_extra_config.py), put in as ``hub.extraConfig``.

    Returns
    -------
    dict
        Only keys the chart documents (tests/test_k8s.py validates the chart's values merged
        with these against its schema).
    """
    table = accounts(roster)
    volumes, mounts = _pod_mounts()
    return {
        "hub": {
            "config": {
                # COURSE: the university's sign-in. Until these placeholders are real nobody
                # can sign in (the chart's default, the dummy authenticator, lets anyone in).
                "JupyterHub": {"authenticator_class": "generic-oauth"},
                "GenericOAuthenticator": {
                    "client_id": "REPLACE-with-the-client-id",
                    "oauth_callback_url": "https://hub.example.edu/hub/oauth_callback",
                    "authorize_url": "https://login.example.edu/oauth2/authorize",
                    "token_url": "https://login.example.edu/oauth2/token",
                    "userdata_url": "https://login.example.edu/oauth2/userinfo",
                    "username_claim": "preferred_username",
                    "scope": ["openid", "profile"],
                    "login_service": "the university",
                },
                "Authenticator": {
                    "allowed_users": list(table),
                    "admin_users": [p.username for p in roster.instructors],
                },
                "KubeSpawner": {
                    "automount_service_account_token": False,
                    "container_security_context": {
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "pod_security_context": {"fsGroupChangePolicy": "OnRootMismatch"},
                },
            },
            "extraConfig": {"keyVectors": extra_config},
        },
        "singleuser": {
            "image": dict(zip(("name", "tag"), image_name("learner").rsplit(":", 1), strict=True)),
            "defaultUrl": "/lab",
            "memory": {"guarantee": MEMORY_GUARANTEE, "limit": MEMORY_LIMIT},
            "cpu": {"guarantee": CPU_GUARANTEE, "limit": CPU_LIMIT},
            "storage": {
                "homeMountPath": HOME,
                "extraVolumes": volumes,
                "extraVolumeMounts": mounts,
            },
        },
        "cull": {"enabled": True, "timeout": CULL_TIMEOUT, "every": CULL_EVERY},
        "custom": {
            "keyVectors": {
                "course": COURSE_ID,
                "exchange": DEFAULT_EXCHANGE,
                "courseDir": COURSE_DIR,
                "images": {role: image_name(role) for role in ("learner", "instructor")},
                "accounts": table,
            }
        },
    }


def accounts_configmap(roster: Roster) -> dict:
    """The ConfigMap mounted at /etc/passwd and /etc/group in every pod and in the Job."""
    passwd, group = _passwd_and_group(accounts(roster))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ACCOUNTS_CONFIGMAP,
            "labels": {"app.kubernetes.io/part-of": COURSE_ID},
        },
        "data": {"passwd": passwd, "group": group},
    }


def exchange_job(roster: Roster) -> dict:
    """The one-off Job that makes the exchange with :data:`EXCHANGE_LAYOUT`'s owners and modes.

    It runs :func:`kvstaff.exchange.prepare_exchange` and ``check_exchange`` (what ``make hub``
    runs) as root, with only the capabilities they use, in the instructor's image, on the
    volume's root: the exchange is its folder ``exchange/``, the only part pods mount.
    """
    volumes, _ = _pod_mounts()
    instructor = roster.instructors[0].username
    parent = str(Path(DEFAULT_EXCHANGE).parent)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "key-vectors-exchange",
            "labels": {"app.kubernetes.io/part-of": COURSE_ID},
        },
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": "layout",
                            "image": image_name("instructor"),
                            "command": ["python", "-m", "kvstaff.k8s", "exchange"],
                            "args": ["--instructor", instructor, DEFAULT_EXCHANGE],
                            "securityContext": {
                                "runAsUser": 0,
                                "runAsGroup": 0,
                                "runAsNonRoot": False,
                                "allowPrivilegeEscalation": False,
                                "capabilities": {
                                    "drop": ["ALL"],
                                    # chown, chmod of the instructor's folders, the setgid bit
                                    "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
                                },
                            },
                            "resources": {"limits": {"cpu": "1", "memory": "512Mi"}},
                            "volumeMounts": [
                                {"name": "exchange", "mountPath": parent},
                                *[m for m in _pod_mounts()[1] if m["name"] == "accounts"],
                            ],
                        }
                    ],
                    "volumes": volumes,
                }
            },
        },
    }


class _Dumper(yaml.SafeDumper):
    """YAML with text of several lines as a literal block (the hook reads as Python)."""


def _str(dumper, text):
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)

_HEADER = """\
# Made by `python -m kvstaff.k8s values` from hub/roster.csv, k8s/hub_extra_config.py and
# staff/kvstaff/k8s.py: edit those, then run it again (tests/test_k8s.py fails until then).
"""
_CONFIG_HEADER = """\
# Zero to JupyterHub {chart}: the class's values.
#   helm upgrade --install key-vectors jupyterhub/jupyterhub --version {chart} \\
#     --namespace key-vectors --values k8s/config.yaml
# Before it: kubectl apply -f k8s/exchange-pvc.yaml -f k8s/accounts.yaml -f k8s/exchange-job.yaml
# COURSE placeholders (kvstaff.k8s): the sign-in (hub.config.GenericOAuthenticator; its
# client_secret goes in with --set or hub.existingSecret, never here), the images' registry
# and tag, and the resources (placeholders matching the local hub's limits until measured).
"""


def generated_files(roster: Roster) -> dict[Path, str]:
    """Path -> text of every file in k8s/ that the roster and the hook make."""
    hook = (K8S / "hub_extra_config.py").read_text(encoding="utf-8")
    head = _HEADER

    def dump(obj) -> str:
        return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=100)

    return {
        K8S / "config.yaml": head
        + _CONFIG_HEADER.format(chart=CHART_VERSION)
        + dump(values(roster, hook)),
        K8S / "accounts.yaml": head + dump(accounts_configmap(roster)),
        K8S / "exchange-job.yaml": head + dump(exchange_job(roster)),
    }


def unknown_fields(obj, model: str = "V1Pod", where: str = "") -> list[str]:
    """Every key of the manifest ``obj`` that the Kubernetes API's ``model`` does not have.

    Walks the kubernetes_asyncio models (KubeSpawner's client) by their ``attribute_map`` and
    ``openapi_types``: ``unknown_fields(job, "V1Job")``. Values are not checked, names are.
    """
    from kubernetes_asyncio.client import models

    if model.startswith("list["):
        return [
            e for i, v in enumerate(obj) for e in unknown_fields(v, model[5:-1], f"{where}[{i}]")
        ]
    if model.startswith("dict(") or not hasattr(models, model):
        return []  # a map of names (labels, data) or a plain value
    cls = getattr(models, model)
    if not isinstance(obj, dict):
        return [f"{where or '.'}: {type(obj).__name__} where a {model} belongs"]
    attr = {json: py for py, json in cls.attribute_map.items()}
    bad = []
    for key, value in obj.items():
        if key not in attr:
            bad.append(f"{where}.{key}: not a field of {model}")
        elif value is not None:
            bad += unknown_fields(value, cls.openapi_types[attr[key]], f"{where}.{key}")
    return bad


# ---- the images ---------------------------------------------------------------------------------


def image_requirements(text: str) -> str:
    """The image's requirements.txt from the repository's: every exact pin but
    :data:`IMAGE_LEAVES_OUT`; jupyterhub at the chart's hub version (a singleuser server of
    another major version than its hub warns of failed sign-ins)."""
    out = ["# Made by `python -m kvstaff.k8s image-context` from the repository's requirements.txt"]
    for line in text.splitlines():
        m = _REQ.match(line.strip())
        if not m:
            continue
        name = m.group(1).lower().replace("_", "-")
        if name in IMAGE_LEAVES_OUT:
            continue
        if name == "jupyterhub":
            note = f"the hub of Zero to JupyterHub {CHART_VERSION}"
            out.append(f"jupyterhub=={CHART_JUPYTERHUB}   # {note}")
            continue
        out.append(line.strip())
    return "\n".join(out) + "\n"


def image_files(role: str, root: Path = ROOT) -> list[str]:
    """The repository's files (tracked, or new and not ignored) under the role's allow-list."""
    res = subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
        ]
        + list(IMAGE_PATHS[role]),
        capture_output=True,
        check=True,
    )
    names = {n for n in res.stdout.decode().split("\0") if n}
    return sorted(n for n in names if (root / n).is_file())


def image_context(role: str, out: Path, root: Path = ROOT) -> list[str]:
    """Assemble the repo2docker build context of the ``role``'s image in ``out`` (new or empty).

    Parameters
    ----------
    role : {"learner", "instructor"}
    out : Path
        Where the context goes.
    root : Path
        The checkout it is made from.

    Returns
    -------
    list of str
        Every file of the context, relative to ``out``.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty: the context is made in a new folder")
    files = image_files(role, root)
    for rel in files:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, out / rel)
    for f in sorted((root / "k8s" / "images" / role).iterdir()):  # postBuild, runtime.txt, ...
        if (out / f.name).exists():
            raise FileExistsError(f"{f} and the repository's {f.name} would both be {out / f.name}")
        shutil.copy2(f, out / f.name)
        files.append(f.name)
    reqs = image_requirements((root / "requirements.txt").read_text(encoding="utf-8"))
    (out / "requirements.txt").write_text(reqs, encoding="utf-8")
    return sorted([*files, "requirements.txt"])


# ---- the command line ---------------------------------------------------------------------------


def exchange(root: Path, instructor: str) -> None:
    """The Job's step: :func:`prepare_exchange` then :func:`check_exchange` (both unchanged:
    the pod's /etc/passwd, from k8s/accounts.yaml, names the instructor's uid)."""
    prepare_exchange(root, instructor)
    check_exchange(root, instructor)
    for rel, (mode, owner) in EXCHANGE_LAYOUT.items():
        print(f"exchange {Path(root, rel)}: {mode:04o} {instructor if owner != 'root' else 'root'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvstaff.k8s", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("values", help="write k8s/config.yaml, accounts.yaml, exchange-job.yaml")
    v.add_argument("--roster", type=Path, default=ROOT / "hub" / "roster.csv")
    v.add_argument("--check", action="store_true", help="only say whether they are up to date")
    i = sub.add_parser("image-context", help="a role's repo2docker build context")
    i.add_argument("role", choices=sorted(IMAGE_PATHS))
    i.add_argument("out", type=Path)
    e = sub.add_parser("exchange", help="the exchange's folders and modes (as root, in the Job)")
    e.add_argument("--instructor", required=True)
    e.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    if args.command == "values":
        stale = []
        for path, text in generated_files(read_roster(args.roster)).items():
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.relative_to(ROOT))
                if not args.check:
                    path.write_text(text, encoding="utf-8")
        verb = "out of date" if args.check else "written"
        print(f"k8s: {', '.join(map(str, stale)) or 'nothing'} {verb}")
        return 1 if args.check and stale else 0
    if args.command == "image-context":
        files = image_context(args.role, args.out)
        print(
            f"{args.out}: {len(files)} files. Build with\n  jupyter-repo2docker --no-run "
            f"--target-repo-dir {COURSE_DIR} --image-name {image_name(args.role)} {args.out}"
        )
        return 0
    exchange(args.root, args.instructor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
