#!/usr/bin/env bash
# hosts.sh — N network-namespace "hosts" with an sshd each, for dynres' multi-host tests.
#
# Topology (as ../shared/testbed/netns-hosts.sh): a switch namespace ${P}sw holds bridge br0;
# each host namespace ${P}hI has eth0 (a veth plugged into br0) with ${SUBNET}.I/24 and its
# own lo. The root namespace is not touched (no bridge, veth or route there).
#
# Each host also runs an sshd listening on ${SUBNET}.I:22: throwaway host key, root login
# by key only (a throwaway client key pair), everything in the state directory. An ssh
# client config there (Host ${SUBNET}.*) lets any host ssh to any other:
#   hosts.sh exec 1 ssh -F "$(hosts.sh ssh-config)" 10.77.0.2 true
#
# Usage:  hosts.sh up N          # (re)creates hosts 1..N and their sshds; prints the config path
#         hosts.sh down          # stops our sshds, kills what runs in our namespaces, deletes them
#         hosts.sh exec I CMD... # CMD inside host I
#         hosts.sh ssh-config    # path of the ssh client config
#         hosts.sh list
# Knobs (env): NETNS_PREFIX (default "dyt"), NETNS_SUBNET (default 10.77.0), NETNS_MTU (1500),
#              NETNS_STATE (state directory, default ${TMPDIR:-/tmp}/dynres-netns-${P}).
# Needs root (sudo is used only to install openssh-server when sshd is missing), iproute2 and
# coreutils' timeout. `up` and `down` are idempotent and bounded; on failure they print one
# line starting with "hosts.sh:" on stderr and exit non-zero.
set -euo pipefail

P=${NETNS_PREFIX:-dyt}
SUBNET=${NETNS_SUBNET:-10.77.0}
MTU=${NETNS_MTU:-1500}
SW=${P}sw
STATE=${NETNS_STATE:-${TMPDIR:-/tmp}/dynres-netns-$P}
SSHD=/usr/sbin/sshd
T=10 # seconds any one command may take

fail() {
  echo "hosts.sh: $*" >&2
  exit 1
}

# Runs "$@" bounded by $T seconds; on failure, one line naming what failed.
run() {
  local out
  if ! out=$(timeout "$T" "$@" 2>&1); then
    fail "'$*' failed: $(echo "$out" | tail -n 1)"
  fi
}

case "$P" in
  *[!A-Za-z0-9_-]* | "") fail "NETNS_PREFIX must be letters, digits, '-' or '_', not '$P'" ;;
esac

our_namespaces() {
  timeout "$T" ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${P}(h[0-9]+|sw)$" || true
}

