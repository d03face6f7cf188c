"""``python -m kvstaff.sandbox``: can graded kernels be sandboxed here?

The sandbox itself is :mod:`kvstaff.grader.sandbox`; this entry point runs its
check (what it binds, the kernel's uid, or why it cannot start).
"""

from __future__ import annotations

from kvstaff.grader.sandbox import main

if __name__ == "__main__":
    raise SystemExit(main())
