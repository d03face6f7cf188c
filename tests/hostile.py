"""Submissions that attack the grader, and honest ones it must not punish.

Each entry is a learner's edit of the fixture lesson ``01_fixture`` (softmax 1 point,
attend 2 points; tests/nbfixtures.py): the source of its solution cells, and optionally an
edit of the notebook's JSON. ``tests/test_grading.py`` grades all of them in one
``autograde`` run, in the sandbox, and checks every hostile one earns nothing and is
flagged, and every honest one keeps its points unflagged.

Sources may use ``{course}`` (the course folder, with gradebook.db) and ``{attnlib}`` (the
installed package folder): a real attacker knows both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nbfixtures import reference_source

WRONG_SOFTMAX = "def softmax(x):\n    e = np.exp(x)\n    return e / e.sum(axis=-1, keepdims=True)\n"
WRONG_ATTEND = "def attend(q, k, v, mask=None):\n    return q, k\n"
STUB_SOFTMAX = "def softmax(x):\n    raise NotImplementedError()\n"
STUB_ATTEND = "def attend(q, k, v, mask=None):\n    raise NotImplementedError()\n"
RIGHT_SOFTMAX = reference_source("softmax")
RIGHT_ATTEND = reference_source("attend")


@dataclass
class Submission:
    student: str
    what: str
    softmax: str = RIGHT_SOFTMAX
    attend: str = RIGHT_ATTEND
    edit: Callable | None = None  # edit(nb) on the notebook JSON after the solutions are set
    points: float | None = None  # honest ones: the score they must keep
    notes: list[str] = field(default_factory=list)  # substrings the CSV notes must contain
    status: str = "FLAGGED"  # hostile ones: FLAGGED, or NOT GRADED where nbgrader refuses
    # handed in beside the notebook: files {relative path: text}, symlinks {name: target}
    # and FIFOs [name]
    files: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    fifos: list[str] = field(default_factory=list)
    auto: float | None = None  # the autograder's own score kept for the reviewer, if given


def _grade_id(nb, gid):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid)


def _relabel_solution_as_locked(nb):
    meta = _grade_id(nb, "l01-softmax-solution").metadata["nbgrader"]
    meta.update(locked=True, solution=False)


def _fake_grade_id(nb):
    _grade_id(nb, "l01-attend-solution").metadata["nbgrader"]["grade_id"] = "l01-bonus-points"


HOSTILE = [
    Submission(
        "h01_reference",
        "calls the course's reference through an alias",
        softmax="import attnlib as al\n\n\ndef softmax(x):\n    return al.softmax(x)\n",
        notes=["calls the course reference"],
    ),
    Submission(
        "h02_always_equal",
        "returns objects that compare equal to anything",
        attend=(
            "class Anything:\n    def __eq__(self, other):\n        return True\n\n\n"
            "def attend(q, k, v, mask=None):\n    return Anything(), Anything()\n"
        ),
        softmax=STUB_SOFTMAX,
        notes=["defines Anything.__eq__"],
    ),
    Submission(
        "h03_patch_testing",
        "monkeypatches numpy.testing, torch.testing and the checks' core",
        softmax=(
            "import numpy.testing\nimport torch.testing\nimport attnlib.checks._core as core\n\n"
            "numpy.testing.assert_allclose = lambda *a, **k: None\n"
            "torch.testing.assert_close = lambda *a, **k: None\n"
            "core.run = lambda exercise, fn, **k: core.Report(exercise=exercise, ok=True, "
            "n_cases=1)\nimport attnlib.checks\n\nattnlib.checks.run = core.run\n\n\n"
        )
        + WRONG_SOFTMAX,
        attend=WRONG_ATTEND,
        notes=["assigns to numpy.testing.assert_allclose"],
    ),
    Submission(
        "h04_replace_checks",
        "a stub plus a top-level replacement of checks.check and check_hidden",
        softmax=(
            "from attnlib import checks\n\nchecks.check = lambda *a, **k: None\n"
            "checks.check_hidden = lambda *a, **k: None\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["assigns to checks.check_hidden", "the hidden tests did not run"],
    ),
    Submission(
        "h05_alias",
        "replaces the checks through an alias of the module",
        softmax=(
            "import attnlib.checks\n\n_c = attnlib.checks\n_c.check = lambda *a, **k: print('ok')\n"
            "_c.check_hidden = lambda *a, **k: None\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["assigns to _c.check"],
    ),
    Submission(
        "h06_alias_by_function",
        "replaces the checks inside a function it passes the module to",
        softmax=(
            "from attnlib import checks as mine\n\n\ndef quiet(m):\n"
            "    setattr(m, 'check', lambda *a, **k: None)\n"
            "    m.check_hidden = lambda *a, **k: None\n\n\nquiet(mine)\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["assigns to m.check_hidden", "calls setattr()"],
    ),
    Submission(
        "h07_relabelled",
        "a solution cell re-marked as locked and not a solution, replacing the checks",
        softmax=(
            "import attnlib.checks\n\nattnlib.checks.check = lambda *a, **k: None\n"
            "attnlib.checks.check_hidden = lambda *a, **k: None\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        edit=_relabel_solution_as_locked,
        notes=["changed this cell's locked", "assigns to attnlib.checks.check_hidden"],
    ),
    Submission(
        "h08_input_transformer",
        "an IPython input transformer that turns every later test cell into `pass`",
        softmax=(
            "def _blank(lines):\n"
            "    text = ''.join(lines)\n"
            "    return ['pass\\n'] if 'checks.check' in text else lines\n\n\n"
            "get_ipython().input_transformers_post.append(_blank)\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["input_transformers_post"],
    ),
    Submission(
        "h09_events",
        "an IPython pre_run_cell hook that replaces check_hidden before every cell",
        softmax=(
            "def _swap(*args):\n    import attnlib.checks as c\n\n"
            "    c.check = c.check_hidden = lambda *a, **k: None\n\n\n"
            "get_ipython().events.register('pre_run_cell', _swap)\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["events"],
    ),
    Submission(
        "h10_custom_exc",
        "a custom exception handler that swallows the failing checks",
        softmax=(
            "def _hide(shell, etype, value, tb, tb_offset=None):\n    return None\n\n\n"
            "get_ipython().set_custom_exc((Exception,), _hide)\n\n\n"
        )
        + WRONG_SOFTMAX,
        attend=WRONG_ATTEND,
        notes=["set_custom_exc"],
    ),
    Submission(
        "h11_bytecode",
        "plants bytecode for attnlib.checks._core that accepts anything",
        softmax=(
            "import os, py_compile, sys\n\n"
            "_src = '/tmp/_core_fake.py'\n"
            "with open(_src, 'w') as fh:\n"
            "    fh.write('def run(*a, **k):\\n    raise SystemExit\\n')\n"
            "_dest = os.path.join('{attnlib}', 'checks', '__pycache__', "
            "'_core.cpython-%d%d.pyc' % sys.version_info[:2])\n"
            "try:\n"
            "    os.makedirs(os.path.dirname(_dest), exist_ok=True)\n"
            "    py_compile.compile(_src, cfile=_dest)\n"
            "    print('PLANTED')\n"
            "except Exception as err:\n"
            "    print('could not plant:', type(err).__name__)\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["imports py_compile", "__pycache__"],
    ),
    Submission(
        "h12_sqlite",
        "opens gradebook.db with sqlite3 and zeroes another learner's grade",
        softmax=(
            "import sqlite3\n\n"
            "for _path in ('{course}/gradebook.db', '../../../gradebook.db'):\n"
            "    try:\n"
            "        _db = sqlite3.connect(_path)\n"
            '        _db.execute("UPDATE grade SET manual_score = 0")\n'
            "        _db.commit()\n"
            "        print('WROTE', _path)\n"
            "    except Exception as err:\n"
            "        print('no gradebook at', _path, type(err).__name__)\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["imports sqlite3"],
    ),
    Submission(
        "h13_library",
        "builds attend on scaled_dot_product_attention and softmax on torch.softmax",
        softmax=(
            "import torch\n\n\ndef softmax(x):\n"
            "    return torch.softmax(torch.as_tensor(x), dim=-1).numpy()\n"
        ),
        attend=(
            "import torch\nimport torch.nn.functional as F\n\n\n"
            "def attend(q, k, v, mask=None):\n"
            "    q, k, v = (torch.as_tensor(a) for a in (q, k, v))\n"
            "    m = None if mask is None else torch.as_tensor(mask)\n"
            "    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5\n"
            "    if m is not None:\n"
            "        s = s.masked_fill(~m, float('-inf'))\n"
            "    w = torch.nan_to_num(torch.softmax(s, dim=-1))\n"
            "    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)\n"
            "    return torch.nan_to_num(out).numpy(), w.numpy()\n"
        ),
        notes=["torch.softmax (a library function", "scaled_dot_product_attention"],
    ),
    Submission(
        "h14_crash",
        "kills its own kernel",
        softmax="import os\n\n\ndef softmax(x):\n    os._exit(1)\n",
        notes=["the kernel died", "uses os._exit"],
    ),
    Submission(
        "h15_forged_outputs",
        "replaces check_hidden with one that writes the reference's outputs to the exchange",
        softmax=(
            "import attnlib\nfrom attnlib import checks\nfrom attnlib.checks import grading\n\n\n"
            "def _forge(name, fn):\n"
            "    ref = checks.get_exercise(name).reference\n"
            "    grading.record(name, ref, grading.exchange_folder())\n\n\n"
            "checks.check_hidden = _forge\n"
            "checks.check = lambda *a, **k: None\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["assigns to checks.check_hidden"],
    ),
    Submission(
        "h16_hide_calls",
        "removes the profiling hook so that its call of the reference is not seen",
        softmax=(
            "import sys\nimport attnlib\n\n\ndef softmax(x):\n    sys.setprofile(None)\n"
            "    return attnlib.softmax(x)\n"
        ),
        notes=["profiling hook"],
    ),
    Submission(
        "h17_builtins",
        "replaces builtins and a numpy function used by the checks",
        softmax=(
            "import builtins\nimport numpy\n\nbuiltins.isinstance = lambda *a: True\n"
            "numpy.isclose = lambda a, b, **k: numpy.ones(numpy.shape(a), bool)\n\n\n"
        )
        + WRONG_SOFTMAX,
        attend=WRONG_ATTEND,
        notes=["assigns to builtins.isinstance"],
    ),
    Submission(
        "h18_sys_modules",
        "swaps attnlib.checks.grading in sys.modules for a fake",
        softmax=(
            "import sys, types\n\n_fake = types.ModuleType('attnlib.checks.grading')\n"
            "_fake.verify = lambda *a, **k: None\n"
            "sys.modules['attnlib.checks.grading'] = _fake\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["uses sys.modules"],
    ),
    Submission(
        "h19_escape",
        "tries the network, the course folder and the library's sources from its kernel",
        softmax=(
            "import os, socket\n\n"
            "for _p in ('{course}/gradebook.db', '{course}/submitted'):\n"
            "    print(_p, os.path.exists(_p))\n"
            "try:\n"
            "    socket.create_connection(('127.0.0.1', 22), timeout=2)\n"
            "except OSError as err:\n"
            "    print('no network:', type(err).__name__)\n"
            "try:\n"
            "    open(os.path.join('{attnlib}', 'checks', '_core.py'), 'a').write('# x')\n"
            "except OSError as err:\n"
            "    print('read-only:', type(err).__name__)\n\n\n"
        )
        + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["imports socket", "opens a file for writing"],
    ),
    Submission(
        "h20_fake_cell",
        "gives a solution cell a grade_id of its own invention",
        attend=STUB_ATTEND,
        edit=_fake_grade_id,
        notes=["claims the grade_id 'l01-bonus-points'"],
        status="NOT GRADED",  # nbgrader itself refuses the notebook: no score either
    ),
]

# The red team's attacks on the first version of this grader (`make release` /
# `make autograde` on 03_attention), replayed on the fixture lesson.
SHADOW_PACKAGE = r"""
import json as _json, os as _os, pickle as _pickle, sys as _sys

