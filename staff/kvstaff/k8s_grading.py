"""Grading at scale on Kubernetes: one Indexed Job per lesson, and the class's sizing.

    python -m kvstaff.k8s_grading job 03_attention --learners 1500 --cores 4 > job.yaml
    python -m kvstaff.k8s_grading sizing            # the README's node counts, computed

**The Job** (:func:`grading_job`): ``completionMode: Indexed``, one pod per shard of the
class (:mod:`kvstaff.grader.shards`), each running ``python -m kvstaff.gradebook autograde
LESSON --shard K/N --jobs C`` with ``K`` its completion index, in the instructor's image
(the grader, the notebooks), on the instructor's course folder: the home volume of the
instructor's server (``claim-<instructor>``, the chart's default name), mounted where their
server mounts it. The exchange is not mounted: ``collect`` (in the instructor's server) has
already copied what is graded into ``submitted/``, and the pod needs nothing else of it.
After the Job: ``python -m kvstaff.gradebook merge-shards LESSON --shards N``.

How many shards: a submission takes 1/:data:`GRADING_RATE` core-minutes (measured, README
"Class-size figures"), so ``learners / (GRADING_RATE * cores)`` minutes on one pod of
``cores`` cores; the class is cut into ``ceil(learners / (GRADING_RATE * minutes * cores))``
shards to finish in ``minutes`` (:func:`shards_for`), all running at once unless
``parallelism`` says fewer.

**What bubblewrap needs of the pod** (checked on this machine at the process level by
tests/test_k8s_grading.py, not on a cluster). The grader runs as a non-root uid, so
bubblewrap makes a user namespace and needs no capability of its own; but then

* the container's seccomp profile must let it: ``RuntimeDefault`` (containerd's and Docker's
  default) refuses ``unshare``/``clone`` with namespace flags to a process without
  CAP_SYS_ADMIN, so ``Unconfined`` (or a ``Localhost`` profile that allows them);
* its AppArmor profile must let it ``mount``: the runtime's default profile denies mount;
  ``Unconfined`` (or a Localhost profile), and on Ubuntu 23.10+ nodes the sysctl
  ``kernel.apparmor_restrict_unprivileged_userns=0`` (or an AppArmor profile granting
  ``userns``), and ``user.max_user_namespaces > 0`` anywhere;
* it must be able to mount a fresh ``/proc`` for the kernel's pid namespace, which the kernel
  refuses while any path of the container's ``/proc`` is masked — and the runtime masks
  several (``procMount: Default``). ``procMount: Unmasked`` lifts that, but the API server
  accepts it only with ``hostUsers: false`` (a user namespace for the pod; its validation
  message, "`hostUsers` must be false to use `Unmasked`", as reported by others: no cluster
  here), whose uids are 0-65535 and whose volumes must support idmapped mounts (NFS does
  not).

Hence two profiles (``profile=``):

* ``"privileged"`` (the default, the one that fits this class): ``privileged: true`` with
  ``runAsNonRoot`` and the instructor's uid and group (:func:`kvstaff.k8s.account_uid`: the
  files it writes in the course folder are the instructor's, as from their server). The
  grader's processes hold no capability (a non-root uid's effective set is empty);
  ``allowPrivilegeEscalation`` cannot be false in a privileged container, so the image
  must carry no setuid program the grader would run. The learners' kernels run inside
  bubblewrap: their own user, mount, pid, network and IPC namespaces, no capability on the
  node, no_new_privs, every mount nosuid, a minimal ``/dev`` of bubblewrap's own (not the
  node's devices the privileged container sees). What privileged adds over the second
  profile is the node's devices and unmasked ``/proc`` and ``/sys`` for the grader, which
  is trusted (a privileged container also runs without the runtime's seccomp and AppArmor
  profiles and its masked paths: the three needs above).
* ``"userns"``: no privilege at all: ``hostUsers: false``, ``procMount: Unmasked``,
  seccomp and AppArmor ``Unconfined``, every capability dropped, no privilege escalation.
  Only where the course folder's volume supports idmapped mounts (a block volume: ext4,
  xfs, btrfs) and its owner's uid is below 65536 — this class's instructor uid (from
  kvstaff.k8s, above 2**20) is not, so :func:`grading_job` refuses that combination.

Both need Pod Security level ``privileged`` where the Job runs (``baseline`` forbids an
unconfined seccomp profile and an unmasked /proc as well as privileged containers), and the
Job runs in the hub's namespace, where the instructor's volume claim is (a claim is
namespaced). Set that level there and the admission check no longer guards the learners'
pods (what they run with is still their own securityContext, kvstaff.k8s), or admit this
Job alone with a policy engine (by its ``app.kubernetes.io/component: grading`` label).

Either way: no service-account token, ``restartPolicy: Never``, each shard retried once
(``backoffLimitPerIndex: 1``: a rerun starts its shard afresh from the class's gradebook),
the finished Job kept :data:`KEEP_FINISHED` seconds for its logs, resources equal to requests
(Guaranteed QoS: ``cores`` cores and :func:`pod_memory` bytes), a private ``/tmp`` (the
sandboxes' folders), a read-only root file system.

**Sizing** (:func:`class_sizing`): nodes for a class from the measured memory of one
learner's server with lesson 16's kernel (``tools/measure_server.py``), the hub's server
start rate (``tools/time_class_hub.py``) and the grading rate (``tools/time_grading.py``).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

# --- measured (README "Class-size figures"; the commands that give them) -------------------
GRADING_RATE = 9.3  # submissions per core-minute: tools/time_grading.py, 03_attention, sandboxed
SERVER_START_S = 7.4  # s from the hub's API call to a server ready (7.0-7.4): time_class_hub.py
SERVER_START_CORE_S = 172 * 2 / 30  # 30 servers at once: 172 s on 2 cores = 11.5 core-s each
# tools/measure_server.py (3 runs, lesson 16 run whole in a kernel the server started):
SERVER_RSS = 107 * 2**20  # JupyterLab with the learner's settings: peak RSS 107 MiB
KERNEL_PEAK_RSS = 1991 * 2**20  # lesson 16's kernel: peak RSS (VmHWM) 1,989-1,991 MiB
KERNEL_RSS_AFTER = 780 * 2**20  # its resident set once the lesson has run: 499-780 MiB
KERNEL_CPU_S = 31.9  # CPU seconds of the kernel for the whole lesson: 31.1-31.9

# --- the Job ------------------------------------------------------------------------------------
KEEP_FINISHED = 7 * 86400  # seconds a finished Job (and its pods' logs) is kept
SANDBOX_TMP = 512 * 2**20  # each kernel's private /tmp (memory-backed): kvstaff.sandbox.Limits
GRADER_MEMORY = 2**30  # the driver and nbgrader beside the kernels
INSTRUCTOR_HOME = "/home/jovyan"  # the chart's singleuser.storage.homeMountPath
COURSE_FOLDER = "key-vectors"  # the course folder in the instructor's home (as on the local hub)
COURSE_DIR = "/srv/key-vectors"  # the checkout in the instructor's image (kvstaff.k8s.COURSE_DIR)
PROFILES = ("privileged", "userns")
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"  # the pod's index (Indexed Job)


def shards_for(learners: int, cores: int, minutes: float, rate: float = GRADING_RATE) -> int:
    """Pods of ``cores`` cores that grade ``learners`` submissions in ``minutes`` at ``rate``
    submissions per core-minute: ``ceil(learners / (rate * minutes * cores))``, at least 1."""
    if learners < 0 or cores < 1 or minutes <= 0 or rate <= 0:
        raise ValueError("learners >= 0, cores >= 1, minutes > 0 and rate > 0")
    return max(1, math.ceil(learners / (rate * minutes * cores)))


def pod_memory(cores: int) -> int:
    """Bytes one grading pod of ``cores`` workers may use: per worker the largest lesson
    kernel measured (lesson 16) and its private /tmp full, plus the grader."""
    return cores * (KERNEL_PEAK_RSS + SANDBOX_TMP) + GRADER_MEMORY


def _quantity(n: int) -> str:
    return f"{math.ceil(n / 2**20)}Mi"


def _security(profile: str, uid: int) -> tuple[dict, dict, dict]:
    """(pod spec fields, pod securityContext, container securityContext) of ``profile``."""
    ids = {"runAsUser": uid, "runAsGroup": uid, "runAsNonRoot": True}
    # the home volume's group is the instructor's own (as kvstaff.k8s sets fs_gid for their
    # server); the kubelet changes it only when the volume's root does not match
    pod = {**ids, "fsGroup": uid, "fsGroupChangePolicy": "OnRootMismatch"}
    if profile == "privileged":
        container = {"privileged": True, **ids, "readOnlyRootFilesystem": True}
        return {}, pod, container
    if uid > 65535:
        raise ValueError(
            f"profile 'userns': uid {uid} is outside a pod user namespace's 0-65535; "
            "use the 'privileged' profile or a course folder owned by a uid below 65536"
        )
    unconfined = {"type": "Unconfined"}
    container = {
        **ids,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "procMount": "Unmasked",
        "seccompProfile": unconfined,
        "appArmorProfile": unconfined,
        "readOnlyRootFilesystem": True,
    }
    return {"hostUsers": False}, pod, container


@dataclass(frozen=True)
class JobPlan:
    """What :func:`grading_job` computed: shards, cores and memory per pod, expected minutes."""

    shards: int
    cores: int
    memory: int
    minutes_per_shard: float


def plan(learners: int, cores: int, minutes: float, shards: int | None = None) -> JobPlan:
    n = shards or shards_for(learners, cores, minutes)
    per_shard = math.ceil(learners / n) / (GRADING_RATE * cores)
    return JobPlan(n, cores, pod_memory(cores), round(per_shard, 1))


def grading_job(
    lesson: str,
    *,
    shards: int,
    image: str,
    uid: int,
    cores: int = 4,
    parallelism: int | None = None,
    instructor: str = "kv-instructor",
    course_claim: str | None = None,
    profile: str = "privileged",
    course_access: str = "ReadWriteOnce",
    deadline_s: int = 4 * 3600,
    namespace: str | None = None,
) -> dict:
    """The Indexed Job grading ``lesson`` in ``shards`` pods of ``cores`` cores (a dict,
    as ``kubectl apply`` reads it), as ``uid`` (the course folder's owner).

    ``course_access``: the course volume's access mode. ``ReadWriteOnce`` (the chart's home
    volumes) is attached to one node at a time, so the pods are put together on one node
    (each pod's affinity to the others: the first one is placed freely) — stop the
    instructor's server while they run, or it may hold the volume on another node;
    ``ReadWriteMany`` lets them spread. ``deadline_s`` bounds the whole Job.

    Long: one literal manifest, every field of it chosen here.
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, not {profile!r}")
    if shards < 1 or cores < 1:
        raise ValueError("shards and cores are at least 1")
    pod_fields, pod_security, container_security = _security(profile, uid)
    claim = course_claim or f"claim-{instructor}"
    course = f"{INSTRUCTOR_HOME}/{COURSE_FOLDER}"
    memory = _quantity(pod_memory(cores))
    name = f"grade-{lesson.replace('_', '-').lower()}"
    labels = {
        "app.kubernetes.io/part-of": "key-vectors",
        "app.kubernetes.io/component": "grading",
        "key-vectors/lesson": lesson,
    }
    metadata = {"name": name, "labels": dict(labels)}
    if namespace:
        metadata["namespace"] = namespace
    container = {
        "name": "grade",
        "image": image,
        "workingDir": COURSE_DIR,
        "command": ["python", "-m", "kvstaff.gradebook", "autograde", lesson],
        # $(SHARD) is expanded by Kubernetes from the env below (no shell)
        "args": [
            f"--course={course}",
            f"--notebooks={COURSE_DIR}/notebooks",
            f"--jobs={cores}",
            f"--shard=$(SHARD)/{shards}",
        ],
        "env": [
            {
                "name": "SHARD",
                "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}
                },
            },
            {"name": "HOME", "value": INSTRUCTOR_HOME},
            {"name": "OMP_NUM_THREADS", "value": "1"},  # one thread per kernel, C kernels
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ],
        "resources": {
            "requests": {"cpu": str(cores), "memory": memory},
            "limits": {"cpu": str(cores), "memory": memory},
        },
        "securityContext": container_security,
        "volumeMounts": [
            {"name": "home", "mountPath": INSTRUCTOR_HOME},  # the course folder in it
            {"name": "tmp", "mountPath": "/tmp"},  # the sandboxes' folders
            {"name": "accounts", "mountPath": "/etc/passwd", "subPath": "passwd", "readOnly": True},
            {"name": "accounts", "mountPath": "/etc/group", "subPath": "group", "readOnly": True},
        ],
    }
    pod_spec = {
        **pod_fields,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security,
        "containers": [container],
        "volumes": [
            {"name": "home", "persistentVolumeClaim": {"claimName": claim}},
            {"name": "tmp", "emptyDir": {"sizeLimit": f"{2 * cores}Gi"}},
            {"name": "accounts", "configMap": {"name": "key-vectors-accounts"}},
        ],
    }
    if course_access == "ReadWriteOnce":
        together = {
            "labelSelector": {"matchLabels": dict(labels)},
            "topologyKey": "kubernetes.io/hostname",
        }
        pod_spec["affinity"] = {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [together]}
        }
    elif course_access != "ReadWriteMany":
        raise ValueError(f"course_access: ReadWriteOnce or ReadWriteMany, not {course_access!r}")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "completionMode": "Indexed",
            "completions": shards,
            "parallelism": min(parallelism or shards, shards),
            "backoffLimitPerIndex": 1,
            "ttlSecondsAfterFinished": KEEP_FINISHED,
            "activeDeadlineSeconds": deadline_s,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


