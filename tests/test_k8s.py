"""The class on Kubernetes (k8s/, kvstaff.k8s), checked without a cluster.

* The values: k8s/config.yaml is what the roster makes (so its users, admins and uids are the
  roster's), and the chart's values.yaml with it merged over, as helm merges them, validates
  against the chart's own schema (k8s/chart-4.4.0, JSON Schema draft 7); a misspelled key
  fails. Inside hub.config, which the schema passes through, every trait is checked against
  the class that owns it.
* The hub: the chart's own jupyterhub_config.py and z2jh.py run on those values, then
  KubeSpawner 7.0.0 (the chart's) in its mock mode renders the pod of a learner, of another
  learner and of the instructor after the per-role hook; the tests assert on those manifests.
  What differs from the hub pod: the folder the two files read the mounted Secret and
  ConfigMap from (a temporary one, holding what the chart's templates would put there); the
  curl HTTP client they ask tornado for (pycurl is in the hub image, not here: the request is
  recorded); JupyterHub 6.1.1 here, 5.5.0 there; a client configuration for KubeSpawner that
  names no reachable cluster (rendering makes no request).
* The exchange's modes: the Job's step (kvstaff.k8s.exchange) run on a folder here, as root.
* The images: the learners' build context holds no staff package, no solution and no answer
  key, and its install cannot bring kvstaff; the instructor's holds staff/.

Not tested here (no cluster): that the kubelet, the NFS server and the registry behave as
described (k8s/exchange-pvc.yaml says what is assumed), and the images' builds.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import re
import stat
import sys
import warnings
from pathlib import Path

import jsonschema
import pytest
import yaml

from kvstaff import k8s
from kvstaff.exchange import EXCHANGE_LAYOUT
from kvstaff.roster import RosterError, read_roster

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "k8s" / "chart-4.4.0"
LEARNERS = ("kv-learner01", "kv-learner02")
INSTRUCTOR = "kv-instructor"


def _load(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def roster():
    return read_roster(ROOT / "hub" / "roster.csv")


@pytest.fixture(scope="module")
def config():
    return _load(ROOT / "k8s" / "config.yaml")


# ---- the values ---------------------------------------------------------------------------------


def test_the_files_in_k8s_are_what_the_roster_makes(roster, config):
    for path, text in k8s.generated_files(roster).items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(ROOT)} is out of date: run `python -m kvstaff.k8s values`"
        )
    auth = config["hub"]["config"]["Authenticator"]
    assert auth["allowed_users"] == [p.username for p in roster.people]
    assert auth["admin_users"] == [p.username for p in roster.instructors] == [INSTRUCTOR]
    table = config["custom"]["keyVectors"]["accounts"]
    assert {n: a["role"] for n, a in table.items()} == {p.username: p.role for p in roster.people}
    hook = (ROOT / "k8s" / "hub_extra_config.py").read_text(encoding="utf-8")
    assert config["hub"]["extraConfig"] == {"keyVectors": hook}


def test_a_changed_roster_changes_the_files(tmp_path, roster):
    csv = (ROOT / "hub" / "roster.csv").read_text(encoding="utf-8")
    (tmp_path / "roster.csv").write_text(csv + 'kv-learner06,learner,"Curie, Marie",B,,,\n')
    new = read_roster(tmp_path / "roster.csv")
    made = k8s.generated_files(new)
    assert made[k8s.K8S / "config.yaml"] != k8s.generated_files(roster)[k8s.K8S / "config.yaml"]
    assert (
        "kv-learner06"
        in yaml.safe_load(made[k8s.K8S / "config.yaml"])["custom"]["keyVectors"]["accounts"]
    )
    assert "kv-learner06:x:" in made[k8s.K8S / "accounts.yaml"]


def test_uids_are_distinct_stable_and_above_the_systems(roster, monkeypatch):
    table = k8s.accounts(roster)
    uids = [a["uid"] for a in table.values()]
    assert len(set(uids)) == len(uids) and min(uids) >= 2**20 and max(uids) < 2**31
    assert k8s.account_uid("kv-learner03") == table["kv-learner03"]["uid"]  # order plays no part
    monkeypatch.setattr(k8s, "account_uid", lambda name: 2**20)  # a collision is refused
    with pytest.raises(RosterError, match="'kv-instructor' and 'kv-learner01' would share uid"):
        k8s.accounts(roster)


def helm_merge(base: dict, over: dict) -> dict:
    """helm's coalescing of --values over the chart's values: maps merged key by key, lists
    and scalars replaced, a null deleting the chart's key."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = helm_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.fixture(scope="module")