_work = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _work]
del _sys.modules["attnlib"]
import attnlib as _real
from attnlib import checks as _checks
from attnlib.checks import grading as _g


def _verify(exercise, fn):
    ex = _g.exchange_folder()
    src = ex / "in" / f"{exercise}.pkl" if ex else None
    if src is None or not src.is_file():
        return
    with open(src, "rb") as fh:
        data = _pickle.load(fh)
    ref = _checks.get_exercise(exercise).reference
    outs = [ref(*a, **k) for a, k in data["cases"]]
    folder = ex / "out" / exercise
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    man = {"exercise": exercise, "outputs": [_g._encode(o, folder, files) for o in outs],
           "calls": [], "tampering": []}
    (folder / "manifest.json").write_text(_json.dumps(man))


_g.verify = _verify
_checks.check = lambda exercise, fn: print(f"ok {exercise}")
"""

JSON_FORGE = """import json
import pathlib

from attnlib import checks as _ck
from attnlib.checks import grading as _g

_dumps = json.dumps


def _forge(obj, *a, **k):
    if isinstance(obj, dict) and set(obj) == {"exercise", "outputs", "calls", "tampering"}:
        name = obj["exercise"]
        ex = _ck.get_exercise(name)
        folder = pathlib.Path(_g.exchange_folder()) / "out" / name
        outs = [ex.reference(*c.args, **c.kwargs) for c in ex.cases(hidden=True)]
        obj = {"exercise": name, "outputs": [_g._encode(o, folder, []) for o in outs],
               "calls": [], "tampering": []}
    return _dumps(obj, *a, **k)


