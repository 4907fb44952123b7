#!/usr/bin/env bash
# The Redis-protocol door against Redis 7, side by side, same machine,
# same client (redis-benchmark). See docs/benchmarks.md, "The
# Redis-protocol door vs Redis".
#
#   deploy/bench/resp.sh [-n REQUESTS] [--rounds R] [--pin] [--spin US] [--forwarded] [--names|--names-fixed] [--instructions] [--ids N]
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
#
# --rounds R      every shape R times (the sides back to back each time).
# --pin           servers on CPU 0, the client on CPU 1 (taskset; every
#                 thread of every seqsvr process and of Redis): each side
#                 gets one core of its own and the client the other, so
#                 neither competes with the client for a core and the
#                 scheduler's placement does not decide the figures.
# --spin US       every door busy-polls US microseconds after a round
#                 before it sleeps (`spin_us` in [resp], off by default;
#                 docs/operations.md).
# --forwarded     also a second cluster of two AllocSvrs, alloc-1 owning
#                 uids [0, 500 000) and alloc-2 the rest, driven through
#                 alloc-1's door with keys over all 1 M uids: half the
#                 INCRs are forwarded to alloc-2. Prints its rate beside
#                 the single owner's and Redis's, same round.
# --names         named counters instead of uids: a set for the range
#                 reserved for names (docs/counters.md), added to the
#                 cluster with `seqctl set add`, one AllocSvr owning all
#                 of it, its door driven with keys the uid mapping does not
#                 claim: one hot name pipelined (-c 50 -P 16 INCR name:hot)
#                 against Redis INCR on one key, and 10^6 distinct names
#                 (-c 50 -r 1000000 INCR name:__rand_int__) against Redis
#                 on the same keys. The hot name runs 5 x REQUESTS, past
#                 the section's first grant, so its raises are in the
#                 figure. The names set is served as docs/counters.md
#                 advises for hot names: set step 640 000, the AllocSvr's
#                 adaptive steps from 10 000.
# --names-fixed   --names with the names set at a fixed step of 10 000.
# --instructions  no timing: the single owner's AllocSvr (and with
#                 --names the names set's) and Redis run under valgrind's
#                 callgrind, and each shape prints the instructions each
#                 server spent per command (its idle work over the same
#                 span subtracted) and Redis's over the door's. Blind to
#                 kernel time and cache misses, but steady on a busy
#                 machine.
# --ids N         time-ordered ids instead (docs/ids.md): creates a
#                 `twitter` namespace with `seqctl id create`, then runs
#                 `SEQ.ID bench N` against `INCR` at -c 50 -P 16 and
#                 -c 1 -P 16, back to back; prints commands/s of each,
#                 the ids/s of the door (commands x N) and the ratio of
#                 ids/s to Redis's numbers/s.
set -euo pipefail
cd "$(dirname "$0")/../.."

N=200000
ROUNDS=1
FWD=0
NAMES=0
NAMES_FIXED=0
PIN=0
SPIN=0
INSTR=0
IDS=0
while [ $# -gt 0 ]; do
    case "$1" in
        -n) N="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --forwarded) FWD=1; shift ;;
        --names) NAMES=1; shift ;;
        --names-fixed) NAMES=1; NAMES_FIXED=1; shift ;;
        --instructions) INSTR=1; shift ;;
        --pin) PIN=1; shift ;;
        --spin) SPIN="$2"; shift 2 ;;
        --ids) IDS="$2"; shift 2 ;;
        *) echo "usage: $0 [-n REQUESTS] [--rounds R] [--pin] [--spin US] [--forwarded] [--names|--names-fixed] [--instructions] [--ids N]" >&2; exit 2 ;;
    esac
done

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "resp.sh: installing redis-server and redis-tools (apt-get)" >&2
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools
fi
if [ "$INSTR" = 1 ] && ! command -v callgrind_control >/dev/null 2>&1; then
    echo "resp.sh: --instructions needs valgrind (callgrind_control) on PATH" >&2
    exit 1
fi

