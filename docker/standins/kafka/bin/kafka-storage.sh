#!/usr/bin/env bash
# Stand-in for the release's bin/kafka-storage.sh.
exec "$(dirname "$0")/kafka-run-class.sh" kafka.tools.StorageTool "$@"