json.dumps = _forge
getattr(type(_ck), "__setattr__")(_ck, "check", lambda name, fn: print("ok", name))


"""

TOGGLE = """import sys
from attnlib import checks as _ck

_off = getattr(sys, "setprofile")


def softmax(x):
    hook = sys.getprofile()
    _off(None)
    try:
        return _ck.get_exercise("softmax").reference(x)
    finally:
        _off(hook)
"""

THREAD = """import asyncio
from attnlib import checks as _ck

_pool = asyncio.base_events.concurrent.futures.ThreadPoolExecutor(1)


def softmax(x):
    return _pool.submit(_ck.get_exercise("softmax").reference, x).result()
"""

LOOKUP = """from attnlib import checks as _ck


def _key(*args):
    return repr([a.tobytes() if hasattr(a, "tobytes") else a for a in args if a is not None])


def _table(name):
    ex = _ck.get_exercise(name)
    return {
        _key(*c.args, *c.kwargs.values()): ex.reference(*c.args, **c.kwargs)
        for c in ex.cases(hidden=True)
    }


_T = {n: _table(n) for n in ("softmax", "attend")}


def softmax(x):
    return _T["softmax"][_key(x)]
"""

FIFO_LOG = """import pathlib

_log = pathlib.Path("../run/kernel.log")
_log.unlink()
getattr(__import__("os"), "mk" + "fifo")(_log)


