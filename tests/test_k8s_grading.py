"""Grading at scale: the class in shards and their merge, the grading Job's manifest, the
class's sizing.

* Shards (:mod:`kvstaff.grader.shards`): the rule deals every learner to exactly one shard
  for every N, the same way every time; a class graded in N shards and merged gives the
  same grades.csv, report and gradebook scores as the class graded at once; the merge
  refuses a missing shard file, a learner in two files, in the wrong file or in none. The
  grading of one submission is replaced by a stand-in that writes what nbgrader would (a
  submission with scores in the gradebook it is given, the autograded notebook): what is
  tested is the driver's sharding and the merge, with nbgrader's real gradebook, not the
  grading (tests/test_grading.py grades for real).
* The Job (:mod:`kvstaff.k8s_grading`): rendered, read into kubernetes_asyncio's typed
  models key by key (a misspelt key is caught), its security fields, index, volumes and
  parallelism; the checked-in k8s/grading/job-03_attention.yaml is what the CLI renders.
* Why the security fields are what they are, at the process level on this machine (root
  and bubblewrap needed): bubblewrap's sandbox starts as a non-root uid with no
  capabilities and no_new_privs, and does not start once one path of /proc is masked (what
  a container runtime's default /proc does) or as root without CAP_SYS_ADMIN.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nbfixtures import write_lessons

from kvstaff.grader import autograde as ag
from kvstaff.grader import shards
from kvstaff.grader.course import db_url, load_config, release
from kvstaff.grader.export import REPORT_NAME

ROOT = Path(__file__).resolve().parents[1]
# nbgrader's own SQLAlchemy use when it adds a submission (as in tests/grading_course.py)
pytestmark = pytest.mark.filterwarnings("ignore:Object of type")

LEARNER = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)


# --- the rule -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.sets(LEARNER, min_size=0, max_size=80), st.integers(min_value=1, max_value=12))
def test_the_shards_partition_the_learners_exactly(learners, n):
    dealt = [{s for s in learners if shards.shard_of(s, n) == k} for k in range(n)]
    assert set().union(*dealt) == learners  # nobody left out
    assert sum(len(d) for d in dealt) == len(learners)  # nobody twice
    for s in learners:  # the same answer every time, and the one Shard.holds gives
        assert shards.shard_of(s, n) == shards.shard_of(s, n)
        assert [k for k in range(n) if shards.Shard(ROOT, "x", k, n).holds(s)] == [
            shards.shard_of(s, n)
        ]


def test_the_rule_is_pinned_so_pods_of_two_versions_agree():
    # sha256("kv-learner01")[:8] as a big-endian number, mod N: a change of rule fails here
    assert [shards.shard_of("kv-learner01", n) for n in (1, 2, 3, 4, 7)] == [0, 1, 2, 1, 5]
    assert [shards.shard_of(f"learner{i:02d}", 4) for i in range(8)] == [1, 1, 3, 3, 1, 0, 3, 1]


def test_the_rule_spreads_a_class():
    learners = [f"kv-learner{i:04d}" for i in range(1500)]
    sizes = [sum(shards.shard_of(s, 16) == k for s in learners) for k in range(16)]
    assert min(sizes) > 1500 / 16 * 0.75 and max(sizes) < 1500 / 16 * 1.25, sizes


@pytest.mark.parametrize("bad", ["3/3", "1", "-1/2", "a/b", "0/0", "1/2/3", ""])
def test_a_bad_shard_is_refused(bad):
    with pytest.raises(ValueError):
        shards.parse_shard(bad)
    assert shards.parse_shard("2/3") == (2, 3)


# --- a class graded in shards, then merged ---------------------------------------------------

LESSON = "01_fixture"
HANDED_IN = [f"learner{i:02d}" for i in range(9)]
ROSTER_ONLY = ["learner-absent1", "learner-absent2"]  # in the gradebook, never handed in
REFUSED = "learner-refused"  # a submission refused before nbgrader ran (report only)


def _score(learner: str) -> float:
    return float(sum(map(ord, learner)) % 3)  # 0, 1 or 2 of the lesson's 3 points


def fake_grade_one(course, assignment, student, timeout, sandbox, threads, slot=None, **kw):
    """What nbgrader's Autograde leaves behind, without a kernel: a submission with
    scores in the gradebook the driver names, and the autograded notebook."""
    from nbgrader.api import Gradebook

    course = Path(course)
    if student == REFUSED:
        return {
            **dict(assignment=assignment, student=student, log="", seconds=0.5),
            **dict(success=False, error="refused: a link beside the notebook"),
            **dict(review=[], audit=[]),
        }
    url = kw.get("gradebook") or db_url(load_config(course))
    with Gradebook(url) as gb:
        gb.update_or_create_student(student, last_name=student.upper())
        sub = gb.update_or_create_submission(assignment, student, timestamp="2026-12-01 10:00")
        left = _score(student)
        for nb in sub.notebooks:
            for g in nb.grades:
                g.auto_score = min(left, g.max_score)
                left -= g.auto_score
                g.needs_manual_grade = False
        gb.db.commit()
    src = course / "submitted" / student / assignment / f"{assignment}.ipynb"
    dest = course / "autograded" / student / assignment / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)
    result = dict(assignment=assignment, student=student, success=True, log="", error="")
    return {**result, "seconds": 1.0 + len(student) / 100, "review": [], "audit": []}


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A course with lesson 01_fixture released, a roster and the class's submissions."""
    from nbgrader.api import Gradebook

    base = tmp_path_factory.mktemp("shards")
    notebooks, course = base / "notebooks", base / "course"
    write_lessons(notebooks, {LESSON: ["softmax", "attend"]})
    course.mkdir()
    release(course, notebooks, [LESSON])
    with Gradebook(db_url(load_config(course))) as gb:
        for s in ROSTER_ONLY:
            gb.add_student(s)
    nb = nbformat.read(course / "release" / LESSON / f"{LESSON}.ipynb", as_version=4)
    for s in [*HANDED_IN, REFUSED]:
        dest = course / "submitted" / s / LESSON
        dest.mkdir(parents=True)
        nbformat.write(nb, dest / f"{LESSON}.ipynb")
    return notebooks, course


