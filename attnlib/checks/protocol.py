"""The grading protocol: what the kernel side and the grader side of the hidden tests share.

Both sides import this module (and nothing of the other side): the kernel side
(:mod:`attnlib.checks.grading`, in the learner's kernel) runs a learner's function on the
grader's inputs and writes plain data to the exchange folder; the grader side
(:mod:`kvstaff.grader.judging`, outside the sandbox) writes the inputs, reads the
outputs back and decides. What they agree on lives here:

* the exchange folder's environment variable and layout, the manifest's name and the
  limits the grader reads within;
* the tags in failure messages the grading driver reads (``[needs-review]``,
  ``[calls-reference]``);
* the policy: which functions a solution of an exercise may not call
  (:func:`refused_calls`: the course's reference and its library equivalents);
* what an observation is (:class:`Observation`, :class:`Raised`) and how one is judged
  against the reference (:func:`judge_observation`, :class:`Verdict`) — the grader does it
  on what it read back, :func:`attnlib.checks.grading.verify` in-process elsewhere;
* how a process counts as running (:func:`process_state`: any live thread).

The exchange folder::

    <exchange>/in/<exercise>.pkl            written by the grader just before a hidden run
    <exchange>/out/<exercise>/manifest.json written by record() in the kernel, with N.npy

In the sandbox, in/ belongs to root and is read-only for the kernel; out/ is the kernel's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from attnlib.checks import _core

TAMPER_TAG = "[needs-review]"
REFERENCE_TAG = "[calls-reference]"

EXCHANGE_ENV = "KEY_VECTORS_GRADING_EXCHANGE"
# "record" in the grader's kernel: a failing check names every cause at once and ends with
# the ids the class report reads back (attnlib.checks.check; a learner's kernel asks first)
FEEDBACK_ENV = "ATTNLIB_FEEDBACK"
MANIFEST = "manifest.json"
MAX_FILE_BYTES = 64 * 2**20  # one output array
MAX_EXERCISE_BYTES = 128 * 2**20  # all the arrays of one exercise's hidden cases
MAX_MANIFEST_BYTES = 2**20


def exchange_folder() -> Path | None:
    """The exchange folder when this kernel is being graded (set by the grader)."""
    value = os.environ.get(EXCHANGE_ENV)
    return Path(value) if value else None


_NAME_OK = re.compile(r"[^A-Za-z0-9_.]")


def clean_name(name: str) -> str:
    return _NAME_OK.sub("_", str(name))[:60] or "?"


def tamper_error(exercise: str, problems: list[str]) -> AssertionError:
    shown = "; ".join(problems[:5]) + (
        f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    )
    return AssertionError(
        f"✘ {exercise}: {TAMPER_TAG} the hidden tests were not run because the testing "
        f"machinery in this kernel was changed: {shown}"
    )


# ---- processes: running means any live thread ---------------------------------------------

_listdir, _open = os.listdir, open  # bound now: the kernel side calls this after a learner ran


def process_state(pid: int, state: str, proc: str = "/proc") -> str:
    """The state of process ``pid`` counting all its threads: ``state`` (its main thread's,
    from ``/proc/<pid>/stat``) unless that is ``Z``/``X`` and another thread still runs.

    A helper that ends its main thread with a raw exit syscall shows ``Z`` while a worker
    thread of it keeps computing: the grader and the kernel read ``/proc/<pid>/task/*``.
    Shared by both sides (the grader reads the host's /proc, the kernel its own).
    """
    if state not in "ZX":
        return state
    try:
        tasks = _listdir(f"{proc}/{pid}/task")
    except OSError:
        return state
    for tid in tasks:
        try:
            with _open(f"{proc}/{pid}/task/{tid}/stat") as fh:
                line = fh.read()
        except OSError:
            continue
        task_state = line[line.rfind(")") + 2 :].split()[:1]
        if task_state and task_state[0] not in "ZX":
            return task_state[0]
    return state


# ---- the policy: what a solution may not call ---------------------------------------------

_SOFTMAX_EQUIVALENTS = (
    "torch.softmax",
    "torch.log_softmax",
    "torch._softmax",
    "torch._log_softmax",
    "torch.ops.aten.softmax",
    "torch.ops.aten._softmax",
    "torch.ops.aten.log_softmax",
    "torch.ops.aten._log_softmax",
    "torch.ops.aten.special_softmax",
    "torch.ops.aten.special_log_softmax",
    "torch._C._nn.softmax",
    "torch._C._nn.log_softmax",
    "torch.special.softmax",
    "torch.special.log_softmax",
    "torch.nn.functional.softmax",
    "torch.nn.functional.log_softmax",
    "torch.nn.functional.softmin",
    "torch.Tensor.softmax",
    "torch.Tensor.log_softmax",
    "scipy.special.softmax",
    "scipy.special.log_softmax",
)
_ATTENTION_EQUIVALENTS = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.ops.aten.scaled_dot_product_attention",
    "torch.ops.aten._scaled_dot_product_attention_math",
    "torch.ops.aten._scaled_dot_product_flash_attention",
    "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu",
    "torch.ops.aten._scaled_dot_product_efficient_attention",
    "torch.ops.aten._scaled_dot_product_cudnn_attention",
    "torch.ops.aten._native_multi_head_attention",
    "torch._native_multi_head_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention.forward",
)
_AUTOGRAD = (
    "torch.autograd.grad",
    "torch.autograd.backward",
    "torch.autograd.functional.vjp",
    "torch.autograd.functional.jacobian",
    "torch.func.grad",
    "torch.func.vjp",
    "torch.func.jacrev",
    "torch.func.jacfwd",
)
_LINEAR = ("torch.nn.functional.linear", "torch.nn.functional.bilinear")

#: The library functions that do, in one call, what a course reference does: refused
#: exactly where the reference is refused (an exercise's ``forbidden`` list), so that
#: ``torch.softmax`` earns nothing in the softmax exercise just as ``attnlib.softmax``
#: does, and stays allowed inside ``attend`` (whose references are attend's own).
LIBRARY_EQUIVALENTS: dict[str, tuple[str, ...]] = {
    "attnlib.core.softmax": _SOFTMAX_EQUIVALENTS,
    "attnlib.core._softmax_math": _SOFTMAX_EQUIVALENTS,
    "attnlib.core.attend": _ATTENTION_EQUIVALENTS,
    "attnlib.core._attend_math": _ATTENTION_EQUIVALENTS,
    "attnlib.core._attend_torch_fast": _ATTENTION_EQUIVALENTS,
    "attnlib.masks.causal_mask": ("torch.nn.Transformer.generate_square_subsequent_mask",),
    "attnlib.torch_mha.mha_forward": _ATTENTION_EQUIVALENTS,
    "attnlib.torch_mha.unpack_mha": (),
    "attnlib.projections.linear": _LINEAR,
    "attnlib.projections.project": _LINEAR,
    "attnlib.backprop.attention_backward": _AUTOGRAD,
    "attnlib.backprop.projection_grads": _AUTOGRAD,
    "attnlib.tasks.scaling.softmax_jacobian": _AUTOGRAD,
}

COURSE_REFERENCE = "the course's reference"
LIBRARY_EQUIVALENT = "a library function that computes what this exercise asks you to build"


def refused_calls(exercise: str, core=None) -> dict[str, str]:
    """Every function a solution of ``exercise`` may not call -> why (one of two kinds).

    The exercise's ``forbidden`` names (course references, and any library function it
    lists itself), plus the :data:`LIBRARY_EQUIVALENTS` of each course reference.
    """
    if core is None:
        core = _core
    refused: dict[str, str] = {}
    for dotted in core.get_exercise(exercise).forbidden:
        own = dotted.startswith("attnlib.")
        refused[dotted] = COURSE_REFERENCE if own else LIBRARY_EQUIVALENT
        for eq in LIBRARY_EQUIVALENTS.get(dotted, ()):
            refused.setdefault(eq, LIBRARY_EQUIVALENT)
    return refused


# ---- observations and verdicts ------------------------------------------------------------


class Raised:
    """A call that raised: its exception's class name and (shortened) message."""

    def __init__(self, name: str, message: str = ""):
        self.name, self.message = name, message


@dataclass
class Observation:
    """What a learner's function did on every case: outputs, refused calls, tampering."""

    outputs: list = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """The grader's decision on one exercise's hidden tests."""

    exercise: str
    ok: bool
    message: str = ""
    review: bool = False
    misconceptions: list[str] = field(default_factory=list)


def _replay(outputs: list):
    it = iter(list(outputs))

    def replay(*args, **kwargs):
        out = next(it)
        if isinstance(out, Raised):
            raise type(out.name, (Exception,), {})(out.message)
        return out

    return replay


def _calls_message(exercise: str, calls: list[str], refused: dict[str, str]) -> str:
    ours = [c for c in calls if refused.get(c) == COURSE_REFERENCE]
    libs = [c for c in calls if refused.get(c) != COURSE_REFERENCE]
    parts = []
    if ours:
        parts.append(f"the solution calls {COURSE_REFERENCE} ({', '.join(ours)})")
    if libs:
        parts.append(f"the solution calls {', '.join(libs)} ({LIBRARY_EQUIVALENT})")
    return f"✘ {exercise}: {REFERENCE_TAG} {'; '.join(parts)}; no credit for this exercise"


def judge_observation(exercise: str, obs: Observation, core=None) -> Verdict:
    """Compare an observation with the reference (of ``core``, default: this process's)."""
    if core is None:
        core = _core
    if obs.tampering:
        return Verdict(exercise, False, str(tamper_error(exercise, obs.tampering)), review=True)
    n = len(core.get_exercise(exercise).cases(hidden=True))
    if len(obs.outputs) != n:
        return Verdict(
            exercise,
            False,
            f"✘ {exercise}: {TAMPER_TAG} the hidden tests returned {len(obs.outputs)} "
            f"results for {n} cases",
            review=True,
        )
    report = core.run(exercise, _replay(obs.outputs), hidden=True)
    if not report.ok:
        ids = ", ".join(report.misconceptions)
        hint = f" (probable mistake: {ids})" if ids else ""
        return Verdict(
            exercise,
            False,
            f"✘ {exercise}: hidden tests failed {report.first_failure}{hint}",
            misconceptions=list(report.misconceptions),
        )
    refused = refused_calls(exercise, core)
    calls = [c for c in obs.calls if c in refused]
    if calls:
        return Verdict(exercise, False, _calls_message(exercise, calls, refused), review=True)
    return Verdict(exercise, True)