"""

XSS = """class Note:
    def _repr_html_(self):
        return "<b>ready</b><script>document.title='XSS-RAN'</script>"

    def _repr_javascript_(self):
        return "document.title = 'XSS-JS-RAN';"


Note()


"""


# %%time makes the cell one string for get_ipython().run_cell_magic: the audit used to skip
# it. A pre_run_cell hook (run before every cell, outside the profiling hook) reads the
# grader's hidden inputs and fills a table from the reference (the red team's b06).
TIME_HOOK = """%%time
import os
import pickle

from attnlib.checks import _core as _C

_T = {}


def _fill(*_):
    ex = _C.get_exercise("softmax")
    cases = [(c.args, c.kwargs) for c in ex.cases()]
    p = os.environ.get("KEY_VECTORS_" + "GRADING_EXCHANGE", "") + "/in/softmax.pkl"
    if os.path.exists(p):
        with open(p, "rb") as fh:
            cases += pickle.load(fh)["cases"]
    for a, k in cases:
        _T[a[0].tobytes()] = ex.reference(*a, **k)


get_ipython().events.register("pre_run_cell", _fill)
_fill()


def softmax(x):
    return _T[x.tobytes()]
"""

# A process started under %%time computes the reference's answers into /tmp while the hidden
# cases run (the red team's d01); the solution only reads them.
WATCHER = """
import os, pickle, sys, time, zlib
import numpy as np
from attnlib.checks import _core as C
ex = C.get_exercise("softmax")
def put(cases):
    for a, k in cases:
        name = "/tmp/sm_" + str(zlib.crc32(a[0].tobytes())) + ".npy"
        np.save(name + ".tmp.npy", ex.reference(*a, **k))
        os.replace(name + ".tmp.npy", name)
