#!/usr/bin/env bash
# Build a minimal Debian bookworm + python3 base image without any registry (debootstrap + import).
# Usage: build-base-image.sh IMAGE_TAG   (skips when the image exists)
set -euo pipefail
# The engine's own client (Debian's docker.io) builds with BuildKit without a buildx plugin.
docker() { if [ -x /usr/bin/docker ]; then /usr/bin/docker "$@"; else command docker "$@"; fi; }
tag=${1:?usage: build-base-image.sh IMAGE_TAG}
log() { echo "[base-image] $*" >&2; }

if docker image inspect "$tag" >/dev/null 2>&1; then exit 0; fi
if ! command -v debootstrap >/dev/null; then
  log "Installing debootstrap..."
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
rootfs=$(mktemp -d /tmp/rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
log "debootstrap bookworm (minbase + python3) into $rootfs (about a minute)..."
debootstrap --variant=minbase --include=python3 bookworm "$rootfs" >/tmp/debootstrap.log 2>&1 \
  || { log "debootstrap failed; see /tmp/debootstrap.log"; exit 1; }
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
       "$rootfs"/usr/share/doc "$rootfs"/usr/share/man
tar -C "$rootfs" -c . | docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' - "$tag" >/dev/null
log "Imported $tag"
