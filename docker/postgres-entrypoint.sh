#!/bin/sh
# The postgres service's entrypoint (docker-compose.yml): passwords first, then the image's own.
#
# Each database password is the one given (OWNER_PASSWORD, RUNTIME_PASSWORD, READER_PASSWORD,
# POSTGRES_SUPERUSER_PASSWORD, from the host's MINRUNTIME_* variables) or, on first start, a
# random one; all are kept in the `credentials` volume (/credentials) and never printed:
#   /credentials/superuser   the superuser's, for the image's POSTGRES_PASSWORD_FILE
#   /credentials/roles       role:password lines, read by initdb.d/10-minruntime-roles.sh
#   /credentials/pgpass      libpq passfile (mode 0600, uid 10001: the service image's user),
#                            named by the services' URLs (?passfile=/credentials/pgpass)
set -eu
umask 077
dir=/credentials
mkdir -p "$dir"

random() { head -c 32 /dev/urandom | base64 | tr -d '/+=\n' | cut -c1-32; }

if [ ! -s "$dir/roles" ]; then
  {
    echo "minruntime_owner:${OWNER_PASSWORD:-$(random)}"
    echo "minruntime:${RUNTIME_PASSWORD:-$(random)}"
    echo "minruntime_reader:${READER_PASSWORD:-$(random)}"
  } > "$dir/roles"
fi
if [ ! -s "$dir/superuser" ]; then
  printf '%s\n' "${POSTGRES_SUPERUSER_PASSWORD:-$(random)}" > "$dir/superuser"
fi
sed 's/^/*:*:*:/' "$dir/roles" > "$dir/pgpass"
# The image's entrypoint runs initdb and its scripts as postgres (uid 999).
chown postgres:postgres "$dir/superuser" "$dir/roles"
chown 10001:10001 "$dir/pgpass"
chmod 0600 "$dir/superuser" "$dir/roles" "$dir/pgpass"
chmod 0755 "$dir"

export POSTGRES_PASSWORD_FILE="$dir/superuser"
exec docker-entrypoint.sh "$@"