BIN="${SEQSVR_BIN:-}"
if [ -z "$BIN" ]; then
    cargo build --release -p seqsvr --bin seqsvr --bin seqctl >&2
    BIN="$PWD/target/release/seqsvr"
fi
CTL="${SEQCTL_BIN:-$(dirname "$BIN")/seqctl}"

# The span of the names set: set 0's section grid (100 000 uids) over
# [2^63, 2^63 + 2^20), 12 sections. Above i64::MAX, so written as TOML
# strings.
NAMES_SPAN=("9223372036854700000" "9223372036855900000")

DIR="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

# A free loopback port.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The set start_set starts: its id, span and whether it is added to a
# running cluster (set 0's) rather than the cluster's first.
SET_ID=0 SET_BEGIN=0 SET_END=1000000 ADDED=false SET_STEP=10000 ALLOC_EXTRA=""

# start_set NAME "ALLOC:FIRST:COUNT …" [UNDER…]: 3 store replicas and the
# AllocSvrs named (each owning COUNT sections from FIRST, its door on);
# the first AllocSvr runs under UNDER (a profiler) if given. Sets
# DOOR_<NAME>_<i> to each door's port and ALLOCPID_<NAME> to the first
# AllocSvr's pid.
start_set() {
    local name="$1" allocs="$2"; shift 2
    local d="$DIR/$name" i a id first count
    mkdir -p "$d"
    local sp=() sc=() sa=()
    for i in 1 2 3; do sp[$i]=$(port); sc[$i]=$(port); sa[$i]=$(port); done
    for i in 1 2 3; do
        {
            echo "id = $i"
            echo "data_dir = \"$d/store-$i\""
            echo "client_addr = \"127.0.0.1:${sc[$i]}\""
            echo "admin_addr = \"127.0.0.1:${sa[$i]}\""
            echo "added_set = $ADDED"
            for m in 1 2 3; do
                printf '[[members]]\nid = %s\naddr = "127.0.0.1:%s"\n' "$m" "${sp[$m]}"
            done
            printf '[set]\nset_id = %s\nuid_begin = "%s"\nuid_end = "%s"\nsection_size = 100000\nstep = %s\n' \
                "$SET_ID" "$SET_BEGIN" "$SET_END" "$SET_STEP"
            for a in $allocs; do
                IFS=: read -r id first count <<<"$a"
                printf '[[allocs]]\nid = "%s"\nfirst = %s\ncount = %s\n' "$id" "$first" "$count"
            done
        } >"$d/store-$i.toml"
        printf -v "STORE_${name}_$i" '%s' "${sc[$i]}"
        "$BIN" store --config "$d/store-$i.toml" >"$d/store-$i.log" 2>&1 &
        PIDS+=($!)
    done
    printf -v "ADMIN_$name" '%s' "127.0.0.1:${sa[1]},127.0.0.1:${sa[2]},127.0.0.1:${sa[3]}"
    printf -v "CLIENT_$name" '%s' "127.0.0.1:${sc[1]},127.0.0.1:${sc[2]},127.0.0.1:${sc[3]}"
    i=0
    for a in $allocs; do
        i=$((i + 1))
        IFS=: read -r id first count <<<"$a"
        local door metrics
        door=$(port)
        metrics=$(port)
        cat >"$d/$id.toml" <<TOML
id = "$id"
metrics_addr = "127.0.0.1:$metrics"
addr = "127.0.0.1:$(port)"
peer_addr = "127.0.0.1:$(port)"
admin_addr = "127.0.0.1:$(port)"
store = ["127.0.0.1:${sp[1]}", "127.0.0.1:${sp[2]}", "127.0.0.1:${sp[3]}"]
[resp]
addr = "127.0.0.1:$door"
spin_us = $SPIN
TOML
        [ -n "$ALLOC_EXTRA" ] && printf '%b' "$ALLOC_EXTRA" >>"$d/$id.toml"
        if [ "$i" = 1 ] && [ $# -gt 0 ]; then
            "$@" "$BIN" alloc --config "$d/$id.toml" >"$d/$id.log" 2>&1 &
        else
            "$BIN" alloc --config "$d/$id.toml" >"$d/$id.log" 2>&1 &
        fi
        [ "$i" = 1 ] && printf -v "ALLOCPID_$name" '%s' "$!"
        PIDS+=($!)
        printf -v "DOOR_${name}_$i" '%s' "$door"
        printf -v "METRICS_${name}_$i" '%s' "$metrics"
    done
}

# Waits until every section answers an INCR through the door on port $1
# (sections of 100 000 uids from uid PREFIX×100 000, COUNT of them; set 0's
# ten by default).
wait_door() {
    local ok=0 prefix="${2:-0}" count="${3:-10}"
    for _ in $(seq 1 600); do
        ok=1
        for s in $(seq 0 $((count - 1))); do
            r=$(redis-cli -p "$1" INCR "seq:$((prefix + s))00000" 2>/dev/null || true)
            [[ "$r" =~ ^[0-9]+$ ]] || { ok=0; break; }
        done
        [ "$ok" = 1 ] && return 0
        sleep 0.2
    done
    echo "resp.sh: the door on $1 never served every section; logs in $DIR" >&2
    tail -5 "$DIR"/*/*.log >&2
    exit 1
}

UNDER=()
if [ "$INSTR" = 1 ]; then
    UNDER=(valgrind --tool=callgrind "--callgrind-out-file=$DIR/cg.%p.out" "--log-file=$DIR/cg.%p.log")
fi
start_set one "alloc-1:0:10" "${UNDER[@]}"
[ "$FWD" = 1 ] && start_set two "alloc-1:0:5 alloc-2:5:5"
if [ "$NAMES" = 1 ]; then
    SET_ID=2 SET_BEGIN="${NAMES_SPAN[0]}" SET_END="${NAMES_SPAN[1]}" ADDED=true
    if [ "$NAMES_FIXED" = 0 ]; then
        # Served as docs/counters.md advises for hot names: adaptive
        # steps from 10 000 up to the set's step.
        SET_STEP=640000 ALLOC_EXTRA='[adaptive_steps]\nbase_step = 10000\n'
    fi
    start_set names "alloc-n:0:12" "${UNDER[@]}"
    SET_ID=0 SET_BEGIN=0 SET_END=1000000 ADDED=false SET_STEP=10000 ALLOC_EXTRA=""
fi

REDIS_PORT=$(port)
mkdir -p "$DIR/redis"
"${UNDER[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$DIR/redis" --save '' \
    --appendonly yes --appendfsync everysec --daemonize no >"$DIR/redis.log" 2>&1 &
PIDS+=($!)
REDIS_PID=$!

wait_door "$DOOR_one_1"
[ "$FWD" = 1 ] && wait_door "$DOOR_two_1"
if [ "$NAMES" = 1 ]; then
    # The names set joins set 0's cluster (docs/operations.md, Sets).
    for _ in $(seq 1 60); do
        "$CTL" --store "127.0.0.1:$STORE_one_1,127.0.0.1:$STORE_one_2,127.0.0.1:$STORE_one_3" \
            set add --id 2 --range "${NAMES_SPAN[0]}..${NAMES_SPAN[1]}" \
            --set-store "127.0.0.1:$STORE_names_1,127.0.0.1:$STORE_names_2,127.0.0.1:$STORE_names_3" \
            >"$DIR/set-add.log" 2>&1 && break
        sleep 1
    done
    wait_door "$DOOR_names_1" "${NAMES_SPAN[0]%00000}" 12
fi
for _ in $(seq 1 100); do
    redis-cli -p "$REDIS_PORT" PING >/dev/null 2>&1 && break
    sleep 0.1
done

echo "machine: $(nproc) cores; $(uname -sr); load average $(cut -d' ' -f1-3 /proc/loadavg); redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')"
echo "redis: AOF everysec ($(redis-cli -p "$REDIS_PORT" CONFIG GET appendfsync | tail -1)); seqsvr: 3 stores (fsync) + 1 AllocSvr, door on"
[ "$FWD" = 1 ] && echo "half forwarded: 3 stores + alloc-1 (uids [0, 500000)) + alloc-2 (the rest), through alloc-1's door"

SHAPES=("-c 1" "-c 50" "-c 50 -P 16")

# The client's prefix: taskset onto CPU 1 with --pin.
CLIENT=()
if [ "$PIN" = 1 ]; then
    [ "$(nproc)" -ge 2 ] || { echo "resp.sh: --pin needs 2 cores" >&2; exit 2; }
    for p in "${PIDS[@]}"; do taskset -a -p -c 0 "$p" >/dev/null; done
    CLIENT=(taskset -c 1)
    echo "pinned: every server process on CPU 0, redis-benchmark on CPU 1"
fi
if [ "$SPIN" != 0 ]; then
    echo "spin: every door busy-polls ${SPIN} us after a round (spin_us)"
fi

# One redis-benchmark run against port $1 (then its options): prints
# "rps p50 p99". KEY is the INCR's key.
KEY='seq:__rand_int__'
bench() {
    local p="$1"; shift
    "${CLIENT[@]}" redis-benchmark -h 127.0.0.1 -p "$p" -r 1000000 -n "$N" "$@" --csv INCR "$KEY" 2>/dev/null |
        awk -F'","' 'NR==2 { print $2, $5, $7 }'
}

if [ "$INSTR" = 1 ]; then
    # The newest dump's instruction total of process $1.
    total() {
        local f
        f=$(ls -t "$DIR"/cg."$1".out.* | head -1)
        awk '/^(summary|totals):/ { print $2; exit }' "$f"
    }
    # Instructions a second process $1 spends idle (renewals and the
    # like), over 10 s.
    idle_of() {
        local t0
        callgrind_control -z "$1" >/dev/null 2>&1
        t0=$(date +%s.%N); sleep 10
        callgrind_control -d "$1" >/dev/null 2>&1
        awk -v n="$(total "$1")" -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", n / (b - a) }'
    }
    # instr PID IDLE PORT KEY SHAPE…: the instructions process PID spends
    # per command of the shape (idle subtracted), after a warm-up.
    # CMD (an array) is the command instead of INCR KEY if set.
    instr() {
        local pid="$1" idle="$2" port="$3" key="$4" t0; shift 4
        local c=(INCR "$key")
        [ -n "${CMD[*]:-}" ] && c=("${CMD[@]}")
        redis-benchmark -h 127.0.0.1 -p "$port" -r 1000000 -n $((N / 10)) "$@" -q "${c[@]}" >/dev/null 2>&1
        callgrind_control -z "$pid" >/dev/null 2>&1
        t0=$(date +%s.%N)
        redis-benchmark -h 127.0.0.1 -p "$port" -r 1000000 -n "$N" "$@" -q "${c[@]}" >/dev/null 2>&1
        callgrind_control -d "$pid" >/dev/null 2>&1
        awk -v n="$(total "$pid")" -v i="$idle" -v a="$t0" -v b="$(date +%s.%N)" -v c="$N" \
            'BEGIN { printf "%.0f", (n - i * (b - a)) / c }'
    }
    CMD=()
    idle=$(idle_of "$ALLOCPID_one")
    ridle=$(idle_of "$REDIS_PID")
    echo "instructions per command under callgrind, the AllocSvr and Redis 7 ($N commands a shape after $((N / 10)) of warm-up;"
    echo "idle work subtracted: AllocSvr $idle, Redis $ridle a second). Redis over seqsvr: how many times the door's work Redis spends."
    printf "%-34s %12s %12s %9s\n" shape "seqsvr" "redis" "R/seqsvr"
    row() {
        local label="$1" spid="$2" sidle="$3" sport="$4" key="$5" a b; shift 5
        a=$(instr "$spid" "$sidle" "$sport" "$key" "$@")
        local keep=("${CMD[@]}")
        CMD=()
        b=$(instr "$REDIS_PID" "$ridle" "$REDIS_PORT" "$key" "$@")
        CMD=("${keep[@]}")
        printf "%-34s %12s %12s %8sx\n" "$label" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')"
    }
    for shape in "${SHAPES[@]}"; do
        # shellcheck disable=SC2086
        row "$shape" "$ALLOCPID_one" "$idle" "$DOOR_one_1" 'seq:__rand_int__' $shape
    done
    if [ "$IDS" != 0 ]; then
        for _ in $(seq 1 100); do
            "$CTL" --store "$CLIENT_one" --store-admin "$ADMIN_one" id create bench --preset twitter >/dev/null 2>&1 && break
            sleep 0.2
        done
        # Per SEQ.ID command against Redis's per INCR; an id costs 1/N of it.
        CMD=(SEQ.ID bench "$IDS")
        row "-c 50 -P 16 SEQ.ID bench $IDS" "$ALLOCPID_one" "$idle" "$DOOR_one_1" 'seq:__rand_int__' -c 50 -P 16
        CMD=()
    fi
    if [ "$NAMES" = 1 ]; then
        nidle=$(idle_of "$ALLOCPID_names")
        row "-c 50 -P 16 INCR name:hot" "$ALLOCPID_names" "$nidle" "$DOOR_names_1" 'name:hot' -c 50 -P 16
        row "-c 50 INCR name:__rand_int__" "$ALLOCPID_names" "$nidle" "$DOOR_names_1" 'name:__rand_int__' -c 50
    fi
    exit 0
fi

# Raises and raise waits of the AllocSvr whose metrics are on port $1.
raises() {
    curl -s "http://127.0.0.1:$1/metrics" | awk '
        /^seqsvr_alloc_raises_applied_total/ { r += $2 }
        /^seqsvr_alloc_raise_waits_total/ { w += $2 }
        /^seqsvr_alloc_raise_wait_timeouts_total/ { t += $2 }
        END { printf "%d raises, %d callers waited on one, %d waits ran out\n", r, w, t }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

if [ "$IDS" != 0 ]; then
    for _ in $(seq 1 100); do
        "$CTL" --store "$CLIENT_one" --store-admin "$ADMIN_one" id create bench --preset twitter >/dev/null 2>&1 && break
        sleep 0.2
    done
    "$CTL" --store "$CLIENT_one" --store-admin "$ADMIN_one" id create bench --preset twitter
    # One redis-benchmark run of a command: prints "rps p50 p99".
    cmd() {
        local p="$1" shape="$2"; shift 2
        # shellcheck disable=SC2086
        "${CLIENT[@]}" redis-benchmark -h 127.0.0.1 -p "$p" -r 1000000 -n "$N" $shape --csv "$@" 2>/dev/null |
            awk -F'","' 'NR==2 { print $2, $5, $7 }'
    }
    cmd "$DOOR_one_1" "-c 1" SEQ.ID bench "$IDS" >/dev/null # claims the worker id
    for round in $(seq 1 "$ROUNDS"); do
        echo
        echo "== round $round of $ROUNDS (load average $(cut -d' ' -f1 /proc/loadavg)): SEQ.ID bench $IDS vs INCR"
        printf "%-12s %10s %13s %11s   %10s %13s   %9s\n" shape "SEQ.ID c/s" "p50/p99 ms" "ids/s" "INCR r/s" "p50/p99 ms" "ids/INCR"
        for shape in "-c 50 -P 16" "-c 1 -P 16"; do
            read -r s_rps s_p50 s_p99 <<<"$(cmd "$DOOR_one_1" "$shape" SEQ.ID bench "$IDS")"
            read -r r_rps r_p50 r_p99 <<<"$(cmd "$REDIS_PORT" "$shape" INCR 'seq:__rand_int__')"
            ids=$(awk -v a="$s_rps" -v n="$IDS" 'BEGIN { printf "%.0f", a * n }')
            printf "%-12s %10s %13s %11s   %10s %13s   %8sx\n" "$shape" \
                "$s_rps" "$s_p50/$s_p99" "$ids" "$r_rps" "$r_p50/$r_p99" "$(ratio "$ids" "$r_rps")"
        done
    done
    exit 0
fi

for round in $(seq 1 "$ROUNDS"); do
    echo
    echo "== round $round of $ROUNDS (load average $(cut -d' ' -f1 /proc/loadavg))"
    if [ "$FWD" = 1 ]; then
        printf "%-12s %10s %13s   %10s %13s   %10s %13s   %7s %7s %7s\n" shape "owner r/s" "p50/p99 ms" "half-fwd" "p50/p99 ms" "redis r/s" "p50/p99 ms" owner/R fwd/R fwd/own
    else
        printf "%-12s %10s %13s   %10s %13s   %7s\n" shape "seqsvr r/s" "p50/p99 ms" "redis r/s" "p50/p99 ms" ratio
    fi
    for shape in "${SHAPES[@]}"; do
        # shellcheck disable=SC2086
        read -r s_rps s_p50 s_p99 <<<"$(bench "$DOOR_one_1" $shape)"
        if [ "$FWD" = 1 ]; then
            # shellcheck disable=SC2086
            read -r f_rps f_p50 f_p99 <<<"$(bench "$DOOR_two_1" $shape)"
        fi
        # shellcheck disable=SC2086
        read -r r_rps r_p50 r_p99 <<<"$(bench "$REDIS_PORT" $shape)"
        if [ "$FWD" = 1 ]; then
            printf "%-12s %10s %13s   %10s %13s   %10s %13s   %6sx %6sx %6sx\n" "$shape" \
                "$s_rps" "$s_p50/$s_p99" "$f_rps" "$f_p50/$f_p99" "$r_rps" "$r_p50/$r_p99" \
                "$(ratio "$s_rps" "$r_rps")" "$(ratio "$f_rps" "$r_rps")" "$(ratio "$f_rps" "$s_rps")"
        else
            printf "%-12s %10s %13s   %10s %13s   %6sx\n" "$shape" \
                "$s_rps" "$s_p50/$s_p99" "$r_rps" "$r_p50/$r_p99" "$(ratio "$s_rps" "$r_rps")"
        fi
    done
done
# Named counters: one hot name pipelined, and 10^6 distinct names, each
# against Redis on the same keys, back to back.
if [ "$NAMES" = 1 ]; then
    echo
    echo "names: 3 stores + alloc-n (the names set, all 12 sections), keys the uid mapping does not claim"
    for round in $(seq 1 "$ROUNDS"); do
        echo
        echo "== names, round $round of $ROUNDS (load average $(cut -d' ' -f1 /proc/loadavg))"
        printf "%-34s %10s %13s   %10s %13s   %7s\n" shape "seqsvr r/s" "p50/p99 ms" "redis r/s" "p50/p99 ms" ratio
        for spec in "name:hot|-c 50 -P 16" "name:__rand_int__|-c 50"; do
            KEY="${spec%%|*}" shape="${spec#*|}"
            n="$N"
            [ "$KEY" = name:hot ] && n=$((N * 5))
            # shellcheck disable=SC2086
            read -r s_rps s_p50 s_p99 <<<"$(N=$n bench "$DOOR_names_1" $shape)"
            # shellcheck disable=SC2086
            read -r r_rps r_p50 r_p99 <<<"$(N=$n bench "$REDIS_PORT" $shape)"
            printf "%-34s %10s %13s   %10s %13s   %6sx\n" "$shape INCR $KEY" \
                "$s_rps" "$s_p50/$s_p99" "$r_rps" "$r_p50/$r_p99" "$(ratio "$s_rps" "$r_rps")"
        done
    done
    KEY='seq:__rand_int__'
    echo
    echo "names AllocSvr: $(raises "$METRICS_names_1")"
fi
echo
echo "door: $(redis-cli -p "$DOOR_one_1" INFO stats | tr -d '\r' | grep total_commands_processed)"
if [ "$FWD" = 1 ]; then
    echo "half-forwarded door: $(redis-cli -p "$DOOR_two_1" INFO stats | tr -d '\r' | grep total_commands_processed)"
fi
