#!/usr/bin/env bash
# The drills to run before going live: `seqctl drill` drives next and
# next_batch calls against the compose cluster while fault.sh injects real
# faults between containers, then reports regressions and repeats (must
# be 0), failed calls, the longest unavailability of any section, and per
# fault the longest outage after it and the largest section jump.
#
#   deploy/compose/drills.sh                    # every drill, text reports
#   deploy/compose/drills.sh kill-alloc cut-store-leader
#
# Drills (timed for the compose configs: lease 3 s + margin 1 s, renewals
# every 0.5 s; a cut-off AllocSvr's sections move after about 4.5 s):
#
#   kill-alloc        docker kill alloc-1; started again 8 s later
#   pause-alloc       docker pause alloc-2 for 9 s (twice lease + margin)
#   cut-alloc         alloc-3 loses the backend network (the store) for 9 s;
#                     clients still reach it
#   cut-store-leader  the store leader loses the raft network (its peers)
#                     for 9 s; AllocSvrs still reach it
#   twin-alloc        a second process with alloc-1's config (same id) runs
#                     beside it for 8 s: the store must refuse it (TWIN) and
#                     alloc-1 must keep serving
#   rolling-restart   docker restart of every container one at a time:
#                     replicas 6 s apart, then AllocSvrs 8 s apart
#   rolling-upgrade   every container recreated from SEQSVR_UPGRADE_IMAGE:
#                     replicas 6 s apart, then AllocSvrs 12 s apart, each
#                     drained first and given its share back after
#
# Before each drill, fault.sh settle undoes what the last one left (paused,
# stopped or cut-off containers) and rebalances.
#
# Each drill judges itself (`seqctl drill` exits non-zero with the reason):
# it must make at least half the calls its rate plans and get numbers,
# every fault must happen, 0 regressions and repeats, each fault's section
# jump within one step (promise 4) and its outage within
# SEQSVR_DRILL_MAX_OUTAGE.
#
# Environment: see lib.sh; also SEQSVR_DRILL_RATE (calls/s, 1000),
# SEQSVR_DRILL_CONCURRENCY (16), SEQSVR_DRILL_MAX_OUTAGE (6500ms: lease
# 3 s + margin 1 s + renewal 0.5 s, plus 2 s for the take-over on a loaded
# machine), SEQSVR_UPGRADE_IMAGE (default: the running image, recreated),
# SEQSVR_DRILL_OUT (a directory: each report is written there as
# <drill>.json instead of printed). Exits non-zero if any drill failed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

fault="$compose_dir/fault.sh"
rate=${SEQSVR_DRILL_RATE:-1000}
conc=${SEQSVR_DRILL_CONCURRENCY:-16}
max_outage=${SEQSVR_DRILL_MAX_OUTAGE:-6500ms}
upgrade_image=${SEQSVR_UPGRADE_IMAGE:-$SEQSVR_IMAGE}

all=(kill-alloc pause-alloc cut-alloc cut-store-leader twin-alloc rolling-restart rolling-upgrade)
[ $# -gt 0 ] || set -- "${all[@]}"

f() { # AT ACTION ARGS... -> a --fault flag value
    local at=$1
    shift
    printf '%s:exec:%q' "$at" "$fault"
    printf ' %q' "$@"
    echo
}

schedule() { # DRILL -> duration, then one fault per line
    case $1 in
        kill-alloc)
            echo 16s
            f 2s kill alloc-1
            f 10s start alloc-1
            ;;
        pause-alloc)
            echo 15s
            f 2s pause alloc-2
            f 11s unpause alloc-2
            ;;
        cut-alloc)
            echo 15s
            f 2s cut alloc-3 backend
            f 11s heal alloc-3 backend
            ;;
        cut-store-leader)
            echo 15s
            f 2s cut-leader
            f 11s heal-all
            ;;
        twin-alloc)
            echo 13s
            f 2s twin alloc-1
            f 10s untwin alloc-1
            ;;
        rolling-restart)
            echo 46s
            f 2s restart store-1
            f 8s restart store-2
            f 14s restart store-3
            f 20s restart alloc-1
            f 28s restart alloc-2
            f 36s restart alloc-3
            ;;
        rolling-upgrade)
            echo 58s
            f 2s upgrade store-1 "$upgrade_image"
            f 8s upgrade store-2 "$upgrade_image"
            f 14s upgrade store-3 "$upgrade_image"
            f 20s upgrade alloc-1 "$upgrade_image"
            f 32s upgrade alloc-2 "$upgrade_image"
            f 44s upgrade alloc-3 "$upgrade_image"
            ;;
        *) echo "drills.sh: unknown drill $1 (${all[*]})" >&2; return 1 ;;
    esac
}

failed=()
for drill in "$@"; do
    plan=$(schedule "$drill")
    duration=$(head -n 1 <<<"$plan")
    min_calls=$(( rate * ${duration%s} / 2 ))
    args=(drill --duration "$duration" --rate "$rate" --concurrency "$conc"
          --min-calls "$min_calls" --max-outage "$max_outage")
    while IFS= read -r flt; do
        args+=(--fault "$flt")
    done < <(tail -n +2 <<<"$plan")
    echo "== $drill ($duration)"
    "$fault" settle
    if [ -n "${SEQSVR_DRILL_OUT:-}" ]; then
        mkdir -p "$SEQSVR_DRILL_OUT"
        ctl "${args[@]}" --json > "$SEQSVR_DRILL_OUT/$drill.json" || failed+=("$drill")
    else
        ctl "${args[@]}" || failed+=("$drill")
    fi
done
"$fault" settle >/dev/null

if [ ${#failed[@]} -gt 0 ]; then
    echo "drills.sh: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "drills.sh: all passed: $*"
