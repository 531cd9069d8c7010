#!/bin/sh
# Runs COMMAND with a private one-host Slurm cluster (`make cluster-test`):
# munged, slurmctld and slurmd (Debian 12's munge, slurmctld, slurmd and
# slurm-client, installed through scripts/deps.sh when missing, without
# starting their system services), started as root with everything under one
# temporary directory: munge key and socket, slurm.conf, state, spool, logs.
# The node is `localhost` (its tasks' endpoints are tcp://localhost:PORT),
# declared with CPUs=8 whatever this machine has (config_overrides), so an
# 8-task job fits; the daemons' ports are free ones picked here, and every
# client (sbatch, srun, scontrol) reaches them on 127.0.0.1. The daemons and
# COMMAND run in a network namespace of their own (loopback only) where one
# can be made. On exit the jobs are cancelled, the daemons stopped and the
# directory removed.
#
# usage: with-slurm.sh COMMAND...   (SLURM_CONF, for the Slurm commands,
# and RUMOR_SLURM_DIR, the directory, are exported to COMMAND)
# Exit status: COMMAND's; 3 when no cluster can be had (not root, the
# packages cannot be installed, a daemon does not start; the reason
# printed in one line).
set -eu
[ $# -gt 0 ] || { echo "usage: with-slurm.sh COMMAND..." >&2; exit 2; }
cannot() {
    echo "[slurm] no Slurm cluster: $*"
    exit 3
}
here=$(dirname "$0")

[ "$(id -u)" -eq 0 ] || cannot "starting munged, slurmctld and slurmd needs root"
missing=no
for prog in munged slurmctld slurmd sbatch; do
    command -v $prog >/dev/null 2>&1 || missing=yes
done
if [ $missing = yes ]; then
    # a policy-rc.d that refuses keeps the packages' own services stopped
    policy=/usr/sbin/policy-rc.d
    made_policy=no
    if [ ! -e $policy ]; then
        printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy && made_policy=yes
    fi
    status=0
    sh "$here/deps.sh" munge slurmctld slurmd slurm-client || status=$?
    [ $made_policy = no ] || rm -f $policy
    [ $status -eq 0 ] || cannot "apt-get could not install munge slurmctld slurmd slurm-client"
fi

# slurmctld and slurmd listen on every address (Slurm has no setting for
# one): in a network namespace of their own, with COMMAND, only loopback
# exists. Slurm asks getaddrinfo for AI_ADDRCONFIG addresses, which counts
# no 127.0.0.1, hence a second loopback address. Where no namespace can be
# made (a container without the right), they run here, reached on
# 127.0.0.1 and answering only munge's throwaway key.
# shellcheck disable=SC2016 # $0 and $@ of the inner sh
if [ -z "${RUMOR_SLURM_NETNS:-}" ] && command -v ip >/dev/null 2>&1 &&
    unshare --net true 2>/dev/null; then
    RUMOR_SLURM_NETNS=1 exec unshare --net sh -c \
        'ip link set lo up && ip addr add 127.0.0.2/32 dev lo && exec sh "$0" "$@"' "$0" "$@"
fi
netns="its own network namespace"
[ -n "${RUMOR_SLURM_NETNS:-}" ] || netns="this machine's network (no namespace could be made)"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

dir=$(mktemp -d /tmp/rumor-slurm-XXXXXX)
start=$(date +%s)
pids=""
stop() {
    status=$?
    trap - EXIT INT TERM
    if [ -n "$pids" ]; then
        # jobs first: slurmstepd outlives a stopped slurmd
        scancel --quiet --full --partition=rumor >/dev/null 2>&1 || true
        deadline=$(($(date +%s) + 30))
        while [ -n "$(squeue -h -o %i 2>/dev/null)" ] && [ "$(date +%s)" -lt "$deadline" ]; do
            sleep 0.5
        done
        for pid in $pids; do kill "$pid" 2>/dev/null || true; done
        for pid in $pids; do wait "$pid" 2>/dev/null || true; done
    fi
    rm -rf "$dir"
    echo "[slurm] cluster stopped"
    exit "$status"
}
trap stop EXIT
trap 'exit 130' INT TERM

# The last line of a daemon's log that says why it stopped.
why() { grep -h -i -m 1 'fatal\|error' "$@" 2>/dev/null || tail -q -n 1 "$@" 2>/dev/null; }

mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
chmod 700 "$dir/munge"
head -c 1024 /dev/urandom >"$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"
munged --foreground --force --socket="$dir/munge/munge.socket" \
    --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
    --seed-file="$dir/munge/munged.seed" --log-file="$dir/munged.log" \
    >>"$dir/munged.log" 2>&1 &
pids="$!"

# MinJobAge=5: `sbatch --wait` polls every 2 s while 2 < MinJobAge / 2
# would allow longer sleeps (2, 8, 32 s: a 9 s job returned after 42 s),
# and a finished job stays visible to it and to scontrol for 5 s at least.
: >"$dir/plugstack.conf"
export SLURM_CONF="$dir/slurm.conf" RUMOR_SLURM_DIR="$dir"
cat >"$SLURM_CONF" <<EOF
ClusterName=rumor
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=rumor Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

# munged answers before the daemons that need it start
sock="$dir/munge/munge.socket"
until munge -n --socket="$sock" 2>/dev/null | unmunge --socket="$sock" >/dev/null 2>&1; do
    kill -0 "$pids" 2>/dev/null || cannot "munged did not start: $(why "$dir/munged.log")"
    [ $(($(date +%s) - start)) -lt 30 ] || cannot "munged did not answer within 30 s"
    sleep 0.2
done
slurmctld -D -i -f "$SLURM_CONF" >>"$dir/slurmctld.log" 2>&1 &
pids="$pids $!"
slurmd -D -N localhost -f "$SLURM_CONF" >>"$dir/slurmd.log" 2>&1 &
pids="$pids $!"

until [ "$(sinfo -h -n localhost -o %t 2>/dev/null)" = idle ]; do
    for pid in $pids; do
        kill -0 "$pid" 2>/dev/null ||
            cannot "a daemon stopped: $(why "$dir/slurmctld.log" "$dir/slurmd.log" "$dir/munged.log")"
    done
    [ $(($(date +%s) - start)) -lt 60 ] ||
        cannot "node localhost not idle within 60 s: $(why "$dir/slurmctld.log" "$dir/slurmd.log")"
    sleep 0.5
done
echo "[slurm] cluster at $SLURM_CONF ($(sinfo -h -o '%P %D node(s) %c CPUs'), $(sinfo -V)) in $netns, ready in $(($(date +%s) - start)) s"
"$@"
