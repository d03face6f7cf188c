#!/usr/bin/env bash
# Make sure bubblewrap (bwrap) is available: `make autograde` runs every learner's kernel in
# a bubblewrap sandbox, and tests/test_grading.py + tests/test_sandbox.py test that for real.
# CI (.ci/run) calls this before `make test`. As root on Debian/Ubuntu it installs the
# distribution's `bubblewrap` package; anywhere else it only says what is missing and exits 0:
# the sandbox tests are then skipped with the same reason (in CI, KEY_VECTORS_CI=1, it
# exits 1 instead, and the tests would fail: tests/pieces.py), and `make autograde` refuses to
# grade unless told --unsafe-no-sandbox.
set -uo pipefail

if command -v bwrap >/dev/null 2>&1; then
  echo "ensure_bubblewrap: found $(command -v bwrap) ($(bwrap --version 2>/dev/null))"
  exit 0
fi

if [ "$(id -u)" != "0" ]; then
  echo "ensure_bubblewrap: bubblewrap is not installed and we are not root; not installing it." >&2
  echo "ensure_bubblewrap: install it with 'sudo apt-get install bubblewrap' to grade in a sandbox." >&2
  [ "${KEY_VECTORS_CI:-}" = 1 ] && exit 1; exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure_bubblewrap: bubblewrap is not installed and apt-get is not available; skipping." >&2
  [ "${KEY_VECTORS_CI:-}" = 1 ] && exit 1; exit 0
fi

echo "ensure_bubblewrap: installing Debian's bubblewrap package (apt-get)"
export DEBIAN_FRONTEND=noninteractive
if { apt-get install -y -qq bubblewrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; }; then
  echo "ensure_bubblewrap: installed $(command -v bwrap)"
else
  echo "ensure_bubblewrap: apt-get could not install bubblewrap; the sandbox tests will be skipped." >&2
fi
command -v bwrap >/dev/null 2>&1 || { [ "${KEY_VECTORS_CI:-}" = 1 ] && exit 1; }
exit 0
