#!/bin/sh
# Writes deploy/.env with fresh random secrets for compose.yaml (readable by
# you only). Refuses to overwrite an existing file: the database keeps the
# password it was created with, and jobs' checkpoints stay signed by the
# secret they were written with.
set -eu
out="${1:-$(dirname "$0")/.env}"
if [ -e "$out" ]; then
    echo "$out exists; remove it first to make new secrets" >&2
    exit 1
fi
rand() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
umask 077
cat > "$out" <<ENV
RAY_AUTH_TOKEN=$(rand)
BRIGADE_ADMIN_KEY=$(rand)
BRIGADE_SECRET=$(rand)
POSTGRES_PASSWORD=$(rand)
S3_SECRET_KEY=$(rand)
ENV
echo "wrote $out"
