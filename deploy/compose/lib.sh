# Shared by up.sh, down.sh, fault.sh and drills.sh (sourced, not run).
#
# Environment (the same for every script that acts on one cluster):
#   COMPOSE_PROJECT_NAME  compose project, names containers, networks and
#                         volumes (default: seqsvr)
#   SEQSVR_IMAGE          image to run (default: seqsvr:local)
#   SEQSVR_PORT_PREFIX    first two digits of the host's loopback ports
#                         (default 17: 17111-17113 store client planes,
#                         17121-17123 admin planes, 17131-17133 metrics,
#                         17201-17203 AllocSvr client planes, 17221-17223
#                         their admin planes)
#   SEQSVR_CONFIG_DIR     configs to mount (default: config/ beside this
#                         file; another prefix renders them to .run/)
#   SEQCTL                the seqctl to run on the host (default: seqctl on
#                         PATH, else the image's, in a container on the
#                         host's network)
#   SEQSVR_PKI_DIR        where up.sh puts the CA and the operator's
#                         certificate for seqctl (default: .run/<project>/pki)

compose_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
compose_file="$compose_dir/docker-compose.yml"
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-seqsvr}
export SEQSVR_IMAGE=${SEQSVR_IMAGE:-seqsvr:local}
export SEQSVR_PORT_PREFIX=${SEQSVR_PORT_PREFIX:-17}
project=$COMPOSE_PROJECT_NAME
prefix=$SEQSVR_PORT_PREFIX

stores=(store-1 store-2 store-3)
allocs=(alloc-1 alloc-2 alloc-3)

if [ -z "${SEQSVR_CONFIG_DIR:-}" ]; then
    if [ "$prefix" = 17 ]; then
        SEQSVR_CONFIG_DIR="$compose_dir/config"
    else
        SEQSVR_CONFIG_DIR="$compose_dir/.run/$COMPOSE_PROJECT_NAME/config"
    fi
fi
export SEQSVR_CONFIG_DIR

run_dir="$compose_dir/.run/$project"
pki_dir=${SEQSVR_PKI_DIR:-$run_dir/pki}

# The addresses seqctl on the host dials.
store_client="127.0.0.1:${prefix}111,127.0.0.1:${prefix}112,127.0.0.1:${prefix}113"
store_admin="127.0.0.1:${prefix}121,127.0.0.1:${prefix}122,127.0.0.1:${prefix}123"
alloc_client="127.0.0.1:${prefix}201,127.0.0.1:${prefix}202,127.0.0.1:${prefix}203"

# docker-compose (1.x), or the `docker compose` plugin.
if command -v docker-compose >/dev/null 2>&1; then
    compose_cmd=(docker-compose)
else
    compose_cmd=(docker compose)
fi

compose() {
    "${compose_cmd[@]}" -p "$project" -f "$compose_file" "$@"
}

# seqctl with the cluster's addresses and the operator's credentials.
ctl() {
    local flags=(--store "$store_client" --store-admin "$store_admin" --alloc "$alloc_client"
        --ca "$pki_dir/ca.pem" --cert "$pki_dir/ops.pem" --key "$pki_dir/ops-key.pem")
    if [ -n "${SEQCTL:-}" ]; then
        "$SEQCTL" "${flags[@]}" "$@"
    elif command -v seqctl >/dev/null 2>&1; then
        seqctl "${flags[@]}" "$@"
    else
        docker run --rm -i --network host -v "$pki_dir:$pki_dir:ro" --user "$(id -u):$(id -g)" \
            --entrypoint seqctl "$SEQSVR_IMAGE" "${flags[@]}" "$@"
    fi
}

# The container of a service (running or not), by the labels compose sets.
container() {
    docker ps -aq \
        --filter "label=com.docker.compose.project=$project" \
        --filter "label=com.docker.compose.service=$1" | head -n 1
}

# The networks a service belongs to (as the compose file says).
networks_of() {
    case $1 in
        store-*) echo raft backend client ;;
        alloc-*) echo backend client ;;
        *) echo "unknown service $1" >&2; return 1 ;;
    esac
}

# Writes the configs for a port prefix other than 17.
render_configs() {
    mkdir -p "$SEQSVR_CONFIG_DIR"
    local f
    for f in "$compose_dir"/config/*.toml; do
        sed "s/127\.0\.0\.1:17\([0-9][0-9][0-9]\)/127.0.0.1:${prefix}\1/g" "$f" \
            > "$SEQSVR_CONFIG_DIR/$(basename "$f")"
    done
}

now_ms() {
    date +%s%3N
}