def schema():
    return jsonschema.Draft7Validator(_load(CHART / "values.schema.yaml"))


def schema_errors(schema, config) -> list[str]:
    merged = helm_merge(_load(CHART / "values.yaml"), config)
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in schema.iter_errors(merged)
    ]


def test_the_values_validate_against_the_charts_schema(schema, config):
    assert schema_errors(schema, config) == []


@pytest.mark.parametrize(
    "path, key",
    [
        (("singleuser", "storage"), "extraVolumeMount"),  # extraVolumeMounts misspelt
        (("hub",), "extraConfigs"),
        (("cull",), "timout"),
        ((), "singleusr"),
    ],
)
def test_a_misspelled_key_is_rejected(schema, config, path, key):
    bad = copy.deepcopy(config)
    node = bad
    for p in path:
        node = node[p]
    node[key] = {} if key != "timout" else 3600
    errors = schema_errors(schema, bad)
    assert errors and all(repr(key) in e for e in errors), errors


def hub_classes() -> tuple:
    """JupyterHub, Authenticator, KubeSpawner (imported quietly: KubeSpawner 7.0.0 declares a
    trait the way traitlets deprecates)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from jupyterhub.app import JupyterHub
        from jupyterhub.auth import Authenticator
        from kubespawner import KubeSpawner
    return JupyterHub, Authenticator, KubeSpawner


def test_hub_config_names_only_traits_of_its_classes(config):
    JupyterHub, Authenticator, KubeSpawner = hub_classes()
    classes = {c.__name__: c for c in (JupyterHub, Authenticator, KubeSpawner)}
    sections = config["hub"]["config"]
    # GenericOAuthenticator's names are oauthenticator 17's (in the chart's hub image); it is
    # not installed here, so that section, the placeholder a course replaces, is not checked
    assert set(sections) - set(classes) == {"GenericOAuthenticator"}

    def unknown(cfg):
        return [
            f"{s}.{t}"
            for s, traits in cfg.items()
            if s in classes
            for t in traits
            if t not in classes[s].class_trait_names(config=True)
        ]

    assert unknown(sections) == []
    typo = copy.deepcopy(sections)
    typo["KubeSpawner"]["automount_service_acount_token"] = False
    assert unknown(typo) == ["KubeSpawner.automount_service_acount_token"]


def test_the_pins_are_the_charts():
    hub = (CHART / "images" / "hub" / "requirements.txt").read_text()
    ours = (ROOT / "requirements.txt").read_text()
    for name in ("jupyterhub-kubespawner==7.0.0", "kubernetes_asyncio==36.1.0"):
        assert name in ours and name.replace("_", "-") in hub
    assert f"jupyterhub=={k8s.CHART_JUPYTERHUB}\n" in hub
    table = (CHART / "PROVENANCE.md").read_text()
    for path, digest in re.findall(
        r"^\| `([^`]+)` \| `[^`]+` \| `([0-9a-f]{64})` \|$", table, re.M
    ):
        assert hashlib.sha256((CHART / path).read_bytes()).hexdigest() == digest, path


def test_manifests_name_only_fields_of_the_kubernetes_api():
    job = _load(ROOT / "k8s" / "exchange-job.yaml")
    pv, pvc = yaml.safe_load_all((ROOT / "k8s" / "exchange-pvc.yaml").read_text())
    cm = _load(ROOT / "k8s" / "accounts.yaml")
    for obj, model in (
        (job, "V1Job"),
        (pv, "V1PersistentVolume"),
        (pvc, "V1PersistentVolumeClaim"),
    ):
        assert k8s.unknown_fields(obj, model) == []
    assert k8s.unknown_fields(cm, "V1ConfigMap") == []
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonroot"] = False
    assert k8s.unknown_fields(job, "V1Job") == [
        ".spec.template.spec.containers[0].securityContext.runAsNonroot: not a field of "
        "V1SecurityContext"
    ]


# ---- the hub, as the chart runs it, and the pods KubeSpawner makes ------------------------------


def load_chart_hub(config: dict, tmp: Path):
    """The chart's jupyterhub_config.py and z2jh.py run on ``config`` merged over the chart's
    values (what the hub pod does), with the files the chart mounts written to ``tmp``."""
    from tornado.httpclient import AsyncHTTPClient
    from traitlets.config.loader import PyFileConfigLoader

    etc, hub = tmp / "etc", tmp / "hub"
    for d in (etc / "secret", etc / "config", hub):
        d.mkdir(parents=True)
    values = helm_merge(_load(CHART / "values.yaml"), config)
    values["Chart"] = {"Name": "jupyterhub", "Version": k8s.CHART_VERSION, "AppVersion": "5.5.0"}
    values["Release"] = {"Name": "key-vectors", "Namespace": "key-vectors", "Service": "Helm"}
    (etc / "secret" / "values.yaml").write_text(yaml.safe_dump(values))
    for key in ("hub.config.JupyterHub.cookie_secret", "hub.config.CryptKeeper.keys"):
        (etc / "secret" / key).write_text("ab" * 32)
    for name in ("hub", "proxy-api", "user-scheduler"):  # the chart's names, fullnameOverride ""
        (etc / "config" / name).write_text(name)
    for name in ("jupyterhub_config.py", "z2jh.py"):
        text = (CHART / "files" / "hub" / name).read_text()
        assert "/usr/local/etc/jupyterhub/" in text
        (hub / name).write_text(text.replace("/usr/local/etc/jupyterhub/", f"{etc}/"))
    # The chart's hub image has pycurl for tornado's curl client; here the request is recorded.
    asked = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AsyncHTTPClient, "configure", lambda impl, **kw: asked.append(impl))
        mp.setattr(sys, "path", list(sys.path))  # the chart's file puts its folder first
        mp.setenv("HUB_SERVICE_PORT", "8081")  # what Kubernetes sets for the chart's services
        mp.setenv("PROXY_API_SERVICE_PORT", "8001")
        try:
            cfg = PyFileConfigLoader("jupyterhub_config.py", path=str(hub)).load_config()
        finally:
            sys.modules.pop("z2jh", None)
    assert asked == ["tornado.curl_httpclient.CurlAsyncHTTPClient"]
    return cfg


class User:
    """What KubeSpawner reads of a JupyterHub user (as in its own tests' MockUser)."""

    def __init__(self, name):
        self.name = self.escaped_name = name
        self.id = 1
        self.url = f"/user/{name}/"


async def render_pod(cfg, name: str) -> dict:
    from jupyterhub.utils import maybe_future
    from kubernetes_asyncio.client import ApiClient

    KubeSpawner = hub_classes()[2]
    spawner = KubeSpawner(config=cfg, _mock=True, user=User(name))
    await maybe_future(spawner.run_pre_spawn_hook())  # what JupyterHub does before start()
    pod = await spawner.get_pod_manifest()
    async with ApiClient() as api:
        return api.sanitize_for_serialization(pod)


# KubeSpawner loads a client configuration even in its mock mode; this one names a cluster
# that is never contacted (rendering a manifest makes no request).
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none, namespace: key-vectors}}]
current-context: none
"""


@pytest.fixture(scope="module")
def hub_config(config, tmp_path_factory):
    from kubernetes_asyncio.config import kube_config

    tmp = tmp_path_factory.mktemp("chart")
    (tmp / "kubeconfig").write_text(KUBECONFIG)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp / "kubeconfig"))
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield load_chart_hub(config, tmp)


@pytest.fixture(scope="module")
def pods(hub_config):
    async def render_all():
        return {n: await render_pod(hub_config, n) for n in (*LEARNERS, INSTRUCTOR)}

    return asyncio.run(render_all())


def notebook(pod: dict) -> dict:
    (c,) = [c for c in pod["spec"]["containers"] if c["name"] == "notebook"]
    return c


def env(pod: dict) -> dict:
    return {e["name"]: e.get("value") for e in notebook(pod)["env"]}


def test_the_hub_takes_the_roster_and_culls(hub_config, roster):
    assert hub_config.Authenticator.allowed_users == [p.username for p in roster.people]
    assert hub_config.Authenticator.admin_users == [INSTRUCTOR]
    assert hub_config.JupyterHub.authenticator_class == "generic-oauth"
    assert hub_config.JupyterHub.spawner_class == "kubespawner.KubeSpawner"
    (culler,) = [s for s in hub_config.JupyterHub.services if s["name"] == "jupyterhub-idle-culler"]
    assert {"--timeout=3600", "--cull-every=300"} <= set(culler["command"])


def test_each_pod_runs_as_its_own_account_never_root(pods, roster):
    table = k8s.accounts(roster)
    seen = set()
    for name, pod in pods.items():
        sc, psc = notebook(pod)["securityContext"], pod["spec"]["securityContext"]
        uid = table[name]["uid"]
        assert sc["runAsUser"] == sc["runAsGroup"] == psc["fsGroup"] == uid >= 2**20
        assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]} and "privileged" not in sc
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "supplementalGroups" not in psc
        seen.add(uid)
        # The only other container is the chart's (singleuser.cloudMetadata.blockWithIptables):
        # root with NET_ADMIN for one iptables rule before the server starts, and no volume.
        (init,) = pod["spec"]["initContainers"]
        assert init["name"] == "block-cloud-metadata" and init["command"][0] == "iptables"
        assert "volumeMounts" not in init and not pod["spec"].get("containers")[1:]
    assert len(seen) == len(pods)


def test_no_pod_gets_a_service_account_token(pods):
    for pod in pods.values():
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in spec
        assert not any("projected" in v for v in spec["volumes"])
        assert not any("serviceaccount" in m["mountPath"] for m in notebook(pod)["volumeMounts"])


def test_every_pod_has_the_resource_guarantees_and_limits(pods):
    for pod in pods.values():
        res = notebook(pod)["resources"]
        assert int(res["limits"]["memory"]) == 4 * 2**30  # k8s.MEMORY_LIMIT, as the local hub
        assert int(res["requests"]["memory"]) == 2**30
        assert float(res["limits"]["cpu"]) == k8s.CPU_LIMIT == 1.0
        assert float(res["requests"]["cpu"]) == k8s.CPU_GUARANTEE  # not the limit's whole core


def test_the_exchange_and_the_accounts_are_mounted_in_every_pod(pods, roster):
    pvc = list(yaml.safe_load_all((ROOT / "k8s" / "exchange-pvc.yaml").read_text()))[1]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    for name, pod in pods.items():
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: m for m in notebook(pod)["volumeMounts"]}
        ex = mounts["/srv/nbgrader/exchange"]
        assert ex["subPath"] == "exchange" and not ex.get("readOnly")
        assert volumes[ex["name"]]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
        home = mounts["/home/jovyan"]  # the user's own volume, made by KubeSpawner
        assert volumes[home["name"]]["persistentVolumeClaim"]["claimName"] == f"claim-{name}"
        for f in ("passwd", "group"):
            m = mounts[f"/etc/{f}"]
            assert m["subPath"] == f and m["readOnly"] is True
            assert volumes[m["name"]]["configMap"]["name"] == k8s.ACCOUNTS_CONFIGMAP
    passwd = _load(ROOT / "k8s" / "accounts.yaml")["data"]["passwd"]
    for name, a in k8s.accounts(roster).items():
        assert f"\n{name}:x:{a['uid']}:{a['uid']}:" in passwd


def test_each_role_gets_its_image_and_its_lab(pods):
    want = {
        "learner": ("key-vectors-learner", ["jupyter/hub-learner"]),
        "instructor": ("key-vectors-instructor", ["jupyter/hub-instructor", "jupyter/staff"]),
    }
    for name, pod in pods.items():
        role = "instructor" if name == INSTRUCTOR else "learner"
        image, folders = want[role]
        assert notebook(pod)["image"] == k8s.image_name(role) and image in k8s.image_name(role)
        e = env(pod)
        assert e["JUPYTER_CONFIG_PATH"] == ":".join(f"{k8s.COURSE_DIR}/{f}" for f in folders)
        assert e["KV_EXCHANGE"] == "/srv/nbgrader/exchange" and e["KV_COURSE_ID"] == "key-vectors"
        assert ("OMP_NUM_THREADS" in e) == (role == "learner")
        # ...and those folders are in that role's image (the course at COURSE_DIR): the local
        # hub's per_role gives the same folders of the checkout
        local = (ROOT / "hub" / "jupyterhub_config.py").read_text()
        assert 'role = "hub-instructor" if name in INSTRUCTORS else "hub-learner"' in local
        assert 'config_path.append(REPO / "jupyter" / "staff")' in local
        files = k8s.image_files(role)
        assert all(any(f.startswith(d + "/") for f in files) for d in folders)


def test_someone_not_in_the_roster_gets_no_server(hub_config):
    with pytest.raises(ValueError, match="'mallory' is not in the class's roster"):
        asyncio.run(render_pod(hub_config, "mallory"))


def test_the_exchange_job_runs_the_local_hubs_layout_step_as_root(roster):
    job = _load(ROOT / "k8s" / "exchange-job.yaml")["spec"]["template"]["spec"]
    (c,) = job["containers"]
    assert c["image"] == k8s.image_name("instructor")
    assert job["automountServiceAccountToken"] is False
    assert c["command"] + c["args"] == [
        *("python", "-m", "kvstaff.k8s", "exchange"),
        *("--instructor", roster.instructors[0].username, "/srv/nbgrader/exchange"),
    ]
    sc = c["securityContext"]
    assert sc["runAsUser"] == 0 and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {
        "drop": ["ALL"],
        "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
    }
    # the volume's root, whose folder exchange/ is what every pod mounts (subPath), and the
    # accounts, so that prepare_exchange finds the instructor's uid as in the pods
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert set(mounts) == {"/srv/nbgrader", "/etc/passwd", "/etc/group"}
    assert "subPath" not in mounts["/srv/nbgrader"]
    assert k8s.EXCHANGE_SUBPATH == Path(k8s.DEFAULT_EXCHANGE).name == "exchange"


@pytest.mark.needs("root")
def test_the_jobs_step_gives_the_exchange_its_modes(roster, tmp_path, monkeypatch):
    """kvstaff.k8s.exchange, the Job's step, on a folder here: the instructor is a uid that
    only the pod's /etc/passwd names (no such account on this machine), as in the Job."""
    import pwd

    uid = k8s.accounts(roster)[INSTRUCTOR]["uid"]
    real = pwd.getpwnam
    fake = pwd.struct_passwd((INSTRUCTOR, "x", uid, uid, "", "/home/jovyan", "/bin/bash"))
    monkeypatch.setattr(pwd, "getpwnam", lambda n: fake if n == INSTRUCTOR else real(n))
    k8s.exchange(tmp_path / "exchange", INSTRUCTOR)
    got = {}
    for rel in EXCHANGE_LAYOUT:
        st = (tmp_path / "exchange" / rel).stat()
        got[rel] = (stat.S_IMODE(st.st_mode), "root" if st.st_uid == 0 else st.st_uid)
    assert got == {
        ".": (0o1777, "root"),
        "key-vectors": (0o755, uid),
        "key-vectors/inbound": (0o2733, uid),  # the setgid bit kept: FSETID
        "key-vectors/outbound": (0o755, uid),
        "key-vectors/feedback": (0o711, uid),
    }