@pytest.fixture()
def grading(monkeypatch):
    monkeypatch.setattr(ag, "grade_one", fake_grade_one)
    monkeypatch.setattr(ag, "refresh_bytecode", lambda: None)

    def run(course, notebooks, **kw):
        return ag.autograde(
            course, notebooks, unsafe_no_sandbox=True, jobs=1, echo=lambda line: None, **kw
        )

    return run


def _copy(released, tmp_path, name):
    notebooks, course = released
    dest = tmp_path / name
    shutil.copytree(course, dest)
    return notebooks, dest


def _rows(path: Path, course: Path | None = None) -> list[dict]:
    """A grades file's rows in order, the course folder in its notes (log paths) as COURSE."""
    with open(path, newline="") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: (r["assignment"], r["student_id"]))
    if course is not None:
        for r in rows:
            r["notes"] = r["notes"].replace(str(course.resolve()), "COURSE")
    return rows


def _scores(course: Path) -> dict:
    from nbgrader.api import Gradebook, MissingEntry

    out = {}
    with Gradebook(db_url(load_config(course))) as gb:
        for s in gb.students:
            try:
                sub = gb.find_submission(LESSON, s.id)
            except MissingEntry:
                continue
            out[s.id] = (
                sub.score,
                str(sub.timestamp),
                [g.auto_score for nb in sub.notebooks for g in nb.grades],
            )
    return out


def _report(course: Path) -> dict:
    report = json.loads((course / REPORT_NAME).read_text())
    for entries in report.values():
        for e in entries.values():
            e.pop("seconds")
            e["notes"] = [n.replace(str(course.resolve()), "COURSE") for n in e["notes"]]
    return report


@pytest.fixture()
def whole_class(released, tmp_path, grading):
    notebooks, course = _copy(released, tmp_path, "whole")
    grading(course, notebooks, assignments=[LESSON])
    return course


