#!/usr/bin/env bash
# A screenshot of a simulation report, for people to look at:
#   bash scripts/simulate-screenshot.sh REPORT.html [OUT.png]
# REPORT.html is what `minruntime simulate ... --html REPORT.html` (or `minruntime demo`, next
# to its timeline SVG) writes. Chromium comes from scripts/chromium.sh (apt-get when missing);
# it runs headless with no network.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: bash scripts/simulate-screenshot.sh REPORT.html [OUT.png]" >&2; exit 2
fi
page="$(realpath "$1")"
out="$(realpath -m "${2:-${1%.html}.png}")"
browser="$(bash scripts/chromium.sh)"
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"$browser" --headless=new --no-sandbox --disable-gpu --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --proxy-server=127.0.0.1:9 --proxy-bypass-list='<-loopback>' \
  --user-data-dir="$profile" --hide-scrollbars --window-size=1280,1800 \
  --screenshot="$out" "file://$page" 2>/dev/null
echo "$out"
