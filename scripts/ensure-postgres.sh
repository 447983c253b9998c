#!/usr/bin/env bash
# Makes sure PostgreSQL's server programs (initdb, pg_ctl) are installed, so
# that the tests can start a throwaway cluster (internal/testing/pgtest). Installs the
# Debian package when they are missing and we are root; fails loudly
# otherwise. Does nothing when TEST_DATABASE_URL points at a server already.
set -euo pipefail

if [[ -n "${TEST_DATABASE_URL:-}" ]]; then
  echo "ensure-postgres: using TEST_DATABASE_URL"
  exit 0
fi
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || [[ -x "${PGTEST_BIN:-/nonexistent}/initdb" ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "ensure-postgres: PostgreSQL server programs are missing; run 'sudo apt-get install -y postgresql-15' or set TEST_DATABASE_URL" >&2
  exit 1
fi
echo "ensure-postgres: installing PostgreSQL from Debian packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq postgresql-15 >/dev/null 2>&1 || apt-get install -y -qq postgresql >/dev/null
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || { echo "ensure-postgres: install finished but initdb is still missing" >&2; exit 1; }
id postgres >/dev/null 2>&1 || { echo "ensure-postgres: the postgres user is missing after the install" >&2; exit 1; }
