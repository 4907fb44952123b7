#!/usr/bin/env bash
# Starts the compose cluster (3 store replicas, 3 AllocSvrs, TLS on every
# plane) and waits until it hands out a number. Running it again on a
# stopped cluster resumes it: the store's data and the PKI are in named
# volumes.
#
#   deploy/docker/build.sh && deploy/compose/up.sh
#
# 1. renders the configs for another port prefix (if SEQSVR_PORT_PREFIX
#    is not 17);
# 2. runs the one-shot `certs` service: a CA and one certificate per
#    process in the pki volume (kept if they exist);
# 3. copies the CA and the operator's certificate to .run/<project>/pki/
#    for seqctl on the host;
# 4. docker-compose up -d, then `seqctl next 0` until a number comes back.
#
# Environment: see lib.sh. SEQSVR_UP_TIMEOUT: seconds to wait (120).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

if [ "$SEQSVR_CONFIG_DIR" != "$compose_dir/config" ] && [ ! -e "$SEQSVR_CONFIG_DIR/store-1.toml" ]; then
    render_configs
fi

compose --profile init run --rm certs >/dev/null
mkdir -p "$pki_dir"
c=$(docker create -v "${project}_pki:/etc/seqsvr/tls" "$SEQSVR_IMAGE")
for f in ca.pem ops.pem ops-key.pem; do
    docker cp "$c:/etc/seqsvr/tls/$f" "$pki_dir/$f"
done
docker rm -v "$c" >/dev/null
chmod 600 "$pki_dir/ops-key.pem"

err=$(mktemp)
trap 'rm -f "$err"' EXIT
t0=$(now_ms)
compose up -d
timeout=${SEQSVR_UP_TIMEOUT:-120}
while :; do
    if n=$(ctl next 0 2>"$err"); then
        t1=$(now_ms)
        echo "first number $n after $(( t1 - t0 )) ms (compose up to first number)"
        break
    fi
    if [ $(( $(now_ms) - t0 )) -gt $(( timeout * 1000 )) ]; then
        echo "up.sh: no number within ${timeout}s; seqctl's last error:" >&2
        cat "$err" >&2
        echo "up.sh: compose ps and the last log lines:" >&2
        compose ps >&2 || true
        compose logs --tail 20 >&2 || true
        exit 1
    fi
    sleep 0.2
done
cat <<MSG
seqctl --ca $pki_dir/ca.pem --cert $pki_dir/ops.pem --key $pki_dir/ops-key.pem \\
    --store $store_client \\
    --store-admin $store_admin \\
    --alloc $alloc_client status
MSG
