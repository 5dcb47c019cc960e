#!/usr/bin/env bash
# The demo, from a fresh clone: .venv, the real Kafka + PostgreSQL stack, `minruntime demo`.
# A stack this script started is stopped at the end; MINRUNTIME_DEMO_KEEP=1 keeps it running.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"

if ! minruntime stack status >/dev/null 2>&1 && [ "${MINRUNTIME_DEMO_KEEP:-0}" != "1" ]; then
  trap 'minruntime stack down' EXIT
fi
minruntime stack up
# A stack of three brokers or with a standby exports their addresses (`stack up --brokers 3
# --pg-standby`, docs/deployment.md); a MINRUNTIME_* variable set already wins.
stack_env="${MINRUNTIME_STACK_DIR:-$PWD/.stack}/stack.env"
if [ -f "$stack_env" ]; then
  while IFS= read -r line; do
    case "$line" in
      MINRUNTIME_*=*) name=${line%%=*}; [ -n "${!name:-}" ] || eval "export $line" ;;
    esac
  done < "$stack_env"
fi
minruntime demo "$@"