# ---- the images ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    out = tmp_path_factory.mktemp("images")
    return {r: (out / r, k8s.image_context(r, out / r)) for r in ("learner", "instructor")}


def answer_key_pattern():
    """Lesson 05's key in any spelling: 1 True 2 False ... (dict, JSON, a table), or its name."""
    from kvstaff.grader.answer_keys import KV_PREDICTION

    seq = r"\W{1,12}".join(f"{k}\\W{{1,12}}(?i:{v})" for k, v in KV_PREDICTION.items())
    return re.compile(rf"KV_PREDICTION|BEGIN SOLUTION|BEGIN HIDDEN TESTS|{seq}")


def offending(folder: Path) -> list[str]:
    key = answer_key_pattern()
    bad = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder)
        if rel.parts[0] in ("staff", "notebooks", "tests") or "kvstaff" in rel.parts:
            bad.append(f"{rel}: the staff side")
        elif rel.suffix == ".ipynb":
            bad.append(f"{rel}: a notebook")
        elif m := key.search(path.read_bytes().decode("utf-8", "replace")):
            bad.append(f"{rel}: {m.group()[:40]!r}")
    return bad


def test_the_learners_image_holds_no_staff_package_solution_or_answer_key(contexts):
    folder, files = contexts["learner"]
    assert offending(folder) == []
    assert {"postBuild", "requirements.txt", "runtime.txt", "pyproject.toml"} <= set(files)
    assert "attnlib/__init__.py" in files and "jupyter/hub-learner/nbgrader_config.py" in files
    assert stat.S_IMODE((folder / "postBuild").stat().st_mode) & 0o111


