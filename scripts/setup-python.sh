#!/usr/bin/env bash
# Prepares the end-to-end test environment, idempotently and quietly:
#   .venv at the repo root with redis-py and pytest; redis-server/redis-cli/redis-benchmark from apt
#   when redis-server is not installed yet (they are the reference the tests compare against).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo_root/.venv"

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import redis, pytest' 2>/dev/null; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'redis>=5' pytest
fi

if ! command -v redis-server >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    # The Debian package starts a system instance on port 6379; the tests start their own.
    if command -v service >/dev/null 2>&1; then service redis-server stop >/dev/null 2>&1 || true; fi
fi
