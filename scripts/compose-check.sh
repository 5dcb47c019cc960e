#!/usr/bin/env bash
# docker-compose.yml and the Dockerfile built and run for real, with podman, on a machine with
# neither Docker nor an image registry (scripts/test.sh runs it; it needs root, as CI is).
#
# Each phase is timed; everything it starts is torn down on exit, success or failure:
#   tools     podman, runc, debootstrap (apt-get) if missing; podman's settings for this
#             sandbox (runc, ulimits) as a drop-in of its system-wide containers.conf;
#             podman-compose 1.6.0 in its own virtualenv
#   bases     stand-ins for python:3.11-slim, postgres:15 and apache/kafka:<version> from
#             Debian packages and Maven Central jars (docker/standins/), kept as podman images
#             and rebuilt only when their recipe changes
#   image     the project's image from the unchanged Dockerfile, offline (wheels fetched on
#             the host with constraints.txt, `podman build --pull=never --network=none`)
#   up        the compose services in dependency order (podman-compose up --no-deps, one
#             step at a time), the compose file's own health checks run by this script
#   check     the design tree produced through the `cli` service, running podgroups through
#             the published Kafka port, the protection state read back with SQL as the reader
#             role on the published PostgreSQL port, /readyz of the processor and the worker
#   down      containers, volumes and network removed; the images stay (cached)
# What this proves and what it cannot: docs/deployment.md#checked-with-podman-scriptscompose-checksh.
#
# The published ports stay clear of the local stack and the test suite (Kafka 9092-9097,
# PostgreSQL 5433, metrics 9400-9409): MINRUNTIME_COMPOSE_CHECK_KAFKA_PORT (29092),
# _POSTGRES_PORT (25433), _PROCESSOR_PORT (29400), _WORKER_PORT (29401).
# MINRUNTIME_COMPOSE_CHECK_REBUILD=1 rebuilds the stand-ins; MINRUNTIME_DEBIAN_MIRROR names the
# Debian mirror (default: the one apt's sources name; no host is written here, so with neither
# the check stops with one line); MINRUNTIME_COMPOSE_CHECK_KEEP=1 (debugging only) leaves the
# containers running.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PODMAN_COMPOSE_VERSION=1.6.0
MAVEN_DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1
PROJECT=minruntime-compose-check
CACHE=${MINRUNTIME_CACHE_DIR:-$HOME/.cache/minruntime}
PODMAN_CACHE=$CACHE/podman
SUITE=bookworm
BASE_IMAGE=localhost/minruntime-standin/debian:$SUITE-minbase
KAFKA_PORT=${MINRUNTIME_COMPOSE_CHECK_KAFKA_PORT:-29092}
POSTGRES_PORT=${MINRUNTIME_COMPOSE_CHECK_POSTGRES_PORT:-25433}
PROCESSOR_PORT=${MINRUNTIME_COMPOSE_CHECK_PROCESSOR_PORT:-29400}
WORKER_PORT=${MINRUNTIME_COMPOSE_CHECK_WORKER_PORT:-29401}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/minruntime-compose-check.XXXXXX")

say() { echo "==> compose-check: $*"; }
die() {
  echo "compose-check: error: $*" >&2
  exit 1
}