def test_the_search_for_answer_keys_can_fail(contexts):
    folder, files = contexts["instructor"]
    found = offending(folder)
    assert "staff/kvstaff/grader/answer_keys.py: the staff side" in found
    assert any(f.startswith("notebooks/") for f in found)
    keyed = folder / "attnlib" / "leak.txt"
    keyed.write_text('{"1": true, "2": false, "3": true, "4": false, "5": true, "6": false, '
                     '"7": false, "8": true}')  # fmt: skip
    from kvstaff.grader import answer_keys

    assert answer_key_pattern().search(Path(answer_keys.__file__).read_text())  # by content too
    assert answer_key_pattern().search((ROOT / "notebooks" / "03_attention.ipynb").read_text())
    assert [f for f in offending(folder) if f.startswith("attnlib/leak.txt: ")] == [
        'attnlib/leak.txt: \'1": true, "2": false, "3": true, "4": fa\''
    ]
    keyed.unlink()


def test_installing_the_learners_image_cannot_bring_kvstaff(contexts):
    folder, _ = contexts["learner"]
    reqs = (folder / "requirements.txt").read_text().splitlines()
    pins = [r for r in reqs if r and not r.startswith("#")]
    # only exact pins of named packages: no path, URL, -e, -r or index option to reach staff/
    assert pins and all(re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[^\s]+(\s+#.*)?$", r) for r in pins)
    assert not [r for r in pins if "kvstaff" in r.lower()]
    assert f"jupyterhub=={k8s.CHART_JUPYTERHUB}" in reqs[1:] + [p.split()[0] for p in pins]
    assert not any(p.split("==")[0] in k8s.IMAGE_LEAVES_OUT for p in pins)
    pyproject = (folder / "pyproject.toml").read_text()
    assert "kvstaff" not in re.search(r"dependencies = \[.*?\]", pyproject).group()
    build = [line for line in (folder / "postBuild").read_text().splitlines() if line[:1] != "#"]
    assert "python -m pip install --no-deps --no-build-isolation ." in build
    assert not [line for line in build if "staff" in line]
    # the repository's own pins are the image's, but the tests' and KubeSpawner's
    ours = re.findall(
        r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", (ROOT / "requirements.txt").read_text(), re.M
    )
    assert {p.split("==")[0] for p in pins} == {
        n for n in ours if n.lower().replace("_", "-") not in k8s.IMAGE_LEAVES_OUT
    }


def test_the_instructors_image_holds_the_staff_package(contexts):
    folder, files = contexts["instructor"]
    assert "staff/kvstaff/grader/answer_keys.py" in files and "staff/pyproject.toml" in files
    assert "nbgrader_config.py" in files and "jupyter/staff/labconfig/page_config.json" in files
    assert "-e . -e staff" in (folder / "postBuild").read_text()
