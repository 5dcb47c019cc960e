#!/usr/bin/env bash
# Debian's Chromium for the simulation report's browser test (tests/integration/
# test_simulate_page.py) and scripts/simulate-screenshot.sh: installed with apt-get when it is
# missing. Prints the browser's path; exits non-zero with a reason when it cannot be installed
# (the test then skips, saying why).
set -euo pipefail
for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; exit 0; fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium: not installed and no apt-get to install it" >&2; exit 1
fi
if [ "$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then
  echo "chromium: not installed, and installing it needs root" >&2; exit 1
fi
as_root=(); [ "$(id -u)" = 0 ] || as_root=(sudo -n)
echo "==> installing chromium (apt-get)" >&2
if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2; then
  "${as_root[@]}" apt-get update -qq >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi
command -v chromium