put([(c.args, c.kwargs) for c in ex.cases()])
p = sys.argv[1] + "/in/softmax.pkl"
while True:
    if os.path.exists(p):
        with open(p, "rb") as fh:
            put(pickle.load(fh)["cases"])
    time.sleep(0.01)
"""
TIME_PROCESS = (
    "%%time\nimport os\nimport subprocess\nimport sys\nimport time\nimport zlib\n\n"
    "import numpy as np\n\n"
    f"_W = {WATCHER!r}\n"
    "_P = subprocess.Popen(\n"
    "    [sys.executable, '-c', _W, os.environ.get('KEY_VECTORS_' + 'GRADING_EXCHANGE', '')]\n"
    ")\n\n\n"
    "def softmax(x):\n"
    "    name = '/tmp/sm_' + str(zlib.crc32(x.tobytes())) + '.npy'\n"
    "    for _ in range(3000):\n"
    "        if os.path.exists(name):\n"
    "            return np.load(name)\n"
    "        time.sleep(0.01)\n"
    "    raise RuntimeError('no answer')\n"
)


def _deep_cell(nb):
    import nbformat

    nb.cells.append(nbformat.v4.new_code_cell("if False:\n    y = x" + ".a" * 3000 + "\n"))


HOSTILE += [
    Submission(
        "h22_shadow_package",
        "the untouched stubs plus an attnlib/ package handed in beside the notebook",
        softmax=STUB_SOFTMAX,
        attend=STUB_ATTEND,
        files={"attnlib/__init__.py": SHADOW_PACKAGE},
        notes=["'attnlib/' was handed in beside the notebook"],
        auto=0,
    ),
    Submission(
        "h23_symlinks",
        "symlinks beside the notebook to gradebook.db, another learner and a system file",
        links={
            "x_gradebook.db": "{course}/gradebook.db",
            "x_other.ipynb": "{course}/submitted/ok_reference/01_fixture/01_fixture.ipynb",
            "x_system": "/etc/hostname",
        },
        notes=["'x_gradebook.db' is a symbolic link", "refused"],
        status="NOT GRADED",
    ),
    Submission(
        "h24_fifo",
        "a FIFO beside the notebook (nbgrader's copy would block on it)",
        fifos=["data.npy"],
        notes=["'data.npy' is not a regular file"],
        status="NOT GRADED",
    ),
    Submission(
        "h25_json_dumps",
        "stubs; json.dumps replaced so that record() writes the reference's outputs",
        softmax=JSON_FORGE + STUB_SOFTMAX,
        attend=STUB_ATTEND,
        notes=["assigns to json.dumps", "names '__setattr__' in a string"],
        auto=0,
    ),
    Submission(
        "h26_toggle_profile",
        "switches the profiling hook off around its call of the reference",
        softmax=TOGGLE,
        notes=["names 'setprofile' in a string", "the function called sys.setprofile"],
        auto=2,  # softmax refused by the runtime check alone, attend right
    ),
    Submission(
        "h27_thread",
        "calls the reference on a worker thread, where the profiling hook does not look",
        softmax=THREAD,
        notes=["ThreadPoolExecutor", "threads started by the notebook were running"],
        auto=0,  # its pool thread, alive during every hidden run, costs attend too
    ),
    Submission(
        "h28_aten",
        "softmax on torch._softmax, attend on torch.ops.aten.scaled_dot_product_attention",
        softmax=(
            "import torch\n\n\ndef softmax(x):\n"
            "    return torch._softmax(torch.as_tensor(x), -1, False).numpy()\n"
        ),
        attend=(
            "import torch\n\n\ndef attend(q, k, v, mask=None):\n"
            "    q, k, v = (torch.as_tensor(a) for a in (q, k, v))\n"
            "    m = None if mask is None else torch.as_tensor(mask)\n"
            "    out = torch.ops.aten.scaled_dot_product_attention(q, k, v, m)\n"
            "    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5\n"
            "    if m is not None:\n"
            "        s = s.masked_fill(~m, float('-inf'))\n"
            "    w = torch.nan_to_num(torch.softmax(s, dim=-1))\n"
            "    return torch.nan_to_num(out).numpy(), w.numpy()\n"
        ),
        notes=["torch._softmax (a library function", "aten.scaled_dot_product_attention"],
        auto=0,
    ),
    Submission(
        "h29_lookup",
        "answers from a table of the reference's outputs on the shipped hidden cases",
        softmax=LOOKUP,
        notes=["uses _ck.get_exercise"],
        auto=2,  # the hidden cases are drawn per run: the table has none of them
    ),
    Submission(
        "h30_bare_reference",
        "calls attnlib.attend, plainly, in its solution cell",
        attend="def attend(q, k, v, mask=None):\n    return attnlib.attend(q, k, v, mask)\n",
        notes=["uses attnlib.attend (a course reference)"],
        auto=1,
    ),
    Submission(
        "h31_fifo_log",
        "replaces the sandbox's kernel.log by a FIFO, so that the grader would block on it",
        softmax=FIFO_LOG + RIGHT_SOFTMAX,
        notes=["names 'kernel.log' in a string"],
    ),
    Submission(
        "h32_audit_crash",
        "an extra cell nested too deep for Python's parser (the audit used to crash on it)",
        edit=_deep_cell,
        notes=["the audit could not read this cell (RecursionError)"],
    ),
    Submission(
        "h33_flood",
        "prints 6 MB in a solution cell",
        softmax=RIGHT_SOFTMAX + "\n\nfor _ in range(6):\n    print('x' * 2**20)\n",
        notes=["printed more output than the grader keeps"],
    ),
    Submission(
        "h34_script",
        "an object whose HTML and JavaScript reprs would run in the feedback page",
        softmax=XSS + RIGHT_SOFTMAX,
        notes=["defines Note._repr_html_"],
    ),
    Submission(
        "h35_time_magic_hook",
        "a %%time cell registers a pre_run_cell hook that fills a table from the reference",
        softmax=TIME_HOOK,
        notes=["uses get_ipython().events", "(a pre_run_cell event callback)"],
        auto=0,  # the hook stays registered: attend's hidden run is tampered with too
    ),
    Submission(
        "h36_time_magic_process",
        "a %%time cell starts a process that computes the reference's answers into /tmp",
        softmax=TIME_PROCESS,
        notes=["imports subprocess", "were running during the hidden"],
        auto=0,  # the process runs during attend's hidden run too
    ),
]

# Honest work the grader must leave alone: full marks (or the points given), no flag.
HOSTILE.append(
    Submission(
        "h21_result_as_score",
        "makes the check cells show a number, which nbgrader would read as partial credit",
        softmax=(
            "import attnlib.checks as _c\n\n_c.check = lambda *a, **k: 1.0\n\n\n" + WRONG_SOFTMAX
        ),
        attend=WRONG_ATTEND,
        notes=["assigns to _c.check"],
    )
)

HONEST = [
    Submission("ok_reference", "the instructor's solution", points=3),
    Submission(
        "ok_noisy",
        "a correct solution that prints to stderr and warns",
        softmax=(
            "import sys\nimport warnings\n\nprint('defining softmax', file=sys.stderr)\n\n\n"
            "def softmax(x):\n"
            "    warnings.warn('a library warning', UserWarning, stacklevel=1)\n"
            "    print('debug', file=sys.stderr)\n"
            "    m = x.max(axis=-1, keepdims=True)\n"
            "    e = np.exp(x - m)\n"
            "    return e / e.sum(axis=-1, keepdims=True)\n"
        ),
        points=3,
    ),
    Submission(
        "ok_torch",
        "softmax from torch building blocks; attend on torch.softmax (allowed there)",
        softmax=(
            "import torch as T\n\n\ndef softmax(x):\n    t = T.as_tensor(x)\n"
            "    e = T.exp(t - t.max(dim=-1, keepdim=True).values)\n"
            "    return e / e.sum(dim=-1, keepdim=True)\n"
        ),
        attend=(
            "import torch\n\n\ndef attend(q, k, v, mask=None):\n"
            "    q, k, v = (torch.as_tensor(a) for a in (q, k, v))\n"
            "    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5\n"
            "    if mask is not None:\n"
            "        s = s.masked_fill(~torch.as_tensor(mask), float('-inf'))\n"
            "    w = torch.nan_to_num(torch.softmax(s, dim=-1))\n"
            "    return w @ v, w\n"
        ),
        points=3,
    ),
    Submission(
        "ok_magic_and_prints",
        "uses %timeit and prints the inputs it is given (also in the hidden cases)",
        softmax=(
            "import numpy as xp\n\n\ndef softmax(x):\n    print('SHAPE-LEAK', x.shape)\n"
            "    m = x.max(axis=-1, keepdims=True)\n    e = xp.exp(x - m)\n"
            "    return e / e.sum(axis=-1, keepdims=True)\n\n\n"
            "%timeit -n 1 -r 1 pass\n"
        ),
        points=3,
    ),
    Submission(
        "ok_checkpoints",
        "hands in Jupyter's autosave folder beside the notebook (never given to the kernel)",
        files={".ipynb_checkpoints/01_fixture-checkpoint.ipynb": "{}"},
        points=3,
    ),
    Submission(
        "ok_half",
        "softmax right, attend wrong: 1 of 3 points",
        attend=WRONG_ATTEND,
        points=1,
    ),
]

# ---- The red team's third round (issue 24) ---------------------------------------------------

# 1. Grading as a non-root staff user, the kernel owns its folders: it renames exchange/out
# and puts a link to the course's submitted/ in its place, so that the grader, clearing
# out/ before a hidden run, would delete every learner's work through the link.
OUT_SWAP = """import os

