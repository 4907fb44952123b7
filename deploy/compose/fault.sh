#!/usr/bin/env bash
# Real faults for drills against the compose cluster, one per call, meant
# for `seqctl drill --fault AT:exec:deploy/compose/fault.sh ACTION ...`:
#
#   kill SERVICE              docker kill (SIGKILL; compose does not restart it)
#   start SERVICE             docker start (after kill)
#   pause SERVICE             docker pause (frozen, like a long GC or a VM stall)
#   unpause SERVICE           docker unpause
#   restart SERVICE           docker restart (SIGTERM, then start)
#   cut SERVICE NETWORK       docker network disconnect: SERVICE loses NETWORK
#                             (raft: a store replica loses its peers;
#                             backend: an AllocSvr loses the store)
#   heal SERVICE NETWORK      docker network connect, with its aliases
#   cut-leader                cut the store leader off the raft network
#   heal-all                  reconnect every service to all its networks
#   leader                    print the store leader's service name
#   twin SERVICE              start a second AllocSvr with SERVICE's config
#                             (same id) beside it: the store must refuse it
#   untwin SERVICE            remove the twin; fails unless the store refused
#                             it (its log) and it never registered
#   upgrade SERVICE IMAGE     recreate SERVICE from IMAGE; an AllocSvr is
#                             drained first, then undrained and rebalanced
#   settle                    undo every fault: unpause, start, heal-all, wait
#                             until every AllocSvr serves, rebalance
#
# SERVICE is store-1..3 or alloc-1..3. Environment: see lib.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

die() { echo "fault.sh: $*" >&2; exit 1; }

cid() {
    local c
    c=$(container "$1")
    [ -n "$c" ] || die "no container for service $1 in project $project"
    echo "$c"
}

net() { echo "${project}_$1"; }

connected() { # SERVICE NETWORK -> exit 0 if connected
    docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$(cid "$1")" |
        tr ' ' '\n' | grep -qx "$(net "$2")"
}

heal() { # SERVICE NETWORK
    connected "$1" "$2" && return 0
    local aliases=(--alias "$1")
    [ "$2" = client ] || aliases+=(--alias "$1.$2")
    docker network connect "${aliases[@]}" "$(net "$2")" "$(cid "$1")"
    echo "$1 reconnected to $2"
}

# The leader's node id as the replicas with the newest term report it.
leader() {
    local id
    id=$(ctl status 2>/dev/null | awk '
        $4 == "term" && $6 == "leader" && $7 != "-" && $5 + 0 >= best { best = $5 + 0; id = $7 }
        END { if (id != "") print id }')
    [ -n "$id" ] || die "no store leader found"
    echo "store-$id"
}

lease_terms_ms() { # lease + margin, as the leader reports them
    ctl status 2>/dev/null | sed -n 's/.*(lease \([0-9]*\) ms + margin \([0-9]*\) ms.*/\1 \2/p' |
        awk '{ print $1 + $2; found = 1 } END { if (!found) print 6000 }'
}

wait_serving() { # every AllocSvr holds a live lease (as the leader sees it)
    local deadline=$(( $(now_ms) + ${1:-60} * 1000 )) out a ok
    while :; do
        ok=1
        out=$(ctl status 2>/dev/null) || ok=0
        for a in "${allocs[@]}"; do
            echo "$out" | grep -E "^ +$a " | grep -q "renewed" || ok=0
        done
        [ $ok = 1 ] && return 0
        [ "$(now_ms)" -lt $deadline ] || die "AllocSvrs not all serving: $out"
        sleep 0.5
    done
}

rebalance() { # retried: a handoff can race a restart
    local i
    for i in $(seq 1 20); do
        ctl alloc rebalance >/dev/null 2>&1 && return 0
        sleep 1
    done
    ctl alloc rebalance
}

upgrade() { # SERVICE IMAGE
    local svc=$1 image=$2
    case $svc in
        alloc-*)
            # Sections move off it by explicit handoffs (no lease to wait for).
            ctl alloc drain "$svc" >/dev/null
            local terms
            terms=$(lease_terms_ms)
            SEQSVR_IMAGE=$image compose up -d --no-deps "$svc" >&2
            # The new process is refused as the old one's twin until the
            # old lease is certainly over; it holds no sections meanwhile.
            sleep "$(awk -v ms="$terms" 'BEGIN { print ms / 1000 + 1 }')"
            wait_serving 60
            ctl alloc undrain "$svc" >/dev/null
            rebalance >/dev/null
            ;;
        store-*)
            SEQSVR_IMAGE=$image compose up -d --no-deps "$svc" >&2
            ;;
        *) die "unknown service $svc" ;;
    esac
    echo "$svc now runs $(docker inspect -f '{{.Config.Image}}' "$(cid "$svc")")"
}