@pytest.mark.parametrize("n", [1, 3])
def test_a_class_in_shards_merges_into_the_one_run_grades(
    released, tmp_path, grading, whole_class, n
):
    notebooks, course = _copy(released, tmp_path, f"in{n}")
    graded = []
    for k in range(n):
        outcomes = grading(course, notebooks, assignments=[LESSON], shard=(k, n))
        graded.append({o.student for o in outcomes})
        part = shards.Shard(course, LESSON, k, n)
        assert {r["student_id"] for r in _rows(part.grades)} == {
            s for s in [*HANDED_IN, *ROSTER_ONLY, REFUSED] if part.holds(s)
        }
        assert not (course / REPORT_NAME).exists()  # a shard writes only its own files
    assert sorted(s for g in graded for s in g) == sorted([*HANDED_IN, REFUSED])
    shards.merge_shards(course, [LESSON], n, echo=lambda line: None)
    one = _rows(whole_class / "grades.csv", whole_class)
    assert _rows(course / "grades.csv", course) == one
    assert {r["status"] for r in one} == {"graded", "no submission", "NOT GRADED"}
    assert _scores(course) == _scores(whole_class) and len(_scores(course)) == len(HANDED_IN)
    assert _report(course) == _report(whole_class)


@pytest.fixture()
def three_shards(released, tmp_path, grading):
    notebooks, course = _copy(released, tmp_path, "three")
    for k in range(3):
        grading(course, notebooks, assignments=[LESSON], shard=(k, 3))
    return course


def _refused(course, match):
    before = (course / "gradebook.db").read_bytes()
    with pytest.raises(shards.ShardError, match=match):
        shards.merge_shards(course, [LESSON], 3, echo=lambda line: None)
    assert (course / "gradebook.db").read_bytes() == before  # nothing merged
    assert not (course / "grades.csv").exists()


def test_the_merge_refuses_a_missing_shard(three_shards):
    shards.Shard(three_shards, LESSON, 1, 3).grades.unlink()
    _refused(three_shards, r"no grades from .*1-of-3")


def _edit(path: Path, edit) -> None:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
        keys = list(rows[0])
    rows = edit(rows)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def test_the_merge_refuses_a_learner_graded_twice(three_shards):
    files = [shards.Shard(three_shards, LESSON, k, 3).grades for k in range(3)]
    stray = _rows(files[0])[0]
    _edit(files[1], lambda rows: [*rows, stray])
    _refused(three_shards, rf"{stray['student_id']} .* in shard (0|1) and in shard (0|1)|belongs")


def test_the_merge_refuses_a_duplicated_row_in_one_file(three_shards):
    path = shards.Shard(three_shards, LESSON, 2, 3).grades
    _edit(path, lambda rows: [*rows, rows[0]])
    _refused(three_shards, r"in shard 2 and in shard 2")


def test_the_merge_refuses_a_learner_in_no_file(three_shards):
    path = shards.Shard(three_shards, LESSON, 0, 3).grades
    gone = _rows(path)[0]["student_id"]
    _edit(path, lambda rows: [r for r in rows if r["student_id"] != gone])
    _refused(three_shards, rf"in no shard's grades file: {gone} \({LESSON}\)")


def test_the_merge_refuses_a_file_of_another_split(three_shards):
    """Shard files of a 3-way split put where a 2-way split's belong: some learner of
    theirs belongs elsewhere under 2."""
    for k in range(2):
        dest = shards.Shard(three_shards, LESSON, k, 2).grades
        dest.parent.mkdir(parents=True)
        shutil.copy(shards.Shard(three_shards, LESSON, k, 3).grades, dest)
    with pytest.raises(shards.ShardError, match="belongs to shard"):
        shards.merge_shards(three_shards, [LESSON], 2, echo=lambda line: None)


def test_a_shard_refuses_a_lesson_not_released(released, tmp_path, grading):
    notebooks, course = _copy(released, tmp_path, "unreleased")
    (course / "gradebook.db").unlink()
    with pytest.raises(SystemExit, match="release the lesson first"):
        grading(course, notebooks, assignments=[LESSON], shard=(0, 2))