# --- sizing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    cores: int
    memory: int  # bytes
    reserved: float = 0.1  # share of memory and cores the node keeps for itself (kubelet, system)

    @property
    def name(self) -> str:
        return f"{self.cores} cores / {self.memory // 2**30} GiB"

    @property
    def allocatable_memory(self) -> float:
        return self.memory * (1 - self.reserved)

    @property
    def allocatable_cores(self) -> float:
        return self.cores * (1 - self.reserved)


NODES = (Node(8, 32 * 2**30), Node(16, 64 * 2**30))
GIB = 2**30


def learner_memory() -> tuple[int, int]:
    """(guarantee, limit) of one learner's server, in bytes, from the measurement.

    Guarantee: the typical resident set of a server that has run lesson 16 (server plus
    the kernel afterwards), rounded up to a whole GiB. Limit: the peak (server plus the
    kernel's peak) with half again of headroom (a second notebook, a larger batch), rounded
    up to a whole GiB.
    """
    typical = SERVER_RSS + KERNEL_RSS_AFTER
    peak = SERVER_RSS + KERNEL_PEAK_RSS
    return math.ceil(typical / GIB) * GIB, math.ceil(1.5 * peak / GIB) * GIB


def class_sizing(
    learners: int,
    node: Node,
    *,
    cpu_guarantee: float = 0.1,
    spawn_limit: int = 64,
    grading_minutes: float = 10,
    grading_cores: int = 4,
) -> dict:
    """Nodes and times for a class of ``learners`` on nodes like ``node``.

    * ``user_nodes``: nodes for every learner's server at once, scheduled by its guarantee
      (memory or CPU, whichever needs more); ``peak_nodes``: if every learner's kernel
      peaked at once (the limits are not reservations).
    * ``start_minutes``: everyone arriving at once: the larger of the nodes' CPU for the
      server starts (:data:`SERVER_START_CORE_S` each, measured) and the hub's
      ``spawn_limit`` starts at a time (the chart's ``hub.concurrentSpawnLimit``, 64), each
      :data:`SERVER_START_S`. Image pulls and volume attachment are not in it.
    * ``grading``: the shards and pods of :func:`shards_for` for one lesson in
      ``grading_minutes``, and the nodes they need (pods of ``grading_cores`` cores and
      :func:`pod_memory`); ``grading_minutes``, with every pod at once (a ReadWriteMany
      course volume), and ``grading_one_node_minutes``, with the pods one node holds at
      a time (a ReadWriteOnce volume: the Job keeps its pods on one node).
    """
    guarantee, limit = learner_memory()
    by_memory = learners * guarantee / node.allocatable_memory
    by_cpu = learners * cpu_guarantee / node.allocatable_cores
    user_nodes = max(1, math.ceil(max(by_memory, by_cpu)))
    peak = learners * (SERVER_RSS + KERNEL_PEAK_RSS) / node.allocatable_memory
    cpu_bound = learners * SERVER_START_CORE_S / (user_nodes * node.allocatable_cores)
    hub_bound = math.ceil(learners / spawn_limit) * SERVER_START_S
    shards = shards_for(learners, grading_cores, grading_minutes)
    per_node = max(
        1,
        min(
            int(node.allocatable_cores // grading_cores),
            int(node.allocatable_memory // pod_memory(grading_cores)),
        ),
    )
    shard_minutes = math.ceil(learners / shards) / (GRADING_RATE * grading_cores)
    return {
        "learners": learners,
        "node": node.name,
        "guarantee_gib": guarantee / GIB,
        "limit_gib": limit / GIB,
        "user_nodes": user_nodes,
        "peak_nodes": max(1, math.ceil(peak)),
        "start_minutes": round(max(cpu_bound, hub_bound) / 60, 1),
        "grading_core_minutes": round(learners / GRADING_RATE, 1),
        "grading_shards": shards,
        "grading_pods_per_node": per_node,
        "grading_nodes": math.ceil(shards / per_node),
        "grading_minutes": round(shard_minutes, 1),
        "grading_one_node_minutes": round(math.ceil(shards / per_node) * shard_minutes, 1),
    }


def sizing_table(classes=(300, 1500), nodes=NODES) -> str:
    """The README's sizing table (markdown), computed by :func:`class_sizing`."""
    rows = [class_sizing(n, node) for node in nodes for n in classes]
    guarantee, limit = learner_memory()
    head = (
        "| learners | node | user nodes (guarantee) | nodes if all peak at once "
        "| all servers started | grading one lesson |\n|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['learners']:,} | {r['node']} | {r['user_nodes']} "
            f"| {r['peak_nodes']} | {r['start_minutes']} min "
            f"| {r['grading_core_minutes']} core-min: {r['grading_shards']} pod(s) of 4 "
            f"cores, {r['grading_minutes']} min on {r['grading_nodes']} node(s); "
            f"{r['grading_one_node_minutes']} min on one |"
        )
    lines.append(
        f"\nPer learner: guarantee {guarantee / GIB:g} GiB, limit {limit / GIB:g} GiB, "
        f"0.1 core guaranteed; 10 % of each node kept for the system."
    )
    return "\n".join(lines)


# --- command line ------------------------------------------------------------------------------


def _instructor_uid(instructor: str) -> int:
    from kvstaff.k8s import account_uid  # the uid every pod of that account runs as

    return account_uid(instructor)


def render(args) -> str:
    import yaml

    from kvstaff.k8s import image_name

    p = plan(args.learners, args.cores, args.minutes, args.shards)
    job = grading_job(
        args.lesson,
        shards=p.shards,
        image=args.image or image_name("instructor"),
        uid=args.uid if args.uid is not None else _instructor_uid(args.instructor),
        cores=args.cores,
        parallelism=args.parallelism,
        instructor=args.instructor,
        profile=args.profile,
        course_access=args.course_access,
        # three times a shard's expected time, plus one submission's wall clock
        # (kvstaff.grader.autograde.WALL_LIMIT) for the slowest
        deadline_s=int(3 * p.minutes_per_shard * 60 + 1800),
    )
    head = (
        f"# Made by `python -m kvstaff.k8s_grading job {args.lesson} --learners "
        f"{args.learners} --cores {args.cores}`: {args.learners} submissions at "
        f"{GRADING_RATE} per core-minute\n# in {p.shards} shard(s) of {p.cores} cores "
        f"(about {p.minutes_per_shard} min each). Then:\n"
        f"#   python -m kvstaff.gradebook merge-shards {args.lesson} --shards {p.shards} "
        f"--course ~/key-vectors\n"
        f"# Profile {args.profile!r}: see kvstaff.k8s_grading's docstring for what it needs.\n"
    )
    return head + yaml.safe_dump(job, sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvstaff.k8s_grading", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    job = sub.add_parser("job", help="the grading Job of one lesson, as YAML")
    job.add_argument("lesson")
    job.add_argument("--learners", type=int, required=True)
    job.add_argument("--cores", type=int, default=4, help="cores (grading workers) per pod")
    job.add_argument("--minutes", type=float, default=10, help="time to grade the class in")
    job.add_argument("--shards", type=int, default=None, help="default: from --minutes")
    job.add_argument("--parallelism", type=int, default=None, help="pods at once (default all)")
    job.add_argument("--image", default=None, help="default: kvstaff.k8s's instructor image")
    job.add_argument(
        "--course-access", choices=("ReadWriteOnce", "ReadWriteMany"), default="ReadWriteOnce"
    )
    job.add_argument("--instructor", default="kv-instructor")
    job.add_argument("--uid", type=int, default=None, help="default: the instructor's")
    job.add_argument("--profile", choices=PROFILES, default="privileged")
    sub.add_parser("sizing", help="the README's sizing table")
    args = parser.parse_args(argv)
    if args.command == "job":
        sys.stdout.write(render(args))
    else:
        print(sizing_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