twin_name() { echo "${project}_$1_twin"; }

twin() { # SERVICE
    local svc=$1 image
    case $svc in alloc-*) ;; *) die "twin: $svc is not an AllocSvr" ;; esac
    image=$(docker inspect -f '{{.Config.Image}}' "$(cid "$svc")")
    docker run -d --name "$(twin_name "$svc")" \
        --label "com.docker.compose.project=$project" --label "seqsvr.twin-of=$svc" \
        --network "$(net backend)" --tmpfs /data:size=1m \
        -v "$SEQSVR_CONFIG_DIR/$svc.toml:/etc/seqsvr/seqsvr.toml:ro" \
        -v "${project}_pki:/etc/seqsvr/tls:ro" \
        "$image" alloc >/dev/null
    echo "twin of $svc started"
}

untwin() { # SERVICE
    local name log refused
    name=$(twin_name "$1")
    log=$(docker logs "$name" 2>&1 || true)
    docker rm -f -v "$name" >/dev/null 2>&1 || true
    # A twin started from a copied config advertises the live one's
    # address, so the store's refusal reads as a restart's: either line.
    refused=$(grep -c -e "another process with this AllocSvr id is live" \
        -e "still holds the id" <<<"$log" || true)
    if grep -q " registered " <<<"$log"; then
        die "the twin of $1 registered: two processes served one id"
    fi
    [ "$refused" -gt 0 ] || die "the twin of $1 was never refused (log: $log)"
    echo "twin of $1 refused $refused times, never registered; removed"
}

settle() {
    local s n c state
    for c in $(docker ps -aq --filter "label=com.docker.compose.project=$project" --filter label=seqsvr.twin-of); do
        docker rm -f -v "$c" >/dev/null
    done
    for s in "${stores[@]}" "${allocs[@]}"; do
        c=$(cid "$s")
        state=$(docker inspect -f '{{.State.Status}}' "$c")
        case $state in
            paused) docker unpause "$c" >/dev/null ;;
            exited|created) docker start "$c" >/dev/null ;;
        esac
        for n in $(networks_of "$s"); do heal "$s" "$n"; done
    done
    wait_serving 90
    rebalance >/dev/null
    echo "settled"
}

action=${1:-}
shift || true
case $action in
    kill) docker kill "$(cid "$1")" >/dev/null; echo "$1 killed" ;;
    start) docker start "$(cid "$1")" >/dev/null; echo "$1 started" ;;
    pause) docker pause "$(cid "$1")" >/dev/null; echo "$1 paused" ;;
    unpause) docker unpause "$(cid "$1")" >/dev/null; echo "$1 unpaused" ;;
    restart) docker restart -t 10 "$(cid "$1")" >/dev/null; echo "$1 restarted" ;;
    cut) docker network disconnect "$(net "$2")" "$(cid "$1")"; echo "$1 cut off $2" ;;
    heal) heal "$1" "$2" ;;
    cut-leader)
        l=$(leader)
        docker network disconnect "$(net raft)" "$(cid "$l")"
        echo "$l (leader) cut off raft"
        ;;
    heal-all)
        for s in "${stores[@]}" "${allocs[@]}"; do
            for n in $(networks_of "$s"); do heal "$s" "$n"; done
        done
        ;;
    leader) leader ;;
    twin) twin "$1" ;;
    untwin) untwin "$1" ;;
    upgrade) upgrade "$1" "$2" ;;
    settle) settle ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
