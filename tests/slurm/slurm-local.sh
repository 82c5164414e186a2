#!/bin/bash
# Copied from the team testbed (../shared/testbed/slurm-local.sh) so CI can run it from a clean checkout.
# slurm-local.sh — single-host Slurm "cluster" for integration tests, no systemd.
# Debian 12 packages: apt-get install -y --no-install-recommends slurm-wlm slurmctld slurmd slurm-client munge
# (slurm 22.05.8; policy-rc.d on this VM stops postinst from starting anything.)
#
# Usage:  slurm-local.sh start [NNODES]   # munged + slurmctld + NNODES slurmd (logical nodes n1..nN, default 3)
#         slurm-local.sh stop             # stops only the daemons this script started (by recorded PID)
#         slurm-local.sh status
#         eval "$(slurm-local.sh env)"    # exports SLURM_CONF for sinfo/srun/salloc/sbatch/scontrol
# Knobs (env): SLURM_LOCAL_BASE (/tmp/slurm-local), SLURM_LOCAL_CPUS (CPUs per logical node, 2),
#              SLURM_LOCAL_CTLD_PORT (16817), SLURM_LOCAL_SLURMD_PORT (first slurmd port, 16818),
#              SLURM_LOCAL_AUTH (munge|none)  — "none" uses auth/none + cred/none, no munged needed.
# Everything (config, state, spool, logs, pid files, munge socket) lives under $BASE.
set -euo pipefail
BASE=${SLURM_LOCAL_BASE:-/tmp/slurm-local}
CPUS=${SLURM_LOCAL_CPUS:-2}
CTLD_PORT=${SLURM_LOCAL_CTLD_PORT:-16817}
SD_PORT0=${SLURM_LOCAL_SLURMD_PORT:-16818}
AUTH=${SLURM_LOCAL_AUTH:-munge}
HOST=$(hostname -s)
CONF=$BASE/etc/slurm.conf
RUN=$BASE/run

log() { echo "[slurm-local] $*" >&2; }

write_conf() {
  local n=$1 last=$((SD_PORT0 + $1 - 1))
  mkdir -p "$BASE"/{etc,state,spool,log,run,munge}
  for i in $(seq 1 "$n"); do mkdir -p "$BASE/spool/n$i"; done
  chmod 711 "$BASE/munge"
  local auth_lines
  if [ "$AUTH" = none ]; then
    auth_lines="AuthType=auth/none
CredType=cred/none"
  else
    auth_lines="AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$BASE/munge/munge.socket"
  fi
  cat > "$CONF" <<EOF
ClusterName=local
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SD_PORT0
SlurmUser=root
MailProg=/bin/true
SlurmdUser=root
$auth_lines
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups / no systemd: plain process tracking
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=30
# logical nodes share the host's CPUs; trust the config over the probed hardware
SlurmdParameters=config_overrides
NodeName=n[1-$n] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[$SD_PORT0-$last] CPUs=$CPUS RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  # empty cgroup.conf silences a warning in 22.05 even when cgroups are unused
  : > "$BASE/etc/cgroup.conf"
}

start_bg() { # name, cmd... : run in foreground mode in background, record PID
  local name=$1; shift
  setsid "$@" </dev/null >>"$BASE/log/$name.out" 2>&1 &
  echo $! > "$RUN/$name.bgpid"
}

start() {
  local n=${1:-${SLURM_LOCAL_NODES:-3}}
  local t0; t0=$(date +%s.%N)
  if [ -e "$RUN/slurmctld.bgpid" ] && kill -0 "$(cat "$RUN/slurmctld.bgpid")" 2>/dev/null; then
    log "already running"; return 0; fi
  write_conf "$n"
  export SLURM_CONF=$CONF
  if [ "$AUTH" != none ]; then
    # private munge instance (own key + socket) so we never touch a system munged
    [ -s "$BASE/munge/munge.key" ] || { dd if=/dev/urandom of="$BASE/munge/munge.key" bs=1024 count=1 status=none; chmod 600 "$BASE/munge/munge.key"; }
    start_bg munged /usr/sbin/munged -F -f --key-file="$BASE/munge/munge.key" \
      --socket="$BASE/munge/munge.socket" --pid-file="$RUN/munged.pid" \
      --seed-file="$BASE/munge/munged.seed" --log-file="$BASE/log/munged.log"
    for _ in $(seq 50); do [ -S "$BASE/munge/munge.socket" ] && break; sleep 0.1; done
    munge -S "$BASE/munge/munge.socket" -n | unmunge -S "$BASE/munge/munge.socket" >/dev/null || { log "munge self-test failed"; exit 1; }
  fi
  start_bg slurmctld /usr/sbin/slurmctld -D -i -f "$CONF"
  for i in $(seq 1 "$n"); do
    start_bg "slurmd-n$i" /usr/sbin/slurmd -D -f "$CONF" -N "n$i"
  done
  # wait until every node is idle
  for _ in $(seq 300); do
    local idle; idle=$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$' || true)
    [ "$idle" -ge "$n" ] && break; sleep 0.2
  done
  sinfo -N
  log "up in $(echo "$(date +%s.%N) - $t0" | bc) s; export SLURM_CONF=$CONF"
}

term_wait() { # TERM a set of recorded PIDs together, wait (max 5 s), then KILL leftovers
  local pids=() f p
  for f in "$@"; do [ -e "$f" ] || continue; p=$(cat "$f"); rm -f "$f"
    kill -0 "$p" 2>/dev/null && { kill -TERM "$p"; pids+=("$p"); }; done
  for _ in $(seq 50); do
    local alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0; sleep 0.1; done
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && kill -KILL "$p"; done; return 0
}

stop() {
  local t0; t0=$(date +%s.%N)
  # slurmds first (in parallel), then controller, then munge; only PIDs this script recorded
  term_wait "$RUN"/slurmd-*.bgpid
  term_wait "$RUN/slurmctld.bgpid"
  term_wait "$RUN/munged.bgpid"
  # stray slurmstepd processes of this instance (their cmdline references $BASE)
  for p in $(pgrep -x slurmstepd || true); do
    grep -qa "$BASE" /proc/"$p"/cmdline 2>/dev/null && kill -KILL "$p" || true
  done
  log "stopped in $(echo "$(date +%s.%N) - $t0" | bc) s"
}

case "${1:-}" in
  start) start "${2:-}";;
  stop) stop;;
  status) export SLURM_CONF=$CONF; for f in "$RUN"/*.bgpid; do [ -e "$f" ] && { p=$(cat "$f"); printf '%-14s %s %s\n' "$(basename "$f" .bgpid)" "$p" "$(kill -0 "$p" 2>/dev/null && echo up || echo dead)"; }; done; sinfo -N 2>/dev/null || true;;
  env) echo "export SLURM_CONF=$CONF";;
  *) echo "usage: $0 start [NNODES] | stop | status | env" >&2; exit 2;;
esac