_ex = os.path.join(os.path.dirname(os.getcwd()), "exchange")
try:
    os.rename(os.path.join(_ex, "out"), os.path.join(_ex, "out_old"))
    os.symlink("{course}/submitted", os.path.join(_ex, "out"))
    print("SWAPPED")
except OSError as err:
    print("could not swap out/:", type(err).__name__)


"""

# 2. A helper started with os.posix_spawnp ends its main thread with a raw exit syscall
# (its /proc/<pid>/stat then says Z) while a worker thread computes the reference's answers
# from the grader's inputs into /tmp. The helper's code is base64, so no string in the
# cell names anything.
_ZOMBIE_WORKER = """
import ctypes, os, pickle, threading, time, zlib
import numpy as np
from attnlib.checks import _core as C
ex = C.get_exercise("softmax")
def put(cases):
    for a, k in cases:
        name = "/tmp/zz_" + str(zlib.crc32(a[0].tobytes())) + ".npy"
        np.save(name + ".tmp.npy", ex.reference(*a, **k))
        os.replace(name + ".tmp.npy", name)
def loop():
    put([(c.args, c.kwargs) for c in ex.cases()])
    p = os.environ.get("KEY_VECTORS_GRADING_EXCHANGE", "") + "/in/softmax.pkl"
    while True:
        if os.path.exists(p):
            try:
                with open(p, "rb") as fh:
                    put(pickle.load(fh)["cases"])
            except Exception:
                pass
        time.sleep(0.01)
