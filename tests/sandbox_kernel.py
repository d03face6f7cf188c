"""A course kernel started in a bubblewrap sandbox, for the tests that talk to one."""

from __future__ import annotations

import contextlib

from kvstaff.grader import sandbox


@contextlib.contextmanager
def sandbox_kernel(box: sandbox.Sandbox, timeout: float = 60):
    """Start the ``key-vectors`` kernel in ``box``; yield ``(manager, client)``; shut it down."""
    from jupyter_core.utils import run_sync

    km = sandbox.SandboxKernelManager(kernel_name="key-vectors")
    km.use(box, threads=1)
    run_sync(km.start_kernel)()
    kc = km.client()
    try:
        kc.start_channels()
        run_sync(kc.wait_for_ready)(timeout=timeout)
        yield km, kc
    finally:
        kc.stop_channels()
        run_sync(km.shutdown_kernel)(now=True)


def wait(kc, msg_id: str, timeout: float = 30) -> tuple[str, list[str]]:
    """Wait until the request ``msg_id`` is done: its printed text and its error names."""
    from jupyter_core.utils import run_sync

    texts, errors = [], []
    while True:
        msg = run_sync(kc.get_iopub_msg)(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            texts.append(msg["content"]["text"])
        if msg["msg_type"] == "error":
            errors.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(texts), errors
