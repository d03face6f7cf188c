"""The class's per-role settings on Zero to JupyterHub: hub.extraConfig["keyVectors"].

`python -m kvstaff.k8s values` puts this file, as it is, into k8s/config.yaml. The chart's own
jupyterhub_config.py runs it last (`exec`), after hub.config, with `c` (the hub's config) and
`get_config` (the chart's values, z2jh.get_config) defined. The hub pod's image is the chart's
(quay.io/jupyterhub/k8s-hub): kvstaff is not in it, so this file imports nothing of the course
and reads what it needs from the values, `custom.keyVectors`, which kvstaff.k8s made from the
roster.

It mirrors `per_role` in hub/jupyterhub_config.py: learners get the learners' Lab
(jupyter/hub-learner: the Assignments panel only), the instructor the staff Lab
(jupyter/hub-instructor, then jupyter/staff), both the class's exchange and course id. What
differs on Kubernetes: each role has its own image (the learners' holds no staff package, no
solution, no answer key), and each account of the roster runs as its own uid (and a group of
its own), so that the exchange's modes and collect's owner check mean here what they mean on
the local hub. Anyone not in the roster gets no server.
"""

KV = get_config("custom.keyVectors")  # noqa: F821 - defined by the chart's jupyterhub_config.py
ACCOUNTS = KV["accounts"]  # username -> {"role": "learner" | "instructor", "uid": int}


def per_role(spawner):
    """Image, uid, group and JUPYTER_CONFIG_PATH of `spawner`'s user, by their roster role."""
    name = spawner.user.name
    account = ACCOUNTS.get(name)
    if account is None:  # allowed_users keeps them out already; this keeps out a server too
        raise ValueError(f"{name!r} is not in the class's roster: no server for them")
    role, uid = account["role"], int(account["uid"])
    spawner.image = KV["images"][role]
    # One uid per account, and a group of its own (as useradd --user-group makes locally):
    # fsGroup is that group too, so the home volume the kubelet hands over is the user's alone.
    spawner.uid = spawner.gid = spawner.fs_gid = uid
    config_path = [f"{KV['courseDir']}/jupyter/hub-{role}"]
    if role == "instructor":
        config_path.append(f"{KV['courseDir']}/jupyter/staff")  # nbgrader's tools switched on
    env = dict(spawner.environment)
    env["JUPYTER_CONFIG_PATH"] = ":".join(config_path)
    env["KV_EXCHANGE"] = KV["exchange"]
    env["KV_COURSE_ID"] = KV["course"]
    if role == "learner":  # as many threads as the learner's cores
        env["OMP_NUM_THREADS"] = str(max(1, int(spawner.cpu_limit or 1)))
    spawner.environment = env


c.KubeSpawner.pre_spawn_hook = per_role  # noqa: F821
