#!/usr/bin/env bash
# Stand-in for the release's bin/kafka-run-class.sh: one JVM with every jar of libs/, the
# release's default heap, GC and logging options (each overridable by the same variable).
set -euo pipefail
base_dir=$(cd "$(dirname "$0")/.." && pwd)
heap=${KAFKA_HEAP_OPTS:--Xmx256M}
jvm=${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true}
logging=${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$base_dir/config/tools-log4j2.yaml}
# shellcheck disable=SC2086 # the option variables are lists of words, as in the release
exec java $heap $jvm $logging -Dkafka.logs.dir="${LOG_DIR:-$base_dir/logs}" ${KAFKA_OPTS:-} \
  -cp "$base_dir/libs/*" "$@"
