#!/usr/bin/env bash
# Builds the seqsvr image with one command, pulling nothing:
#
#   deploy/docker/build.sh [TAG]        # image seqsvr:TAG (default: local)
#
# 1. cargo build of `seqsvr` and `seqctl` with the `image` profile (the
#    release settings, in target/image: never over the binaries a
#    `cargo test --release` runs, which carry the store's fault hooks);
# 2. stages them (stripped) with every shared library `ldd` lists and the
#    dynamic loader, at the same paths, plus /etc/passwd for the non-root
#    user 10001;
# 3. docker build FROM scratch (deploy/docker/Dockerfile), and prints the
#    image's size.
#
# Environment: SEQSVR_IMAGE_NAME (default seqsvr), CARGO (default cargo),
# SEQSVR_SKIP_CARGO=1 to package binaries already built.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tag=${1:-${SEQSVR_TAG:-local}}
image="${SEQSVR_IMAGE_NAME:-seqsvr}:$tag"
cargo=${CARGO:-cargo}

cd "$root"
if [ "${SEQSVR_SKIP_CARGO:-0}" != 1 ]; then
    "$cargo" build --profile image --bin seqsvr --bin seqctl
fi
target=${CARGO_TARGET_DIR:-$("$cargo" metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}
bin="$target/image"
for b in seqsvr seqctl; do
    [ -x "$bin/$b" ] || { echo "build.sh: $bin/$b is missing" >&2; exit 1; }
done

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
rootfs="$ctx/rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$ctx/owned/data" "$ctx/owned/etc/seqsvr/tls"

for b in seqsvr seqctl; do
    # Debug info stays in target/; the image carries symbols only.
    strip --strip-debug -o "$rootfs/usr/local/bin/$b" "$bin/$b"
done

# The loader and every library the binaries load, at the paths ldd gives
# (symlinks resolved, so the image holds real files).
libs=$(for b in seqsvr seqctl; do
    ldd "$bin/$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u)
for lib in $libs; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
done

cat > "$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
seqsvr:x:10001:10001:seqsvr:/data:/sbin/nologin
PASSWD
cat > "$rootfs/etc/group" <<'GROUP'
root:x:0:
seqsvr:x:10001:
GROUP
# Name lookups: /etc/hosts, then DNS (the container runtime provides both).
echo 'hosts: files dns' > "$rootfs/etc/nsswitch.conf"

cp "$here/Dockerfile" "$ctx/Dockerfile"
version=$("$bin/seqsvr" --version | awk '{ print $2 }')
docker build --quiet --build-arg "VERSION=$version" -t "$image" "$ctx" >/dev/null

size=$(docker image inspect -f '{{.Size}}' "$image")
echo "libraries: $(echo $libs | tr ' ' '\n' | xargs -n1 basename | tr '\n' ' ')"
awk -v img="$image" -v s="$size" 'BEGIN { printf "built %s: %.1f MB\n", img, s / 1e6 }'
