#!/usr/bin/env bash
# The postgres:15 stand-in's entrypoint (scripts/compose-check.sh). Written for this project, it
# keeps the part of the official image's documented contract that docker-compose.yml and
# docker/postgres-entrypoint.sh rely on:
#   - started as root: PGDATA and /var/run/postgresql are given to postgres, then the script
#     runs again as postgres (gosu);
#   - POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE (not both), POSTGRES_USER (postgres),
#     POSTGRES_DB (= the user), POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD;
#   - only when PGDATA holds no database: initdb with that superuser and password, then
#     `host all all all <password_encryption>` appended to pg_hba.conf; a server on the unix
#     socket only (no TCP) while POSTGRES_DB is created and /docker-entrypoint-initdb.d/* run in
#     name order (*.sh executed if executable, else sourced; *.sql through psql); stopped;
#   - then `exec "$@"` (`postgres`: listen_addresses='*' from the sample configuration).
set -Eeo pipefail

# file_env VAR [DEFAULT]: VAR from itself, or from the file named by VAR_FILE.
file_env() {
  local var=$1 file_var="${1}_FILE" value=${2:-}
  if [ -n "${!var:-}" ] && [ -n "${!file_var:-}" ]; then
    echo "error: both $var and $file_var are set (but are exclusive)" >&2
    exit 1
  fi
  if [ -n "${!var:-}" ]; then
    value=${!var}
  elif [ -n "${!file_var:-}" ]; then
    value=$(<"${!file_var}")
  fi
  export "$var"="$value"
  unset "$file_var"
}

sql() {
  # psql on the unix socket as the superuser, stopping at the first error.
  local runner=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
  if [ -n "$POSTGRES_DB" ]; then
    runner+=(--dbname "$POSTGRES_DB")
  fi
  PGHOST='' PGHOSTADDR='' "${runner[@]}" "$@"
}

initialise() {
  if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
    echo "error: the database is uninitialized and no superuser password was given" \
      "(POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE)" >&2
    exit 1
  fi
  ls /docker-entrypoint-initdb.d/ >/dev/null
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of words, as in the official image
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    $POSTGRES_INITDB_ARGS
  local auth
  auth=$(postgres -C password_encryption)
  : "${POSTGRES_HOST_AUTH_METHOD:=$auth}"
  printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

  export PGPASSWORD=${PGPASSWORD:-$POSTGRES_PASSWORD}
  PGUSER=${PGUSER:-$POSTGRES_USER} pg_ctl -D "$PGDATA" \
    -o "-c listen_addresses='' -p ${PGPORT:-5432}" -w start
  local db=$POSTGRES_DB
  if [ -z "$(POSTGRES_DB='' sql --dbname postgres --set db="$db" --tuples-only \
    <<<"SELECT 1 FROM pg_database WHERE datname = :'db';")" ]; then
    POSTGRES_DB='' sql --dbname postgres --set db="$db" <<<'CREATE DATABASE :"db";'
  fi
  local f
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh)
        if [ -x "$f" ]; then
          echo "$0: running $f"
          "$f"
        else
          echo "$0: sourcing $f"
          # shellcheck disable=SC1090
          . "$f"
        fi
        ;;
      *.sql) echo "$0: running $f"; sql -f "$f" ;;
      *) echo "$0: ignoring $f" ;;
    esac
  done
  PGUSER=${PGUSER:-postgres} pg_ctl -D "$PGDATA" -m fast -w stop
  unset PGPASSWORD
  echo "PostgreSQL init process complete; ready for start up."
}

main() {
  if [ "${1:0:1}" = - ]; then
    set -- postgres "$@"
  fi
  if [ "$1" = postgres ]; then
    file_env POSTGRES_PASSWORD
    file_env POSTGRES_USER postgres
    file_env POSTGRES_DB "$POSTGRES_USER"
    file_env POSTGRES_INITDB_ARGS
    : "${POSTGRES_HOST_AUTH_METHOD:=}"
    mkdir -p "$PGDATA" /var/run/postgresql
    chmod 0700 "$PGDATA" || :
    chmod 3775 /var/run/postgresql || :
    if [ "$(id -u)" = 0 ]; then
      find "$PGDATA" /var/run/postgresql \! -user postgres -exec chown postgres '{}' +
      exec gosu postgres "${BASH_SOURCE[0]}" "$@"
    fi
    if [ -s "$PGDATA/PG_VERSION" ]; then
      echo "PostgreSQL Database directory appears to contain a database; Skipping initialization"
    else
      initialise
    fi
  fi
  exec "$@"
}

main "$@"