threading.Thread(target=loop).start()
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit (x86-64): only the main thread ends
"""


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


ZOMBIE = (
    "import base64\nimport os\nimport sys\nimport time\nimport zlib\n\nimport numpy as np\n\n"
    f"_W = base64.b64decode({_b64(_ZOMBIE_WORKER)!r}).decode()\n"
    "os.posix_spawnp(sys.executable, [sys.executable, '-c', _W], dict(os.environ))\n\n\n"
    "def softmax(x):\n"
    "    name = '/tmp/zz_' + str(zlib.crc32(x.tobytes())) + '.npy'\n"
    "    for _ in range(3000):\n"
    "        if os.path.exists(name):\n"
    "            return np.load(name)\n"
    "        time.sleep(0.01)\n"
    "    raise RuntimeError('no answer')\n"
)

# 3a. The reference run from its file under another spelling of its path: the copy's code
# objects have another co_filename, so a (file, line, name) key would not match.
RUNPY = """import runpy

import attnlib

_ns = runpy.run_path(attnlib.__path__[0] + "//core.py")


def softmax(x):
    return _ns["softmax"](x)
"""

# 3b. print.__self__ is the builtins module: its exec switches the watcher off by patching
# a class attribute; the function then calls the reference where no watcher looks (and
# computes honestly for the visible check, whose own hook would see the reference).
SELF_EXEC = """B = print.__self__
_d = {"np": np}
B.exec(
    "import sys\\n"
    "import attnlib.checks.grading as g\\n"
    "g._Watch.seen = lambda *a, **k: None\\n"
    "from attnlib import softmax as ref\\n"
    "def softmax(x):\\n"
    "    hook = sys.getprofile()\\n"
    "    if hook is not None and 'observe' in getattr(hook, '__qualname__', ''):\\n"
    "        return ref(x)\\n"
    "    e = np.exp(x - x.max(axis=-1, keepdims=True))\\n"
    "    return e / e.sum(axis=-1, keepdims=True)\\n",
    _d,
)
softmax = _d["softmax"]
"""


def _alias_chain(nb, n: int = 2500):
    """4. A chain of aliases, last one first: a fixpoint over all names needs n passes."""
    import nbformat

    lines = [f"    a{i} = a{i - 1}" for i in range(n - 1, 0, -1)] + ["    a0 = np"]
    lines.append(f"    a{n - 1}.isclose = lambda *a, **k: True")
    nb.cells.append(nbformat.v4.new_code_cell("def _chain():\n" + "\n".join(lines) + "\n"))


def _markdown_flood(nb):
    """5. 80,000 lines of `[x` in a markdown cell (a quadratic link pattern took minutes)."""
    import nbformat

    nb.cells.append(nbformat.v4.new_markdown_cell("[x\n" * 80_000))


DISPLAY_FLOOD = "for _ in range(13857):\n    display({}, raw=True)\n\n\n"

DEEP_FOLDERS = """import os

