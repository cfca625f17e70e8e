#!/bin/sh
# cluster.sh - a single-node Slurm cluster for tests (tests/test_slurm.c): munged, slurmctld and
# slurmd from Debian's munge, slurmctld and slurmd packages, on 127.0.0.1, every file (munge key
# and socket, slurm.conf, state, spool, logs) in one folder, run as the current user.
#   sh tests/slurm/cluster.sh start DIR   exit 0: up, DIR/env holds SLURM_CONF=...; exit 77: it
#                                         cannot run here (the reason on stdout, as a SKIP line)
#   sh tests/slurm/cluster.sh stop DIR    stops what start started (by the pid files), quietly
# Leaves the machine's own /etc/munge and /etc/slurm alone. munged wants every folder above DIR
# searchable by all (mkdtemp's are not: chmod 755 it).
set -u
cmd=${1:-}; dir=${2:-}
[ -n "$dir" ] || { echo "usage: cluster.sh start|stop DIR"; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
skip() { echo "SKIP slurm: $*"; exit 77; }

stop() {
    pids=""
    for p in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -f "$p" ] && pids="$pids $(cat "$p")"
    done
    [ -n "$pids" ] && kill $pids 2>/dev/null
    # until they are gone (a later test's cluster must find the ports free), then SIGKILL
    for _ in $(seq 1 20); do
        alive=""
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
        [ -z "$alive" ] && return 0
        sleep 0.25
    done
    kill -9 $alive 2>/dev/null
    return 0
}

# a TCP port nothing listens on (from /proc/net/tcp*), from a start that depends on this process
free_port() {
    p=$1
    while [ "$p" -lt 65000 ]; do
        hex=$(printf ':%04X ' "$p")
        if ! grep -qi "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null; then echo "$p"; return; fi
        p=$((p + 1))
    done
    echo 0
}

log_tail() { for f in "$@"; do [ -f "$f" ] && tail -n 5 "$f" | sed "s|^|  $(basename "$f"): |"; done; }

case "$cmd" in
stop) stop; exit 0 ;;
start) ;;
*) echo "usage: cluster.sh start|stop DIR"; exit 2 ;;
esac

for b in munged munge slurmctld slurmd sbatch squeue scontrol sinfo; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || skip "$b not installed (Debian: munge slurmctld slurmd slurm-client)"
done
PATH="$PATH:/usr/sbin"
user=$(id -un)
host=$(hostname -s 2>/dev/null || hostname)

# munge: its own key and socket (the folder must be searchable by all, the key private)
mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
chmod 755 "$dir" "$dir/munge"
head -c 1024 /dev/urandom > "$dir/munge/munge.key" && chmod 400 "$dir/munge/munge.key" || skip "cannot write a munge key"
if ! munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" --pid-file="$dir/munge/munged.pid" \
        --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" >"$dir/munge/start.log" 2>&1; then
    cat "$dir/munge/start.log"; log_tail "$dir/munge/munged.log"
    skip "munged does not start as $user"
fi
munge -S "$dir/munge/munge.sock" -n | unmunge -S "$dir/munge/munge.sock" >/dev/null 2>&1 || { stop; skip "munge does not work"; }

base=$((20000 + $$ % 20000))
ctld_port=$(free_port $base)
d_port=$(free_port $((ctld_port + 1)))
cat > "$dir/slurm.conf" <<CONF
# a one-node test cluster (tests/slurm/cluster.sh)
ClusterName=lztest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
SlurmctldTimeout=10
SlurmdTimeout=10
NodeName=lznode NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=lznode Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$dir/slurm.conf"
echo "SLURM_CONF=$dir/slurm.conf" > "$dir/env"
slurmctld -c -f "$SLURM_CONF" >"$dir/ctld-start.log" 2>&1 || { cat "$dir/ctld-start.log"; log_tail "$dir/slurmctld.log"; stop; skip "slurmctld does not start as $user"; }
slurmd -f "$SLURM_CONF" -N lznode >"$dir/d-start.log" 2>&1 || { cat "$dir/d-start.log"; log_tail "$dir/slurmd.log"; stop; skip "slurmd does not start as $user"; }
# the node idle within 30 s (resumed if it registered as down)
for _ in $(seq 1 60); do
    state=$(sinfo -h -n lznode -o %t 2>/dev/null | head -n 1)
    case "$state" in
    idle*) exit 0 ;;
    down*|drain*) scontrol update nodename=lznode state=resume >/dev/null 2>&1 ;;
    esac
    sleep 0.5
done
log_tail "$dir/slurmctld.log" "$dir/slurmd.log"
stop
skip "the node did not become idle (state '$state')"
