#!/usr/bin/env bash
# The parts beyond one machine, for real, on this machine: a single-node SLURM cluster (munge, slurmctld,
# slurmd), an sshd on 127.0.0.1:2222, and a second Docker engine (its own socket, data-root, exec-root,
# bridge, pidfile) that is what `ssh://orch-ci-remote:2222` reaches. Root on Debian only.
#
#   scripts/ci-hosts.sh start   install (apt, once) and start what is not running; idempotent
#   scripts/ci-hosts.sh stop    stop, by the PIDs in their pidfiles, the daemons this script starts
#
# Nothing outside its own folders is changed: SLURM reads $state/slurm.conf (SLURM_CONF), munge its own key
# and socket, sshd its own config and authorized_keys, and the client side (key, ssh config, known_hosts)
# lives in $state/client/.ssh: a program reaches the remote engine with HOME=$state/client (docker-py's
# paramiko reads ~/.ssh by $HOME). $state/hosts.json says where everything is, for the tests.
# Without root or Debian it says so and exits 0 (tests skip), or 1 under CI=true (tests must not skip).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
log() { echo "[ci-hosts] $*" >&2; }

state=$cache_dir/hosts          # persistent: keys, SLURM state, the second engine's images
run=/run/orchestrator-ci        # short paths for sockets and pidfiles (a unix socket path has 108 bytes)
port=2222 alias=orch-ci-remote bridge=orchci0 bridge_cidr=172.31.250.1/24
export SLURM_CONF=$state/slurm.conf

