#!/usr/bin/env bash
# Builds the static cram binary and the image `cram:${TAG:-local}` from deploy/Dockerfile.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${TAG:-local}"
TARGET=x86_64-unknown-linux-gnu
RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --locked --target "$TARGET" --bin cram
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/data/state" "$ctx/rootfs/data/cache" "$ctx/rootfs/data/db"
cp "target/$TARGET/release/cram" "$ctx/rootfs/cram"
strip "$ctx/rootfs/cram" 2>/dev/null || true
cp deploy/Dockerfile "$ctx/Dockerfile"
docker build --quiet -t "cram:$TAG" "$ctx" >/dev/null
echo "built cram:$TAG ($(docker image inspect "cram:$TAG" --format '{{.Size}}' | awk '{printf "%.1f MiB", $1/1048576}'))"