ensure_sshd() {
  [ -x "$SSHD" ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
  echo "hosts.sh: installing openssh-server" >&2
  # Debian would start a system-wide sshd on install; the policy only exists for the
  # install, and only if the machine has none of its own.
  local policy=/usr/sbin/policy-rc.d made_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod 755 "$policy" && made_policy=1
  fi
  local ok=1
  timeout 300 $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
  timeout 600 $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    openssh-server openssh-client >/dev/null 2>&1 || ok=""
  [ -n "$made_policy" ] && $sudo rm -f "$policy"
  [ -n "$ok" ] && [ -x "$SSHD" ] || fail "could not install openssh-server with apt-get"
}

down() {
  # Our sshds first (by pid file, and only if the pid is still an sshd of ours).
  local f pid
  for f in "$STATE"/sshd-h*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$STATE/sshd_config"; then
      kill "$pid" 2>/dev/null || true
    fi
  done
  local ns pids
  for ns in $(our_namespaces); do
    # A process left inside a namespace keeps it alive after deletion: end only those in ours.
    pids=$(timeout "$T" ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      kill $pids 2>/dev/null || true
      local deadline=$((SECONDS + T))
      while [ -n "$(timeout "$T" ip netns pids "$ns" 2>/dev/null || true)" ] && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.1
      done
      pids=$(timeout "$T" ip netns pids "$ns" 2>/dev/null || true)
      [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    fi
    run ip netns del "$ns"
  done
  rm -rf "$STATE"
}

# Waits (bounded) until host I's sshd accepts connections on its address.
wait_sshd() {
  local i=$1 deadline=$((SECONDS + T))
  until ip netns exec "${P}h$i" timeout 1 bash -c "exec 3<>/dev/tcp/$SUBNET.$i/22" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail "sshd of host $i ($SUBNET.$i:22) did not come up; log: $STATE/sshd-h$i.log"
    fi
    sleep 0.1
  done
}

up() {
  local n=$1 i h
  case "$n" in
    '' | *[!0-9]*) fail "up needs a host count, not '$n'" ;;
  esac
  [ "$n" -ge 1 ] && [ "$n" -le 250 ] || fail "host count must be 1..250, not $n"
  [ "$(id -u)" -eq 0 ] || fail "must run as root (network namespaces)"
  command -v ip >/dev/null || fail "iproute2 (ip) is missing"
  ensure_sshd
  down
  # Undo a half-made set if anything below fails.
  trap 'status=$?; [ "$status" -ne 0 ] && down >/dev/null 2>&1; exit "$status"' EXIT
  mkdir -p /run/sshd
  chmod 0755 /run/sshd
  (umask 077 && mkdir -p "$STATE")
  run ssh-keygen -q -t ed25519 -N '' -C "dynres-netns-host" -f "$STATE/host_ed25519"
  run ssh-keygen -q -t ed25519 -N '' -C "dynres-netns-client" -f "$STATE/id_ed25519"
  cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
  cat >"$STATE/sshd_config" <<EOF
Port 22
HostKey $STATE/host_ed25519
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
Subsystem sftp internal-sftp
EOF
  cat >"$STATE/ssh_config" <<EOF
Host $SUBNET.*
  User root
  IdentityFile $STATE/id_ed25519
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  BatchMode yes
  LogLevel ERROR
  ConnectTimeout 5
EOF
  run ip netns add "$SW"
  run ip -n "$SW" link set lo up
  run ip -n "$SW" link add br0 type bridge
  run ip -n "$SW" link set br0 up
  for i in $(seq 1 "$n"); do
    h=${P}h$i
    run ip netns add "$h"
    run ip -n "$h" link set lo up
    run ip -n "$SW" link add "p$i" mtu "$MTU" type veth peer name eth0 netns "$h"
    run ip -n "$SW" link set "p$i" master br0 up
    run ip -n "$h" link set eth0 mtu "$MTU" up
    run ip -n "$h" addr add "$SUBNET.$i/24" dev eth0
    run ip netns exec "$h" "$SSHD" -f "$STATE/sshd_config" \
      -o "ListenAddress=$SUBNET.$i:22" -o "PidFile=$STATE/sshd-h$i.pid" -E "$STATE/sshd-h$i.log"
  done
  for i in $(seq 1 "$n"); do wait_sshd "$i"; done
  trap - EXIT
  echo "up: $n hosts ${P}h1..${P}h$n on $SUBNET.0/24, sshd on each; ssh config $STATE/ssh_config"
}

case "${1:-}" in
  up) up "${2:-3}" ;;
  down)
    [ "$(id -u)" -eq 0 ] || fail "must run as root (network namespaces)"
    down
    echo "down: removed ${P}* namespaces and their sshds"
    ;;
  exec)
    [ $# -ge 3 ] || fail "usage: exec I CMD..."
    i=$2
    shift 2
    exec ip netns exec "${P}h$i" "$@"
    ;;
  ssh-config) echo "$STATE/ssh_config" ;;
  list) our_namespaces ;;
  *)
    echo "usage: $0 up N | down | exec I CMD... | ssh-config | list" >&2
    exit 2
    ;;
esac
