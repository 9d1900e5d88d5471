#!/bin/sh
# First start: initdb (UTF-8, password auth over the network), the user and database named by
# the official image's variables.  Then the server, as postgres, in the foreground.
set -eu
mkdir -p "$PGDATA" && chown postgres "$PGDATA" && chmod 700 "$PGDATA"
mkdir -p /run/postgresql && chown postgres /run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s' "$POSTGRES_PASSWORD" > /tmp/pwfile && chown postgres /tmp/pwfile
    runuser -u postgres -- initdb -D "$PGDATA" -U "$POSTGRES_USER" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 --pwfile=/tmp/pwfile >/dev/null
    rm -f /tmp/pwfile
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    runuser -u postgres -- pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "${POSTGRES_DB:-postgres}" != postgres ]; then
        runuser -u postgres -- createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
    fi
    runuser -u postgres -- pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses='*'