pidfiles=("$run/slurmd.pid" "$run/slurmctld.pid" "$run/docker.pid" "$run/sshd.pid" "$run/munged.pid")

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for WHAT SECONDS COMMAND...: poll until COMMAND succeeds
  local what=$1 seconds=$2; shift 2
  for _ in $(seq 1 $((seconds * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  log "$what did not come up in ${seconds} s"; return 1
}

stop_pid() {  # stop_pid PIDFILE: SIGTERM, then SIGKILL after 10 s
  alive "$1" || return 0
  local pid
  pid=$(cat "$1")
  kill "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then log "pid $pid ($1) ignored SIGTERM for 10 s: SIGKILL"; kill -9 "$pid"; fi
  rm -f "$1"
}

stop() {
  for pidfile in "${pidfiles[@]}"; do stop_pid "$pidfile"; done
  if ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge"; fi
  log "stopped"
}

install() {
  local missing=()
  for pair in slurmctld:slurm-wlm munged:munge sshd:openssh-server dockerd:docker.io; do
    [ -x "/usr/sbin/${pair%%:*}" ] || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]} (about 40 s)..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start_munge() {
  # munged runs as munge, who cannot enter root's home: its key and files live under $run.
  mkdir -p "$run/munge"
  [ -s "$run/munge/munge.key" ] || dd if=/dev/urandom bs=1 count=1024 of="$run/munge/munge.key" status=none
  chown -R munge:munge "$run/munge"
  chmod 0711 "$run/munge"; chmod 0400 "$run/munge/munge.key"
  alive "$run/munged.pid" && return 0
  runuser -u munge -- /usr/sbin/munged --key-file="$run/munge/munge.key" --socket="$run/munge/munge.socket" \
    --pid-file="$run/munge/munged.pid" --log-file="$run/munge/munged.log" --seed-file="$run/munge/munged.seed"
  wait_for munged 10 test -s "$run/munge/munged.pid"
  ln -sf "$run/munge/munged.pid" "$run/munged.pid"
}

start_slurm() {
  local host mem_mb
  host=$(hostname -s)
  mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  mkdir -p "$state/slurm/ctld" "$state/slurm/d"
  cat >"$SLURM_CONF.tmp" <<EOF
# Written by scripts/ci-hosts.sh: a single-node cluster for the project's tests.
ClusterName=orchci
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$run/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$state/slurm/ctld
SlurmdSpoolDir=$state/slurm/d
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
SlurmctldLogFile=$state/slurm/slurmctld.log
SlurmdLogFile=$state/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# A job past its time limit gets SIGTERM, then SIGKILL after KillWait; finished jobs stay visible to
# scontrol for MinJobAge (there is no accounting database here, so sacct has nothing).
KillWait=5
MinJobAge=3600
# More CPUs than the machine has (config_overrides): a test sweep's jobs mostly wait on their arms, and a
# job that never starts cannot be cancelled or time out while running.
SlurmdParameters=config_overrides
NodeName=$host CPUs=$(( $(nproc) * 4 )) RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  if ! cmp -s "$SLURM_CONF.tmp" "$SLURM_CONF"; then  # a changed node needs both daemons restarted
    stop_pid "$run/slurmd.pid"; stop_pid "$run/slurmctld.pid"
  fi
  mv "$SLURM_CONF.tmp" "$SLURM_CONF"
  if ! alive "$run/slurmctld.pid"; then /usr/sbin/slurmctld -f "$SLURM_CONF"; fi
  wait_for slurmctld 20 scontrol ping
  if ! alive "$run/slurmd.pid"; then /usr/sbin/slurmd -f "$SLURM_CONF"; fi
  wait_for "slurmd (node idle)" 30 sh -c 'sinfo -h -o %t | grep -qx idle'
}

start_docker2() {
  mkdir -p "$state/docker-root" "$run/docker-exec"
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add name "$bridge" type bridge
    ip addr add "$bridge_cidr" dev "$bridge"
    ip link set "$bridge" up
  fi
  if ! alive "$run/docker.pid"; then
    # iptables stays the first engine's; ports published on 127.0.0.1 work through docker-proxy.
    nohup /usr/sbin/dockerd --data-root "$state/docker-root" --exec-root "$run/docker-exec" \
      -H "unix://$run/docker.sock" --pidfile "$run/docker.pid" --bridge "$bridge" --iptables=false \
      >"$state/dockerd.log" 2>&1 &
  fi
  wait_for "the second dockerd ($state/dockerd.log)" 30 docker -H "unix://$run/docker.sock" info
}

start_sshd() {
  local ssh=$state/ssh client=$state/client/.ssh
  mkdir -p "$ssh" "$client" /run/sshd
  chmod 0700 "$client"
  [ -s "$ssh/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$ssh/host_ed25519"
  [ -s "$client/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$client/id_ed25519" -C orchestrator-ci
  cp "$client/id_ed25519.pub" "$ssh/authorized_keys"
  cat >"$ssh/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $ssh/host_ed25519
PidFile $run/sshd.pid
AuthorizedKeysFile $ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
X11Forwarding no
AllowTcpForwarding local
# The far side's default engine is the second dockerd: what 'docker system dial-stdio' reaches.
SetEnv DOCKER_HOST=unix://$run/docker.sock
EOF
  if ! alive "$run/sshd.pid"; then /usr/sbin/sshd -f "$ssh/sshd_config"; fi
  wait_for sshd 10 ssh-keyscan -p "$port" 127.0.0.1
  ssh-keyscan -t ed25519 -p "$port" 127.0.0.1 >"$client/known_hosts" 2>/dev/null
  cat >"$client/config" <<EOF
Host $alias
  HostName 127.0.0.1
  Port $port
  User root
  IdentityFile $client/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $client/known_hosts
  BatchMode yes
EOF
  chmod 0600 "$client/config" "$client/known_hosts"
  wait_for "docker over ssh" 20 env HOME="$state/client" ssh -F "$client/config" "$alias" docker version
}

start() {
  if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
    log "needs root on Debian to install and start SLURM, sshd and a second Docker engine; the SLURM and"
    log "ssh:// tests skip (docs/hosts.md says how to point them at a real cluster and host)"
    [ "${CI:-}" = true ] && exit 1
    exit 0
  fi
  local t0=$SECONDS
  install
  mkdir -p "$state" "$run"
  start_munge
  start_slurm
  start_docker2
  start_sshd
  cat >"$state/hosts.json.tmp" <<EOF
{"slurm_conf": "$SLURM_CONF", "partition": "debug",
 "ssh_url": "ssh://$alias:$port", "ssh_home": "$state/client",
 "remote_docker": "unix://$run/docker.sock", "sshd_pid_file": "$run/sshd.pid"}
EOF
  mv "$state/hosts.json.tmp" "$state/hosts.json"
  log "up in $((SECONDS - t0)) s: SLURM (SLURM_CONF=$SLURM_CONF), sshd 127.0.0.1:$port, second engine $run/docker.sock"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
