#!/usr/bin/env bash
# The whole test suite, from a fresh clone: .venv, the real Kafka + PostgreSQL stack, the
# quality gates (ruff, mypy --strict, import-linter) and every pytest suite.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k stack`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"

# Leave a stack that was already running alone; stop one this script started.
if ! minruntime stack status >/dev/null 2>&1; then
  trap 'minruntime stack down' EXIT
elif ! minruntime stack status | grep -q '^KUBECONFIG='; then
  trap 'minruntime stack down --kube' EXIT
fi
# --kube: the Kubernetes tests need the real API server; its first build (kube-apiserver + etcd
# with Go, a few minutes, cached in ~/.cache/minruntime) happens here rather than inside a test.
minruntime stack up --kube
# helm for the chart's tests (tests/e2e/test_helm_chart.py): built once with Go the same way.
minruntime stack tool helm >/dev/null
# promtool for the alerting rules' tests (tests/unit/test_monitoring_rules.py), the same way.
minruntime stack tool promtool >/dev/null
# Chromium for the simulation report's browser test (apt-get when missing; the test skips,
# saying why, when it cannot be installed).
bash scripts/chromium.sh >/dev/null || echo "==> no chromium: the browser test will skip"

echo "==> ruff format --check";  ruff format --check .
echo "==> ruff check";           ruff check .
echo "==> mypy --strict";        mypy
echo "==> import-linter";        lint-imports
echo "==> pytest";               pytest "$@"
echo "==> compose (podman)";     bash scripts/compose-check.sh
