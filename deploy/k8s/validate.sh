#!/usr/bin/env bash
# Validates deploy/k8s offline against the Kubernetes API schemas with
# kubernetes-validate (strict: unknown fields are errors), installing it
# into a virtualenv on first use:
#
#   deploy/k8s/validate.sh
#
# Checks every manifest, the output of `kubectl kustomize` (when kubectl
# is installed), and the Secrets secrets.sh writes (for a stand-in PKI);
# then check.py: what the schemas cannot say (required anti-affinity and
# a zone spread for store replicas, network policies, the metrics port,
# JSON logs).
# Environment: KUBERNETES_VERSION (the schema version, default: the
# validator's newest), SEQSVR_TOOLS_DIR (where the virtualenv lives,
# default ~/.cache/seqsvr-tools).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
kv_pin="kubernetes-validate==1.37.0"
tools=${SEQSVR_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seqsvr-tools}

if command -v kubernetes-validate >/dev/null 2>&1; then
    kv=kubernetes-validate
else
    kv="$tools/kv-venv/bin/kubernetes-validate"
    if [ ! -x "$kv" ]; then
        echo "validate.sh: installing $kv_pin into $tools/kv-venv" >&2
        mkdir -p "$tools"
        python3 -m venv "$tools/kv-venv"
        "$tools/kv-venv/bin/pip" install --quiet --disable-pip-version-check "$kv_pin"
    fi
fi
flags=(--strict --quiet)
[ -z "${KUBERNETES_VERSION:-}" ] || flags+=(-k "$KUBERNETES_VERSION")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

manifests=()
for f in "$here"/*.yaml; do
    [ "$(basename "$f")" = kustomization.yaml ] || manifests+=("$f")
done

# Secrets from a stand-in PKI (any text will do for the schema).
mkdir -p "$work/pki"
for f in ca store-1 store-2 store-3 seqsvr-alloc-0 seqsvr-alloc-1 seqsvr-alloc-2; do
    echo "stand-in $f" > "$work/pki/$f.pem"
    echo "stand-in $f key" > "$work/pki/$f-key.pem"
done
"$here/secrets.sh" yaml "$work/pki" > "$work/secrets.yaml"
manifests+=("$work/secrets.yaml")

if command -v kubectl >/dev/null 2>&1; then
    kubectl kustomize "$here" > "$work/kustomized.yaml"
    manifests+=("$work/kustomized.yaml")
else
    echo "validate.sh: kubectl not found: kustomization.yaml not built" >&2
fi

"$kv" "${flags[@]}" "${manifests[@]}"
# What the schemas cannot say (anti-affinity, zone spread, network
# policies, metrics port, JSON logs), with the validator's python, which
# has PyYAML.
py=python3
[ ! -x "$tools/kv-venv/bin/python3" ] || py="$tools/kv-venv/bin/python3"
"$py" "$here/check.py" "$here"
n=$(grep -h '^kind:' "${manifests[@]}" | wc -l)
echo "validate.sh: ${#manifests[@]} files, $n resources valid"
