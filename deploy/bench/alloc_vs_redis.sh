#!/usr/bin/env bash
# AllocSvr over gRPC vs a bare tonic server and Redis 7 INCR (AOF,
# appendfsync everysec), in one command. See docs/benchmarks.md.
#
#   deploy/bench/alloc_vs_redis.sh [--secs N] [--threads T]
#
# Installs Debian's redis-server and redis-tools if redis-server or
# redis-benchmark is missing (apt-get; root or sudo), then runs
# `cargo bench -p seqsvr --bench alloc_grpc -- --redis`, which starts a
# seqsvr cluster (3 stores + 1 AllocSvr), a bare tonic server and its own
# redis-server on free loopback ports, runs every shape against all three,
# prints the figures and the seqsvr/bare and seqsvr/Redis ratios, and stops
# everything it started.
set -euo pipefail

cd "$(dirname "$0")/../.."

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    echo "alloc_vs_redis: installing redis-server and redis-tools (apt-get)" >&2
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools
fi

exec cargo bench -p seqsvr --bench alloc_grpc -- --redis "$@"
