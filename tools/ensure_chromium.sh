#!/usr/bin/env bash
# Make sure headless Chromium is available for tests/test_browser.py (the real-browser check).
# CI (.ci/run) calls this before `make test`. As root on Debian/Ubuntu it installs the
# distribution's `chromium` package; anywhere else it only says what is missing and exits 0:
# the browser test is then skipped with the same reason (in CI, KEY_VECTORS_CI=1, it exits 1
# instead, and the tests would fail: tests/pieces.py).
set -uo pipefail

for name in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$name" >/dev/null 2>&1; then
    echo "ensure_chromium: found $(command -v "$name")"
    exit 0
  fi
done

if [ "$(id -u)" != "0" ]; then
  echo "ensure_chromium: Chromium is not installed and we are not root; not installing it." >&2
  echo "ensure_chromium: install it with 'sudo apt-get install chromium' to run the browser test." >&2
  [ "${KEY_VECTORS_CI:-}" = 1 ] && exit 1; exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure_chromium: Chromium is not installed and apt-get is not available; skipping." >&2
  [ "${KEY_VECTORS_CI:-}" = 1 ] && exit 1; exit 0
fi

echo "ensure_chromium: installing Debian's chromium package (apt-get)"
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq && apt-get install -y -qq chromium; then
  echo "ensure_chromium: installed $(command -v chromium)"
else
  echo "ensure_chromium: apt-get could not install chromium; the browser test will be skipped." >&2
fi
command -v chromium >/dev/null 2>&1 || { [ "${KEY_VECTORS_CI:-}" = 1 ] && exit 1; }
exit 0
