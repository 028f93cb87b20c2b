#!/usr/bin/env bash
# Make a Docker engine reachable. On Debian as root, install docker.io and start dockerd
# (there is no systemd on these machines); elsewhere stop and say what to install.
set -euo pipefail
log() { echo "[ensure-docker] $*" >&2; }

if docker info >/dev/null 2>&1; then exit 0; fi

if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
  log "No Docker engine is reachable (docker info failed)."
  log "Install and start Docker Engine (https://docs.docker.com/engine/install/), make sure your user"
  log "can reach it (docker info), then run this again."
  exit 1
fi

if [ ! -x /usr/sbin/dockerd ]; then
  log "No Docker engine installed: installing Debian's docker.io (about 30 s)..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi

if ! pgrep -x dockerd >/dev/null; then
  log "Starting dockerd in the background (log: /var/log/dockerd.log)..."
  nohup /usr/sbin/dockerd >/var/log/dockerd.log 2>&1 &
fi
for _ in $(seq 1 120); do
  if docker info >/dev/null 2>&1; then log "Docker engine is up."; exit 0; fi
  sleep 0.5
done
log "dockerd did not become ready in 60 s; see /var/log/dockerd.log"
exit 1
