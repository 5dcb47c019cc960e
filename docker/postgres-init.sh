#!/bin/bash
# docker-entrypoint-initdb.d script of the postgres service (first start of an empty volume):
# the three roles of docs/storage.md#roles-and-privileges, made by the superuser, none with
# CREATEROLE; the database owned by minruntime_owner; advisory locks for the service only.
set -euo pipefail

psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password)
while IFS=: read -r role password; do
  "${psql[@]}" --dbname postgres -v role="$role" -v password="$password" <<'SQL'
CREATE ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD :'password';
SQL
done < /credentials/roles

"${psql[@]}" --dbname postgres -c "ALTER DATABASE \"$POSTGRES_DB\" OWNER TO minruntime_owner"

# Only the service may take advisory locks (the requeue worker's leadership): template1 too,
# so databases created later start the same way.
for db in "$POSTGRES_DB" template1; do
  "${psql[@]}" --dbname "$db" <<'SQL'
SELECT format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', p.oid::regprocedure)
  FROM pg_proc p
 WHERE p.pronamespace = 'pg_catalog'::regnamespace
   AND p.proname ~ '^pg_(try_)?advisory_(xact_)?lock(_shared)?$' \gexec
SELECT format('GRANT EXECUTE ON FUNCTION %s TO minruntime, minruntime_owner', p.oid::regprocedure)
  FROM pg_proc p
 WHERE p.pronamespace = 'pg_catalog'::regnamespace
   AND p.proname ~ '^pg_(try_)?advisory_(xact_)?lock(_shared)?$' \gexec
SQL
done