# -- phases and their times -------------------------------------------------------------------
PHASES=()
TIMES=()
STARTED=$(date +%s)
phase_started=$STARTED
phase() {
  local now
  now=$(date +%s)
  if [ ${#PHASES[@]} -gt 0 ]; then
    TIMES+=($((now - phase_started)))
  fi
  phase_started=$now
  if [ -n "${1:-}" ]; then
    PHASES+=("$1")
    say "$1"
  fi
}
print_times() {
  local i
  phase ""
  echo "compose-check: time per phase (s):"
  for i in "${!PHASES[@]}"; do
    printf '  %-8s %5s\n' "${PHASES[$i]}" "${TIMES[$i]:-?}"
  done
  printf '  %-8s %5s\n' total $(($(date +%s) - STARTED))
}

# -- containers of this check ----------------------------------------------------------------
FAILED=()
ctr() {
  podman ps -a --filter "label=io.podman.compose.project=$PROJECT" \
    --filter "label=io.podman.compose.service=$1" --format '{{.Names}}' | head -n 1
}
compose() { # ARGUMENTS...: podman-compose, its output in a log shown on failure; 5 minutes
  local log=$WORK/compose-$((++COMPOSE_STEPS)).log rc=0
  timeout --kill-after=30 300 "$PODMAN_COMPOSE" --project-name "$PROJECT" \
    -f "$ROOT/docker-compose.yml" "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 30 "$log" | sed 's/^/  | /' >&2
    [ "$rc" != 124 ] || die "podman-compose $* did not finish within 300 s (log: $log)"
    die "podman-compose $* failed (full log: $log)"
  fi
}
COMPOSE_STEPS=0
show_failing_containers() {
  local name status code health
  podman ps -a --filter "label=io.podman.compose.project=$PROJECT" \
    --format '{{.Names}}' 2>/dev/null | while read -r name; do
    read -r status code health < <(podman inspect --format \
      '{{.State.Status}} {{.State.ExitCode}} {{if .State.Health}}{{.State.Health.Status}}{{else}}-{{end}}' \
      "$name" 2>/dev/null || echo "gone 0 -")
    if [ "$status" != running ] && [ "$code" = 0 ] && [[ " ${FAILED[*]} " != *" $name "* ]]; then
      continue # a one-shot that succeeded
    fi
    if [ "$status" = running ] && [[ " ${FAILED[*]} " != *" $name "* ]]; then
      continue
    fi
    echo "---- $name ($status, exit $code, health $health): last 60 lines of its log" >&2
    podman logs --tail 60 "$name" 2>&1 | sed 's/^/  | /' >&2 || true
  done
}
project_objects() { # the containers, volumes and networks of this check, one id a line
  podman ps -aq --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null || true
  podman volume ls -q --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null || true
  podman network ls -q --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null || true
}
stop_services() { # SERVICE...: stop their running containers (SIGTERM, 10 s, then SIGKILL)
  local service ids=()
  for service; do
    mapfile -t -O "${#ids[@]}" ids < <(podman ps -q \
      --filter "label=io.podman.compose.project=$PROJECT" \
      --filter "label=io.podman.compose.service=$service" 2>/dev/null || true)
  done
  if [ ${#ids[@]} -gt 0 ]; then
    podman stop --time 10 "${ids[@]}" >/dev/null 2>&1 || true
  fi
}
teardown() {
  local ids
  # Dependents before what they depend on, as Compose stops them: a processor or worker whose
  # Kafka is already gone does not finish within the 10 s.
  stop_services cli processor requeue-worker snapshotter
  stop_services migrate kafka postgres
  # Then the containers, with their anonymous volumes (the images' VOLUMEs that the compose
  # file does not name: `down` would leave them behind).
  ids=$(podman ps -aq --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null || true)
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086
    podman rm --force --volumes --time 10 $ids >/dev/null 2>&1 || true
  fi
  if [ -n "${PODMAN_COMPOSE:-}" ] && [ -x "$PODMAN_COMPOSE" ]; then
    timeout 120 "$PODMAN_COMPOSE" --project-name "$PROJECT" -f "$ROOT/docker-compose.yml" \
      down --volumes --timeout 10 >>"$WORK/down.log" 2>&1 || true
  fi
  # Whatever is left (a run killed half-way): by the project's label.
  ids=$(podman volume ls -q --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null || true)
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086
    podman volume rm --force $ids >/dev/null 2>&1 || true
  fi
  ids=$(podman network ls -q --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null || true)
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086
    podman network rm --force $ids >/dev/null 2>&1 || true
  fi
}
on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  if command -v podman >/dev/null 2>&1; then
    if [ "$rc" != 0 ]; then
      show_failing_containers || true
    fi
    if [ "${MINRUNTIME_COMPOSE_CHECK_KEEP:-}" = 1 ]; then
      say "MINRUNTIME_COMPOSE_CHECK_KEEP=1: the containers of project $PROJECT are left running"
    else
      phase down
      teardown
      if [ -n "${VOLUMES_BEFORE+set}" ]; then
        left=$(comm -13 <(echo "$VOLUMES_BEFORE") <(podman volume ls -q | sort))
        if [ -n "$left" ]; then
          echo "compose-check: error: volumes left after the teardown: $(tr "\n" " " <<<"$left")" >&2
          rc=1
        fi
      fi
      if [ -n "$(project_objects)" ]; then
        echo "compose-check: error: containers, volumes or networks of $PROJECT are left" \
          "after the teardown: $(project_objects | tr '\n' ' ')" >&2
        rc=1
      fi
    fi
  fi
  print_times
  if [ "$rc" = 0 ]; then
    rm -rf "$WORK"
    echo "compose-check: OK"
  else
    echo "compose-check: FAILED (exit $rc; logs in $WORK)" >&2
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A command's output goes to a log; on failure, its tail and one line. At most 30 minutes.
logged() { # LOG WHAT COMMAND...
  local log=$WORK/$1 what=$2 rc=0
  shift 2
  timeout --kill-after=30 1800 "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 25 "$log" | sed 's/^/  | /' >&2
    [ "$rc" != 124 ] || what="$what: timed out after 1800 s,"
    die "$what failed (full log: $log)"
  fi
}

# A content hash of files (relative to the checkout) and extra words.
content_key() { # WORDS FILES...
  local words=$1
  shift
  {
    echo "$words"
    if [ $# -gt 0 ]; then (cd "$ROOT" && sha256sum "$@"); fi
  } | sha256sum | cut -c1-16
}
image_key() { podman image inspect --format '{{index .Labels "minruntime.standin.key"}}' "$1" 2>/dev/null || true; }
fresh() { [ "${MINRUNTIME_COMPOSE_CHECK_REBUILD:-}" != 1 ] && [ "$(image_key "$1")" = "$2" ]; }

# ==============================================================================================
phase tools
[ "$(id -u)" = 0 ] || die "run it as root (rootful podman, debootstrap), as CI does"
missing=()
for tool in podman runc debootstrap psql mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    case "$tool" in
      psql) missing+=(postgresql-client) ;;
      mvn) missing+=(maven) ;;
      *) missing+=("$tool") ;;
    esac
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} (apt-get)"
  logged apt.log "apt-get update" apt-get update -qq
  logged apt.log "apt-get install ${missing[*]}" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# crun (podman's default where installed) cannot raise RLIMIT_NOFILE past this sandbox's hard
# limit (20000) nor run on its hybrid cgroups; runc can, given ulimits within the limits. A
# drop-in, read after /etc/containers/containers.conf, leaves that file's settings alone.
conf=/etc/containers/containers.conf.d/50-minruntime-compose-check.conf
want='# Written by scripts/compose-check.sh (minruntime): what podman needs in this sandbox.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"'
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
  mkdir -p "$(dirname "$conf")"
  printf '%s\n' "$want" >"$conf"
fi
runtime=$(podman info --format '{{.Host.OCIRuntime.Name}}')
[ "$runtime" = runc ] || die "podman uses the runtime $runtime, not runc (see $conf)"

PODMAN_COMPOSE=$PODMAN_CACHE/podman-compose-$PODMAN_COMPOSE_VERSION/bin/podman-compose
if ! "$PODMAN_COMPOSE" --version 2>/dev/null | grep -q "version $PODMAN_COMPOSE_VERSION"; then
  say "installing podman-compose $PODMAN_COMPOSE_VERSION into its own virtualenv"
  rm -rf "$PODMAN_CACHE/podman-compose-$PODMAN_COMPOSE_VERSION"
  logged pip.log "creating podman-compose's virtualenv" \
    python3 -m venv "$PODMAN_CACHE/podman-compose-$PODMAN_COMPOSE_VERSION"
  # Its dependencies (PyYAML, python-dotenv) at the project's pins.
  logged pip.log "pip install podman-compose" \
    "$PODMAN_CACHE/podman-compose-$PODMAN_COMPOSE_VERSION/bin/pip" install --quiet \
    -c constraints.txt "podman-compose==$PODMAN_COMPOSE_VERSION"
fi
# The host's minruntime produces through the published port; its code fetches the Kafka jars.
logged bootstrap.log "scripts/bootstrap.sh" bash scripts/bootstrap.sh
# What a run killed half-way left; the volumes there are before this run (none of its own
# may be left after it).
teardown
VOLUMES_BEFORE=$(podman volume ls -q | sort)

# ==============================================================================================
phase bases
mirror=${MINRUNTIME_DEBIAN_MIRROR:-$(
  sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*\/debian\)\/*$/\1/p' \
    /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1
)}
mirror=${mirror:-$(sed -n "s/^deb[[:space:]]\+\(http[^[:space:]]*\)[[:space:]]\+${SUITE}[[:space:]].*/\1/p" \
  /etc/apt/sources.list 2>/dev/null | head -n 1)}
if [[ -z $mirror ]]; then
  echo "compose-check: no Debian mirror: set MINRUNTIME_DEBIAN_MIRROR or name one in apt's sources (/etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list)" >&2
  exit 2
fi

# debootstrap's minimal Debian, made to look like debian:bookworm-slim: apt's sources with the
# updates and security suites, no documentation, no recommended packages.
build_base() { # KEY
  local rootfs=$PODMAN_CACHE/rootfs.$$
  rm -rf "$rootfs"
  mkdir -p "$PODMAN_CACHE"
  logged debootstrap.log "debootstrap $SUITE from $mirror" \
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror"
  cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror $SUITE main
deb $mirror $SUITE-updates main
deb ${mirror%/debian}/debian-security $SUITE-security main
EOF
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/minruntime-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
EOF
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    >"$rootfs/etc/apt/apt.conf.d/90minruntime-no-recommends"
  : >"$rootfs/etc/resolv.conf"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*.log "$rootfs"/tmp/*
  tar -C "$rootfs" -c . | podman import \
    --change "LABEL minruntime.standin.key=$1" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$BASE_IMAGE" >"$WORK/import.log" 2>&1
  rm -rf "$rootfs"
}
base_key=$(content_key "$SUITE minbase $mirror $(declare -f build_base | sha256sum)")
if fresh "$BASE_IMAGE" "$base_key"; then
  say "base $BASE_IMAGE: cached"
else
  say "base $BASE_IMAGE: debootstrap $SUITE from $mirror"
  build_base "$base_key"
fi

# A stand-in is tagged with the upstream name (what the Dockerfile and the compose file ask
# for: docker.io/...) and under localhost/minruntime-standin/ (what it really is).
standin_tag() { # REFERENCE
  echo "localhost/minruntime-standin/$1"
}
standin() { # NAME CONTEXT KEY REFERENCE
  local name=$1 context=$2 key=$3 reference=$4 upstream
  case "$reference" in */*) upstream=docker.io/$reference ;; *) upstream=docker.io/library/$reference ;; esac
  if fresh "$(standin_tag "$reference")" "$key" && podman image exists "$upstream"; then
    say "stand-in for $reference: cached"
    return
  fi
  say "stand-in for $reference: building"
  logged "standin-$name.log" "building the $name stand-in" \
    podman build --pull=never --network=host --build-arg "BASE=$BASE_IMAGE" \
    --label "minruntime.standin.key=$key" --label minruntime.standin=true \
    --tag "$upstream" --tag "$(standin_tag "$reference")" "$context"
}