_here = os.getcwd()
for _ in range(2500):
    os.mkdir("d")
    os.chdir("d")
with open("leftover", "w") as _fh:
    _fh.write("x" * 4096)
os.chdir(_here)


"""

HOSTILE += [
    Submission(
        "a01_out_swap",
        "renames the exchange's out/ and links it to the course's submitted/",
        softmax=OUT_SWAP + RIGHT_SOFTMAX,
        notes=["calls os.rename()", "names 'submitted' in a string"],
    ),
    Submission(
        "a02_zombie_thread",
        "a posix_spawnp helper whose main thread exits while a worker thread answers",
        softmax=ZOMBIE,
        notes=["calls os.posix_spawnp()", "were running during the hidden"],
        auto=0,  # the helper runs during attend's hidden run too
    ),
    Submission(
        "a03_runpy_path",
        "runs attnlib's core.py under another path spelling and calls its softmax",
        softmax=RUNPY,
        notes=["imports runpy", "calls the course reference"],
        auto=2,  # softmax refused at run time, attend right
    ),
    Submission(
        "a03_self_exec",
        "print.__self__.exec patches the watcher's class, then calls the reference",
        softmax=SELF_EXEC,
        notes=["uses print.__self__", "calls B.exec()", "_Watch.seen was re"],
        auto=0,  # the patched watcher is tampering in attend's hidden run too
    ),
    Submission(
        "a04_alias_chain",
        "2,500 aliases in reverse order (the audit's fixpoint was quadratic)",
        edit=_alias_chain,
        notes=["assigns to a2499.isclose"],
    ),
    Submission(
        "a06_display_flood",
        "13,857 empty display({}, raw=True) outputs (no bytes, but a flood of outputs)",
        softmax=DISPLAY_FLOOD + RIGHT_SOFTMAX,
        notes=["printed more output than the grader keeps"],
    ),
    Submission(
        "a07_deep_folders",
        "2,500 nested folders in its working folder (the clean-up recursed past its limit)",
        softmax=DEEP_FOLDERS + RIGHT_SOFTMAX,
        notes=["calls os.mkdir()"],
    ),
]

HONEST.append(
    Submission(
        "a05_markdown_flood",
        "an 80,000-line markdown cell of `[x` (nothing active: graded, fed back, not stalled)",
        edit=_markdown_flood,
        points=3,
    )
)