def test_a_shard_never_releases_a_lesson_itself(released, tmp_path, grading):
    notebooks, course = _copy(released, tmp_path, "other-lesson")
    more = tmp_path / "notebooks"
    shutil.copytree(notebooks, more)
    (path,) = write_lessons(more / "new", {"02_fixture_masks": ["causal_mask"]})
    shutil.move(path, more / path.name)
    dest = course / "submitted" / HANDED_IN[0] / path.stem
    dest.mkdir(parents=True)
    shutil.copy(more / path.name, dest)
    k = shards.shard_of(HANDED_IN[0], 2)
    with pytest.raises(SystemExit, match="02_fixture_masks is not in the class's gradebook"):
        grading(course, more, shard=(k, 2))
    assert not (course / "release" / path.stem).exists()


def test_the_command_line_takes_a_shard(monkeypatch, tmp_path):
    from kvstaff.grader import cli

    seen = {}
    monkeypatch.setattr(cli, "autograde", lambda *a, **kw: seen.update(kw) or [])
    monkeypatch.setattr(cli, "merge_shards", lambda *a, **kw: seen.update(merged=a))
    assert cli.main(["autograde", LESSON, "--course", str(tmp_path), "--shard", "1/4"]) == 0
    assert seen["shard"] == (1, 4) and seen["assignments"] == [LESSON]
    assert cli.main(["merge-shards", LESSON, "--course", str(tmp_path), "--shards", "4"]) == 0
    assert seen["merged"] == (tmp_path, [LESSON], 4)
    with pytest.raises(SystemExit):
        cli.main(["autograde", "--shard", "4/4"])
    with pytest.raises(SystemExit):
        cli.main(["merge-shards", LESSON])  # no --shards


# --- the grading Job -------------------------------------------------------------------------

UID = 62576927  # kvstaff.k8s.account_uid("kv-instructor")


def _typed(manifest: dict, kind: str = "V1Job"):
    """``manifest`` read by kubernetes_asyncio as the API server's answer would be, and
    written back: a key the typed model does not know is dropped on the way."""
    import asyncio
    import types

    from kubernetes_asyncio.client import ApiClient

    async def roundtrip():
        async with ApiClient() as api:
            obj = api.deserialize(types.SimpleNamespace(data=json.dumps(manifest)), kind)
            return obj, api.sanitize_for_serialization(obj)

    return asyncio.run(roundtrip())


def _job(**kw):
    from kvstaff import k8s_grading as kg

    args = dict(shards=5, image="registry.example.org/key-vectors-instructor:0.1.0", uid=UID)
    return kg.grading_job("03_attention", **{**args, **kw})


@pytest.mark.parametrize("profile", ["privileged", "userns"])
def test_every_key_of_the_job_is_one_kubernetes_knows(profile):
    job = _job(profile=profile, uid=UID if profile == "privileged" else 1000)
    obj, back = _typed(job)
    assert type(obj).__name__ == "V1Job"
    assert back == job  # nothing dropped, nothing changed
    assert obj.spec.template.spec.containers[0].security_context.run_as_non_root is True


@pytest.mark.parametrize(
    "where, bad",
    [
        (("spec",), "completionMod"),
        (("spec", "template", "spec"), "automountServiceAcountToken"),
        (("spec", "template", "spec", "containers", 0, "securityContext"), "seccompProfil"),
    ],
)
def test_a_misspelt_key_is_caught(where, bad):
    job = _job(profile="userns", uid=1000)
    node = job
    for step in where:
        node = node[step]
    node[bad] = "x"
    _, back = _typed(job)
    assert back != job


def _pod(job):
    return job["spec"]["template"]["spec"]


def test_the_privileged_profile_runs_the_grader_as_the_instructor_without_capabilities():
    job = _job()
    pod = _pod(job)
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["privileged"] is True  # bubblewrap's fresh /proc: see kvstaff.k8s_grading
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == UID and sc["runAsGroup"] == UID
    assert "capabilities" not in sc  # nothing added: a non-root uid holds none
    assert pod["securityContext"]["runAsUser"] == UID and pod["securityContext"]["fsGroup"] == UID
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert "hostUsers" not in pod  # the instructor's uid is above a pod user namespace's range
    assert sc["readOnlyRootFilesystem"] is True


