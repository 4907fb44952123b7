#!/usr/bin/env bash
# The Redis-protocol door against Redis 7, side by side, same machine,
# same client (redis-benchmark). See docs/benchmarks.md, "The
# Redis-protocol door vs Redis".
#
#   deploy/bench/resp.sh [-n REQUESTS]
#
# Builds the release `seqsvr` binary (or takes $SEQSVR_BIN), starts in a
# temp dir a seqsvr cluster — 3 store replicas and one AllocSvr owning
# every section of uids [0, 1 000 000), its Redis-protocol door on — and
# Redis 7 with `--appendonly yes --appendfsync everysec`, both on free
# loopback ports; then runs
#   redis-benchmark -t incr -r 1000000 -n N … INCR seq:__rand_int__
# at -c 1, -c 50 and -c 50 -P 16 against both, and prints requests/s,
# p50 and p99 of each and the ratio seqsvr / Redis. Stops everything it
# started. Installs redis-server and redis-tools with apt-get if missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

N=200000
while [ $# -gt 0 ]; do
    case "$1" in
        -n) N="$2"; shift 2 ;;
        *) echo "usage: $0 [-n REQUESTS]" >&2; exit 2 ;;
    esac
done

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "resp.sh: installing redis-server and redis-tools (apt-get)" >&2
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools
fi

BIN="${SEQSVR_BIN:-}"
if [ -z "$BIN" ]; then
    cargo build --release -p seqsvr --bin seqsvr >&2
    BIN="$PWD/target/release/seqsvr"
fi

DIR="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

# Free loopback ports, one per name.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A P
for name in s1p s1c s1a s2p s2c s2a s3p s3c s3a ac ap aa resp redis; do P[$name]=$(port); done

for i in 1 2 3; do
    cat >"$DIR/store-$i.toml" <<TOML
id = $i
data_dir = "$DIR/store-$i"
client_addr = "127.0.0.1:${P[s${i}c]}"
admin_addr = "127.0.0.1:${P[s${i}a]}"
[[members]]
id = 1
addr = "127.0.0.1:${P[s1p]}"
[[members]]
id = 2
addr = "127.0.0.1:${P[s2p]}"
[[members]]
id = 3
addr = "127.0.0.1:${P[s3p]}"
[set]
set_id = 0
uid_begin = 0
uid_end = 1000000
section_size = 100000
step = 10000
[[allocs]]
id = "alloc-1"
first = 0
count = 10
TOML
    "$BIN" store --config "$DIR/store-$i.toml" >"$DIR/store-$i.log" 2>&1 &
    PIDS+=($!)
done
cat >"$DIR/alloc-1.toml" <<TOML
id = "alloc-1"
addr = "127.0.0.1:${P[ac]}"
peer_addr = "127.0.0.1:${P[ap]}"
admin_addr = "127.0.0.1:${P[aa]}"
store = ["127.0.0.1:${P[s1p]}", "127.0.0.1:${P[s2p]}", "127.0.0.1:${P[s3p]}"]
[resp]
addr = "127.0.0.1:${P[resp]}"
TOML
"$BIN" alloc --config "$DIR/alloc-1.toml" >"$DIR/alloc-1.log" 2>&1 &
PIDS+=($!)

mkdir -p "$DIR/redis"
redis-server --port "${P[redis]}" --bind 127.0.0.1 --dir "$DIR/redis" --save '' \
    --appendonly yes --appendfsync everysec --daemonize no >"$DIR/redis.log" 2>&1 &
PIDS+=($!)

# Ready: every section of the AllocSvr serves through the door.
for _ in $(seq 1 300); do
    ok=1
    for s in 0 1 2 3 4 5 6 7 8 9; do
        r=$(redis-cli -p "${P[resp]}" INCR "seq:${s}00000" 2>/dev/null || true)
        [[ "$r" =~ ^[0-9]+$ ]] || { ok=0; break; }
    done
    [ "$ok" = 1 ] && redis-cli -p "${P[redis]}" PING >/dev/null 2>&1 && break
    sleep 0.2
done
[ "$ok" = 1 ] || { echo "resp.sh: the cluster never served; logs in $DIR" >&2; tail -5 "$DIR"/*.log >&2; exit 1; }

echo "machine: $(nproc) cores; $(uname -sr); redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')"
echo "redis: AOF everysec ($(redis-cli -p "${P[redis]}" CONFIG GET appendfsync | tail -1)); seqsvr: 3 stores (fsync) + 1 AllocSvr, door on"

# One redis-benchmark run: prints "rps p50 p99".
bench() {
    local p="$1"; shift
    redis-benchmark -h 127.0.0.1 -p "$p" -r 1000000 -n "$N" "$@" --csv INCR 'seq:__rand_int__' 2>/dev/null |
        awk -F'","' 'NR==2 { print $2, $5, $7 }'
}

printf "%-16s %12s %8s %8s   %12s %8s %8s   %7s\n" shape "seqsvr r/s" p50 p99 "redis r/s" p50 p99 ratio
for shape in "-c 1" "-c 50" "-c 50 -P 16"; do
    # shellcheck disable=SC2086
    read -r s_rps s_p50 s_p99 <<<"$(bench "${P[resp]}" $shape)"
    # shellcheck disable=SC2086
    read -r r_rps r_p50 r_p99 <<<"$(bench "${P[redis]}" $shape)"
    ratio=$(awk -v a="$s_rps" -v b="$r_rps" 'BEGIN { printf "%.2f", a / b }')
    printf "%-16s %12s %8s %8s   %12s %8s %8s   %6sx\n" "$shape" "$s_rps" "$s_p50" "$s_p99" "$r_rps" "$r_p50" "$r_p99" "$ratio"
done
echo "door: $(redis-cli -p "${P[resp]}" INFO stats | tr -d '\r' | grep total_commands_processed)"
