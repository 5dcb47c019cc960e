#!/usr/bin/env bash
# Stand-in for the release's bin/kafka-topics.sh.
exec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.TopicCommand "$@"