python_from=$(sed -n 's/^FROM[[:space:]]\+\(python:[^[:space:]]*\).*/\1/p' Dockerfile)
[ -n "$python_from" ] || die "the Dockerfile has no FROM python:..."
standin python docker/standins/python \
  "$(content_key "$base_key $python_from" docker/standins/python/*)" "$python_from"

postgres_from=$(sed -n 's/^[[:space:]]*image:[[:space:]]*\(postgres:[^[:space:]]*\)$/\1/p' docker-compose.yml)
[ -n "$postgres_from" ] || die "docker-compose.yml names no postgres image"
standin postgres docker/standins/postgres \
  "$(content_key "$base_key $postgres_from" docker/standins/postgres/*)" "$postgres_from"

kafka_from=$(sed -n 's/^[[:space:]]*image:[[:space:]]*\(apache\/kafka:[^[:space:]]*\)$/\1/p' docker-compose.yml)
[ -n "$kafka_from" ] || die "docker-compose.yml names no apache/kafka image"
kafka_version=${kafka_from#apache/kafka:}
kafka_libs=$CACHE/kafka-$kafka_version/libs
if [ ! -f "$kafka_libs/.complete" ]; then
  # The local stack's own fetch (Maven Central), into the same cache.
  say "fetching the Kafka $kafka_version jars (the local stack's cache)"
  logged kafka-jars.log "fetching the Kafka jars" env MINRUNTIME_KAFKA_VERSION="$kafka_version" \
    .venv/bin/python -c 'from minruntime.settings import Settings
from minruntime_dev.stack.kafka import KafkaNode
KafkaNode(Settings()).ensure_jars()'
fi
[ -f "$kafka_libs/.complete" ] || die "no Kafka $kafka_version jars in $kafka_libs"
# The broker's jars lack the command-line tools (the health check's kafka-broker-api-versions).
kafka_tools=$PODMAN_CACHE/kafka-tools-$kafka_version/kafka-tools-$kafka_version.jar
if [ ! -s "$kafka_tools" ]; then
  logged mvn.log "fetching kafka-tools $kafka_version from Maven Central" \
    env -C "$WORK" mvn -q -B "$MAVEN_DEPENDENCY_PLUGIN:copy" \
    "-Dartifact=org.apache.kafka:kafka-tools:$kafka_version" \
    "-DoutputDirectory=$(dirname "$kafka_tools")"
fi
mapfile -t kafka_recipe < <(find docker/standins/kafka -type f | sort)
kafka_key=$(content_key "$base_key $kafka_from $(cd "$kafka_libs" && ls) $(basename "$kafka_tools")" \
  "${kafka_recipe[@]}")
# The build context: the recipe and the jars.
context=$WORK/kafka-context
cp -r docker/standins/kafka "$context"
mkdir -p "$context/libs"
cp "$kafka_libs"/*.jar "$kafka_tools" "$context/libs/"
standin kafka "$context" "$kafka_key" "$kafka_from"

# ==============================================================================================
phase image
wheels_key=$(content_key "$python_from" pyproject.toml constraints.txt)
wheels=$PODMAN_CACHE/wheels-$wheels_key
if [ ! -f "$wheels/.complete" ]; then
  say "downloading the wheels (constraints.txt, the build backend)"
  rm -rf "$wheels"
  build_requires=$(.venv/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
  mapfile -t build_requires <<<"$build_requires"
  logged wheels.log "pip download" .venv/bin/pip download --quiet --disable-pip-version-check \
    -c constraints.txt -d "$wheels" . "${build_requires[@]}"
  touch "$wheels/.complete"
fi
printf '[global]\nno-index = true\nfind-links = /wheels\n' >"$WORK/pip.conf"
say "podman build (the Dockerfile, offline)"
logged image.log "building the image from the Dockerfile" \
  podman build --pull=never --network=none \
  --volume "$wheels:/wheels:ro" --volume "$WORK/pip.conf:/etc/pip.conf:ro" \
  --label minruntime.compose-check=true --tag localhost/minruntime:local --file Dockerfile .
# Earlier builds of the project's image and of the stand-ins, no longer tagged.
for label in minruntime.compose-check=true minruntime.standin=true; do
  podman image prune --force --filter "label=$label" >/dev/null 2>&1 || true
done

# ==============================================================================================
phase up
for port in "$KAFKA_PORT" "$POSTGRES_PORT" "$PROCESSOR_PORT" "$WORKER_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "port $port is taken; choose others (MINRUNTIME_COMPOSE_CHECK_*_PORT)"
  fi
done
# The compose file's own variables: host ports away from the local stack, loopback only, and
# generated passwords (none given).
export MINRUNTIME_KAFKA_HOST_PORT=$KAFKA_PORT MINRUNTIME_POSTGRES_HOST_PORT=$POSTGRES_PORT \
  MINRUNTIME_PROCESSOR_HOST_PORTS=$PROCESSOR_PORT MINRUNTIME_WORKER_HOST_PORTS=$WORKER_PORT
unset MINRUNTIME_BIND_ADDRESS MINRUNTIME_OWNER_PASSWORD MINRUNTIME_RUNTIME_PASSWORD \
  MINRUNTIME_READER_PASSWORD

wait_healthy() { # SERVICE SECONDS: the compose file's health check, run until it passes
  local service=$1 limit=$2 name state last deadline
  name=$(ctr "$service")
  [ -n "$name" ] || die "no container for the service $service"
  deadline=$((SECONDS + limit))
  while :; do
    state=$(podman inspect --format '{{.State.Status}} (exit {{.State.ExitCode}})' "$name")
    if [[ "$state" != running* ]]; then
      FAILED+=("$name")
      die "$service stopped before it was healthy: $state"
    fi
    if last=$(timeout 60 podman healthcheck run "$name" 2>&1); then
      say "$service healthy ($((SECONDS + limit - deadline)) s)"
      return
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      FAILED+=("$name")
      die "$service not healthy after $limit s (its health check: ${last:-no output})"
    fi
    sleep 2
  done
}
wait_exited_ok() { # SERVICE SECONDS
  local service=$1 limit=$2 name code
  name=$(ctr "$service")
  [ -n "$name" ] || die "no container for the service $service"
  if ! code=$(timeout "$limit" podman wait "$name"); then
    FAILED+=("$name")
    die "$service did not finish within $limit s"
  fi
  if [ "$code" != 0 ]; then
    FAILED+=("$name")
    die "$service exited $code"
  fi
  say "$service exited 0"
}

# podman 4.3 cannot gate depends_on on health or on a one-shot's success, so each step is
# started alone (--no-deps) once the previous one is healthy or done, as Docker would. No
# override file: the one thing of the file podman cannot do, a host port range for one
# container port (the worker's), is a variable the check sets to one port.
say "kafka, postgres"
compose up --detach --no-deps --no-build kafka postgres
wait_healthy postgres 180
wait_healthy kafka 240
say "migrate"
compose up --detach --no-deps --no-build migrate
wait_exited_ok migrate 300
say "processor, requeue-worker, snapshotter"
compose up --detach --no-deps --no-build processor requeue-worker snapshotter
wait_healthy processor 240
wait_healthy requeue-worker 240

# ==============================================================================================
phase check
postgres=$(ctr postgres)
kafka=$(ctr kafka)
# The broker's data is in its volume, not in the image's default /tmp/kraft-combined-logs.
if ! podman exec "$kafka" test -s /var/lib/kafka/data/meta.properties; then
  FAILED+=("$kafka")
  die "Kafka keeps no data in the kafka-data volume (/var/lib/kafka/data)"
fi
# The generated passwords, as docs/deployment.md tells an operator to fetch them.
podman exec "$postgres" cat /credentials/pgpass >"$WORK/pgpass"
chmod 600 "$WORK/pgpass"
for role in minruntime_owner minruntime minruntime_reader; do
  grep -q "^\*:\*:\*:$role:." "$WORK/pgpass" || die "no generated password for $role in /credentials/pgpass"
done
reader="postgresql://minruntime_reader@127.0.0.1:$POSTGRES_PORT/minruntime?passfile=$WORK/pgpass&connect_timeout=10"
sql() { psql "$reader" -X -A -t -v ON_ERROR_STOP=1 -c "$1"; }
wait_sql() { # SQL EXPECTED SECONDS WHAT
  local got="" deadline=$((SECONDS + $3))
  while [ "$SECONDS" -lt "$deadline" ]; do
    got=$(sql "$1" 2>&1) || true
    [ "$got" = "$2" ] && return
    sleep 1
  done
  FAILED+=("$(ctr processor)")
  die "$4: expected '$2', got '$got'"
}

say "the design tree through the cli service (kafka:19092 on the compose network)"
# podman-compose 1.6 does not enable the profile of the service `run` names, as Docker Compose
# does: --profile does.
compose --profile cli run --rm --no-deps cli produce schemas/examples/design-tree.jsonl
wait_sql "SELECT count(*) FROM minruntime.queues WHERE name IN ('A','B','C','D','leaf1','leaf2','leaf3')" \
  7 120 "the design tree's queues in minruntime.queues"

say "three running podgroups from the host (localhost:$KAFKA_PORT, the advertised HOST listener)"
for leaf in leaf1 leaf2 leaf3; do
  cat <<EOF
- type: podgroup.submitted
  data: {uid: check-$leaf, name: check-$leaf, namespace: check, queue: $leaf, priority: 50, pods: [{name: p0, gpu: 1}]}
- type: podgroup.allocated
  data: {uid: check-$leaf, pods: [{name: p0, node: node-1}]}
EOF
done >"$WORK/podgroups.yaml"
mkdir -p "$WORK/stack"
logged produce.log "producing from the host to 127.0.0.1:$KAFKA_PORT" \
  env MINRUNTIME_KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_PORT" MINRUNTIME_STACK_DIR="$WORK/stack" \
  MINRUNTIME_KAFKA_SECURITY_PROTOCOL=PLAINTEXT .venv/bin/minruntime produce "$WORK/podgroups.yaml"

# The design document's answers (tests/e2e/test_pipeline.py), read by the reader role: preempt
# leaf1 → its own 300 s; leaf2 and leaf3 → B's 600 s; reclaim from leaf1: leaf2 → its 180 s,
# leaf3 → D's 60 s; every job started just now, so protected.
wait_sql "SELECT string_agg(concat_ws(' ', uid, min_runtime, resolved_from, is_protected), ', ' ORDER BY uid)
            FROM minruntime.preempt_protection WHERE uid LIKE 'check-%'" \
  "check-leaf1 00:05:00 leaf1 t, check-leaf2 00:10:00 B t, check-leaf3 00:10:00 B t" 120 \
  "minruntime.preempt_protection"
wait_sql "SELECT string_agg(concat_ws(' ', uid, min_runtime, resolved_from, is_protected), ', ' ORDER BY uid)
            FROM minruntime.reclaim_protection('leaf1') WHERE uid IN ('check-leaf2', 'check-leaf3')" \
  "check-leaf2 00:03:00 leaf2 t, check-leaf3 00:01:00 D t" 10 "minruntime.reclaim_protection('leaf1')"
wait_sql "SELECT count(*) FROM minruntime.dead_letters" 0 5 "no dead letter"
# The reader reads the views and nothing else; advisory locks are the service's alone.
for denied in "SELECT count(*) FROM minruntime_state.podgroup_state" "SELECT pg_try_advisory_lock(1)"; do
  if out=$(sql "$denied" 2>&1) || [[ "$out" != *"permission denied"* ]]; then
    die "the reader role was not refused: $denied ($out)"
  fi
done
say "SQL as minruntime_reader on 127.0.0.1:$POSTGRES_PORT: the expected protection state"

readyz() { # PORT WHAT
  if ! python3 -c 'import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=10) as answer:
    print(answer.status, answer.read().decode()[:200])' "http://127.0.0.1:$1/readyz" >"$WORK/readyz.out" 2>&1; then
    die "$2's /readyz on 127.0.0.1:$1: $(tail -n 1 "$WORK/readyz.out")"
  fi
  say "$2 /readyz on 127.0.0.1:$1: $(head -c 120 "$WORK/readyz.out" | tr '\n' ' ')"
}
readyz "$PROCESSOR_PORT" processor
readyz "$WORKER_PORT" requeue-worker
snapshotter=$(ctr snapshotter)
state=$(podman inspect --format '{{.State.Status}} {{.RestartCount}}' "$snapshotter")
if [ "$state" != "running 0" ]; then
  FAILED+=("$snapshotter")
  die "the snapshotter is not running steadily (state, restarts: $state)"
fi
