#!/usr/bin/env bash
# Stops the compose cluster and removes its containers and networks.
# Volumes (the store's data, the PKI) are kept unless -v is given:
#
#   deploy/compose/down.sh        # keep data; up.sh resumes
#   deploy/compose/down.sh -v     # delete the cluster for good
set -euo pipefail
source "$(dirname "$0")/lib.sh"

compose --profile init down --remove-orphans "$@"
if [ "${1:-}" = -v ]; then
    rm -rf "$run_dir"
fi
