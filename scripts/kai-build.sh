#!/usr/bin/env bash
# Build the real KAI-Scheduler (scheduler + binder) from a checkout of its public source, for the
# conformance suite (tests/conformance/). Usage: bash scripts/kai-build.sh SRC
#
# SRC is a git checkout of kai-scheduler/KAI-Scheduler. The Go module proxy refuses KAI's own
# module, so it is built from source; its dependencies come from the module proxy this machine's
# Go is configured with (`go env GOPROXY`). The result goes to ~/.cache/kai/<commit>/:
#   bin/kai-scheduler  bin/kai-binder  crds/*.yaml  COMMIT
# and ~/.cache/kai/current points at it. Nothing of KAI's enters this repository.
set -euo pipefail
src=${1:?usage: bash scripts/kai-build.sh SRC (a KAI-Scheduler source checkout)}
if [ ! -f "$src/go.mod" ] || ! grep -q 'kai-scheduler/KAI-scheduler' "$src/go.mod"; then
  echo "kai-build: error: $src is not a KAI-Scheduler source checkout (no go.mod of kai-scheduler/KAI-scheduler)" >&2
  exit 2
fi
command -v go >/dev/null || { echo "kai-build: error: go is not installed" >&2; exit 2; }
commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
cache=${KAI_CACHE:-$HOME/.cache/kai}
out="$cache/$commit"
if [ -x "$out/bin/kai-scheduler" ] && [ -x "$out/bin/kai-binder" ] && [ -f "$out/COMMIT" ]; then
  echo "kai-build: $out is already built"
else
  mkdir -p "$out/bin" "$out/crds"
  echo "==> building kai-scheduler and kai-binder at $commit (about 7 minutes on 2 cores from a cold cache)"
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$out/bin/kai-scheduler" ./cmd/scheduler)
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$out/bin/kai-binder" ./cmd/binder)
  cp "$src"/deployments/kai-scheduler/crds/*.yaml "$out/crds/"
  echo "$commit" > "$out/COMMIT"
fi
ln -sfn "$out" "$cache/current"
echo "kai-build: $out"
