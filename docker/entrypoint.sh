#!/bin/sh
# gpujobs API entrypoint: an admin token without a fixed default.
# GPUJOBS_ADMIN_TOKEN set: used as is. Otherwise, with ADMIN_TOKEN_FILE set, the token is read from
# that file, which is created with a random token on first start (keep the file in a volume; read
# it with `docker-compose exec api cat "$ADMIN_TOKEN_FILE"`). With neither, the admin API stays off.
set -eu
if [ -z "${GPUJOBS_ADMIN_TOKEN:-}" ] && [ -n "${ADMIN_TOKEN_FILE:-}" ]; then
  if [ ! -s "$ADMIN_TOKEN_FILE" ]; then
    umask 077
    python -c "import secrets; print('gpa_' + secrets.token_urlsafe(32))" >"$ADMIN_TOKEN_FILE.tmp"
    mv "$ADMIN_TOKEN_FILE.tmp" "$ADMIN_TOKEN_FILE"
    echo "gpujobs: generated an admin token in $ADMIN_TOKEN_FILE" >&2
  fi
  GPUJOBS_ADMIN_TOKEN=$(cat "$ADMIN_TOKEN_FILE")
  export GPUJOBS_ADMIN_TOKEN
fi
exec "$@"
