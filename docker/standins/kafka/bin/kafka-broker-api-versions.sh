#!/usr/bin/env bash
# Stand-in for the release's bin/kafka-broker-api-versions.sh (the compose health check).
exec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
