#!/usr/bin/env bash
# The TLS Secrets deploy/k8s mounts, from a PKI made by `seqsvr certs`:
#
#   seqsvr certs --dir certs --set 0 --store 1,2,3 \
#       --alloc seqsvr-alloc-0,seqsvr-alloc-1,seqsvr-alloc-2 --operator ops \
#       --host "$(deploy/k8s/secrets.sh hosts)"
#   deploy/k8s/secrets.sh yaml certs | kubectl apply -f -
#
#   hosts      prints the DNS names the certificates must carry (every
#              replica's and AllocSvr's name on its headless service)
#   yaml DIR   prints two Secrets: seqsvr-store-tls (ca.pem, store-N.pem,
#              store-N-key.pem) and seqsvr-alloc-tls (ca.pem,
#              seqsvr-alloc-N.pem, seqsvr-alloc-N-key.pem)
#
# Each store-N.pem must carry urn:seqsvr:store:0:N (set 0's replica N):
# a replica refuses to start with any other, and one of the old form
# (urn:seqsvr:store:N) only with legacy_store_certificates = true
# (docs/operations.md, "Rotating certificates").
#
# The CA key (ca-key.pem) and the operator's certificate stay out of the
# cluster. NAMESPACE overrides the namespace (seqsvr).
set -euo pipefail

ns=${NAMESPACE:-seqsvr}
stores=(1 2 3)
allocs=(seqsvr-alloc-0 seqsvr-alloc-1 seqsvr-alloc-2)

hosts() {
    local names=() i
    for i in 0 1 2; do
        names+=("seqsvr-store-$i.seqsvr-store-peer.$ns.svc")
        names+=("seqsvr-alloc-$i.seqsvr-alloc-peer.$ns.svc")
    done
    (IFS=,; echo "${names[*]}")
}

secret() { # NAME DIR FILE...
    local name=$1 dir=$2 f
    shift 2
    cat <<YAML
---
apiVersion: v1
kind: Secret
metadata:
  name: $name
  namespace: $ns
  labels:
    app.kubernetes.io/name: seqsvr
type: Opaque
data:
YAML
    for f in "$@"; do
        [ -f "$dir/$f" ] || { echo "secrets.sh: $dir/$f is missing (run seqsvr certs first)" >&2; exit 1; }
        echo "  $f: $(base64 -w0 < "$dir/$f")"
    done
}

case ${1:-} in
    hosts) hosts ;;
    yaml)
        dir=${2:?usage: secrets.sh yaml CERT_DIR}
        files=(ca.pem)
        for s in "${stores[@]}"; do files+=("store-$s.pem" "store-$s-key.pem"); done
        secret seqsvr-store-tls "$dir" "${files[@]}"
        files=(ca.pem)
        for a in "${allocs[@]}"; do files+=("$a.pem" "$a-key.pem"); done
        secret seqsvr-alloc-tls "$dir" "${files[@]}"
        ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