def test_the_userns_profile_has_no_privilege_at_all():
    pod = _pod(_job(profile="userns", uid=1000))
    sc = pod["containers"][0]["securityContext"]
    assert pod["hostUsers"] is False and sc["procMount"] == "Unmasked"
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == sc["appArmorProfile"] == {"type": "Unconfined"}
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 1000
    assert pod["automountServiceAccountToken"] is False


def test_the_userns_profile_refuses_a_uid_outside_the_pods_namespace():
    with pytest.raises(ValueError, match="0-65535"):
        _job(profile="userns", uid=UID)
    with pytest.raises(ValueError, match="profile"):
        _job(profile="root")


def test_each_pod_grades_its_own_index(monkeypatch):
    from kvstaff.grader import cli

    job = _job(shards=5, cores=4)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 5
    assert spec["parallelism"] == 5 and spec["backoffLimitPerIndex"] == 1
    assert spec["ttlSecondsAfterFinished"] > 0 and spec["activeDeadlineSeconds"] > 0
    (c,) = _pod(job)["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["SHARD"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    seen = {}
    monkeypatch.setattr(cli, "autograde", lambda *a, **kw: seen.update(kw) or [])
    for k in range(5):  # the argv Kubernetes runs, $(SHARD) expanded, as the grader reads it
        argv = [*c["command"][3:], *(a.replace("$(SHARD)", str(k)) for a in c["args"])]
        assert c["command"][:3] == ["python", "-m", "kvstaff.gradebook"]
        assert cli.main(argv) == 0
        assert seen["shard"] == (k, 5) and seen["jobs"] == 4
        assert seen["assignments"] == ["03_attention"]
    assert c["resources"]["requests"] == c["resources"]["limits"]  # Guaranteed
    assert c["resources"]["limits"]["cpu"] == "4"


def test_the_volumes_are_the_course_folder_and_a_private_tmp():
    pod = _pod(_job())
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["home"]["persistentVolumeClaim"] == {"claimName": "claim-kv-instructor"}
    assert "exchange" not in volumes  # collect has copied what is graded into submitted/
    assert "emptyDir" in volumes["tmp"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/home/jovyan"]["name"] == "home"
    assert "--course=/home/jovyan/key-vectors" in pod["containers"][0]["args"]
    assert mounts["/etc/passwd"]["readOnly"] is True
    # a ReadWriteOnce course volume: every pod on the node of the others
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert "affinity" not in _pod(_job(course_access="ReadWriteMany"))


def test_the_shards_come_from_the_measured_grading_rate():
    from kvstaff import k8s_grading as kg

    assert kg.GRADING_RATE == 9.3  # README "Class-size figures": tools/time_grading.py
    # ceil(learners / (9.3 per core-minute * 10 minutes * 4 cores)) = ceil(learners / 372)
    assert [kg.shards_for(n, 4, 10) for n in (0, 1, 300, 372, 373, 1500, 3720, 3721)] == [
        1, 1, 1, 1, 2, 5, 10, 11,
    ]  # fmt: skip
    assert kg.shards_for(1500, 16, 10) == 2  # 1500 / 1488
    assert kg.shards_for(1500, 4, 5) == 9  # 1500 / 186 = 8.06
    assert kg.plan(1500, 4, 10).shards == 5
    assert kg.plan(1500, 4, 10).minutes_per_shard == 8.1  # 300 / 37.2
    with pytest.raises(ValueError):
        kg.shards_for(10, 0, 10)


def test_the_checked_in_job_is_what_the_command_renders(capsys):
    from kvstaff import k8s_grading as kg

    kg.main(["job", "03_attention", "--learners", "1500", "--cores", "4"])
    path = ROOT / "k8s" / "grading" / "job-03_attention.yaml"
    assert capsys.readouterr().out == path.read_text(), (
        "k8s/grading/job-03_attention.yaml is stale: python -m kvstaff.k8s_grading job "
        "03_attention --learners 1500 --cores 4 > k8s/grading/job-03_attention.yaml"
    )
    import yaml

    job = yaml.safe_load(path.read_text())
    assert job["spec"]["completions"] == 5 and _typed(job)[1] == job


# --- sizing ------------------------------------------------------------------------------------


def test_the_sizing_arithmetic():
    from kvstaff import k8s_grading as kg

    mib, gib = 2**20, 2**30
    # measured: server 107 MiB, lesson 16's kernel 1,991 MiB at its peak, 780 MiB after
    assert (kg.SERVER_RSS, kg.KERNEL_PEAK_RSS, kg.KERNEL_RSS_AFTER) == (
        107 * mib,
        1991 * mib,
        780 * mib,
    )
    # guarantee: ceil(887 MiB) = 1 GiB; limit: ceil(1.5 * 2,098 MiB = 3.07 GiB) = 4 GiB
    assert kg.learner_memory() == (1 * gib, 4 * gib)
    node = kg.Node(8, 32 * gib)  # 28.8 GiB and 7.2 cores allocatable
    r = kg.class_sizing(300, node)
    assert r["user_nodes"] == 11  # 300 * 1 GiB / 28.8 GiB = 10.4 (CPU: 30 / 7.2 = 4.2)
    assert r["peak_nodes"] == 22  # 300 * 2,098 MiB / 28.8 GiB = 21.3
    # servers: max(300 * 11.47 core-s / (11 * 7.2 cores) = 43 s, ceil(300/64) * 7.4 = 37 s)
    assert r["start_minutes"] == 0.7
    assert r["grading_core_minutes"] == 32.3 and r["grading_shards"] == 1
    big = kg.class_sizing(1500, kg.Node(16, 64 * gib))
    assert big["user_nodes"] == 27  # 1500 / 57.6 = 26.04
    assert big["peak_nodes"] == 54  # 1500 * 2,098 MiB / 57.6 GiB = 53.4
    assert big["start_minutes"] == 3.0  # the hub: ceil(1500 / 64) = 24 rounds of 7.4 s
    # 5 pods of 4 cores and 10.8 GiB: 3 fit a node (14.4 cores), 2 nodes; on one: 2 rounds
    assert (big["grading_shards"], big["grading_pods_per_node"], big["grading_nodes"]) == (
        5,
        3,
        2,
    )
    assert big["grading_minutes"] == 8.1 and big["grading_one_node_minutes"] == 16.1
    assert kg.pod_memory(4) == 4 * (1991 + 512) * mib + gib
    table = kg.sizing_table()
    assert table.count("\n| ") == 4 and "| 1,500 | 16 cores / 64 GiB | 27 | 54 |" in table


# --- why the security fields: bubblewrap at the process level ------------------------------------

BWRAP_ARGS = [
    *("--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent"),
    *("--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"),
]


def _bwrap_id(prefix: list[str], extra: list[str] = ()) -> subprocess.CompletedProcess:
    links = []
    for name in ("bin", "lib", "lib64", "sbin"):
        p = Path("/") / name
        if p.is_symlink():
            links += ["--symlink", str(p.readlink()), str(p)]
        elif p.is_dir():
            links += ["--ro-bind", str(p), str(p)]
    cmd = [*prefix, "bwrap", *extra, *BWRAP_ARGS, *links, "--", "/usr/bin/id", "-u"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


NOBODY = [
    *("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"),
    *("--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"),
]


@pytest.mark.skipif(
    not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("bwrap")),
    reason="needs root (to drop to another uid and mask /proc) and bubblewrap",
)
def test_bubblewrap_runs_unprivileged_but_not_under_a_masked_proc():
    # a non-root uid, no capability at all, no_new_privs: what the Job's container gives
    ok = _bwrap_id(NOBODY)
    assert ok.returncode == 0 and ok.stdout.strip() == "65534", ok.stderr
    # one path of /proc masked, as a container runtime's default /proc has several
    masked = _bwrap_id(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount --bind /dev/null /proc/keys && exec "$@"', "sh", *NOBODY]
    )  # fmt: skip
    assert masked.returncode != 0 and "Can't mount proc" in masked.stderr, masked
    # root without CAP_SYS_ADMIN (a container's default) and no user namespace (bubblewrap's
    # way when the grader is root, kvstaff.grader.sandbox) cannot start it
    no_userns = subprocess.run(
        ["setpriv", "--bounding-set=-sys_admin", "bwrap", *BWRAP_ARGS[1:], "--", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert no_userns.returncode != 0 and "Operation not permitted" in no_userns.stderr
