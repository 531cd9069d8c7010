#!/bin/sh
# One Rumor node per Slurm task:
#   srun --ntasks=8 scripts/rumor-slurm.sh --dir /shared/run1 \
#       --topology torus:2x4 -- --algo powergossip --steps 2000
# (or the same line in an sbatch script). Each task
#   - takes its node id from SLURM_PROCID and the node count from
#     SLURM_NTASKS;
#   - finds its host from the allocation: SLURM_JOB_NODELIST expanded by
#     `scontrol show hostnames` (fallbacks below) with SLURM_TASKS_PER_NODE
#     ("2(x3),1"), tasks placed in blocks (srun's default distribution;
#     checked against SLURMD_NODENAME when Slurm sets it); its endpoint is
#     tcp://HOST:PORT_BASE+ID, so tasks sharing a host never share a port;
#   - makes its own CURVE keypair DIR/keys/node-ID.{key,pub} unless one is
#     there (race-free: no two tasks write the same file; keys persist
#     across jobs, so a requeued job keeps them);
#   - publishes "node ID ENDPOINT key=PUBLIC" in DIR/JOB.STEP/nodes/ID
#     (written to a temporary name, then renamed), waits until every task
#     has (deadline --wait), and builds the topology from the generated
#     graph plus those lines: every task builds the same file from the same
#     inputs, each into its own copy, so no task waits on another's write;
#   - execs `rumor node` (signals from srun reach it directly), metrics in
#     DIR/JOB.STEP/metrics; with --worker, execs the command after -- (a
#     training script with rumor.Peer.from_env()) with the environment of
#     `rumor launch ... -- PROG` (RUMOR_TOPOLOGY, RUMOR_NODE_ID,
#     RUMOR_NODES, RUMOR_LOCAL_ID from SLURM_LOCALID, RUMOR_KEY,
#     RUMOR_METRICS_DIR; docs/python.md):
#       srun --ntasks=8 scripts/rumor-slurm.sh --dir /shared/run1 --worker \
#           -- python3 train.py --epochs 3
# Host list fallbacks when scontrol is not on PATH or fails (slurm-client
# installed on a machine with no slurm.conf): RUMOR_HOSTFILE (one host
# per line, # comments), else SLURM_JOB_NODELIST (or SLURM_NODELIST) in
# plain comma form ("a,b,c"; bracket ranges need scontrol).
# DIR must be on a file system every host sees.
set -eu

usage() {
    cat <<'EOF'
usage: rumor-slurm.sh --dir SHARED_DIR [--topology KIND[:ARGS]|FILE]
                      [--port-base P] [--rumor PATH] [--seed S] [--wait SEC]
                      [--] [rumor node options...]
       rumor-slurm.sh --dir SHARED_DIR [...] --worker -- PROG [ARGS...]
  --topology  ring (default), complete, star, hypercube, exponential,
              one-peer-exp, torus:RxC, random-regular:D, watts-strogatz:K,P
              (N = the number of tasks comes first), or a topology FILE
              whose node lines are replaced
  --port-base node ID listens on PORT_BASE+ID (default 7000)
  --rumor     the rumor binary (default: rumor on PATH)
  --wait      seconds to wait for the other tasks (default 300)
  --worker    run PROG (a script with rumor.Peer.from_env()) instead of
              rumor node, its identity in RUMOR_* variables
EOF
}

die() {
    echo "rumor-slurm[${SLURM_PROCID:-?}]: $*" >&2
    exit 2
}

dir="" topology="ring" port_base=7000 rumor=rumor seed=1 wait_s=300 worker=0
while [ $# -gt 0 ]; do
    case $1 in
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --topology) topology=${2:?--topology needs a value}; shift 2 ;;
    --port-base) port_base=${2:?--port-base needs a value}; shift 2 ;;
    --rumor) rumor=${2:?--rumor needs a value}; shift 2 ;;
    --seed) seed=${2:?--seed needs a value}; shift 2 ;;
    --wait) wait_s=${2:?--wait needs a value}; shift 2 ;;
    --worker) worker=1; shift ;;
    --help | -h) usage; exit 0 ;;
    --) shift; break ;;
    *) break ;;
    esac
done
[ -n "$dir" ] || { usage >&2; exit 2; }
[ "$worker" = 0 ] || [ $# -gt 0 ] ||
    die "--worker needs the worker's command after --, e.g. -- python3 train.py"

is_count() { case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

id=${SLURM_PROCID:-}
ntasks=${SLURM_NTASKS:-${SLURM_NPROCS:-}}
nodelist=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}
is_count "$id" || die "SLURM_PROCID is not set: run this under srun"
is_count "$ntasks" || die "SLURM_NTASKS is not set"
[ "$id" -lt "$ntasks" ] || die "SLURM_PROCID $id >= SLURM_NTASKS $ntasks"
for v in "$port_base" "$seed" "$wait_s"; do
    is_count "$v" || die "'$v' is not a whole number"
done
[ $((port_base + ntasks - 1)) -le 65535 ] || die "ports past 65535"
[ -n "${SLURM_TASKS_PER_NODE:-}" ] ||
    echo "rumor-slurm[$id]: SLURM_TASKS_PER_NODE not set: one task per host" >&2

# The allocated hosts, one per line, in Slurm's order.
hosts() {
    if command -v scontrol >/dev/null 2>&1 && [ -n "$nodelist" ] &&
        scontrol show hostnames "$nodelist" 2>/dev/null; then
        return 0
    elif [ -n "${RUMOR_HOSTFILE:-}" ]; then
        sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$RUMOR_HOSTFILE"
    else
        case $nodelist in
        *'['*) die "SLURM_JOB_NODELIST '$nodelist' needs scontrol (or set RUMOR_HOSTFILE)" ;;
        '') die "no SLURM_JOB_NODELIST and no RUMOR_HOSTFILE" ;;
        esac
        echo "$nodelist" | tr ',' '\n'
    fi
}

# Tasks per host, one count per line: "2(x3),1" -> 2 2 2 1.
tasks_per_host() {
    echo "${SLURM_TASKS_PER_NODE:-1(x$1)}" | tr ',' '\n' |
        sed -n 's/^\([0-9][0-9]*\)(x\([0-9][0-9]*\))$/\1 \2/p; s/^\([0-9][0-9]*\)$/\1 1/p' |
        while read -r count times; do
            while [ "$times" -gt 0 ]; do
                echo "$count"
                times=$((times - 1))
            done
        done
}

# The host of task $id under block distribution.
my_host() {
    list=$(hosts) || exit 2
    nhosts=$(echo "$list" | grep -c .)
    first=0 k=1
    for count in $(tasks_per_host "$nhosts"); do
        if [ "$id" -lt $((first + count)) ]; then
            echo "$list" | sed -n "${k}p"
            return 0
        fi
        first=$((first + count)) k=$((k + 1))
    done
    die "task $id is past SLURM_TASKS_PER_NODE for $nhosts host(s)"
}

host=$(my_host)
[ -n "$host" ] || die "no host for task $id"
if [ -n "${SLURMD_NODENAME:-}" ] && [ "${SLURMD_NODENAME%%.*}" != "${host%%.*}" ]; then
    die "block placement puts task $id on $host but it runs on $SLURMD_NODENAME (use srun --distribution=block)"
fi
endpoint="tcp://$host:$((port_base + id))"

run="$dir/${SLURM_JOB_ID:-local}.${SLURM_STEP_ID:-0}"
keys="$dir/keys"
mkdir -p "$keys" "$run/nodes" "$run/metrics"
chmod 700 "$keys" 2>/dev/null || true

key="$keys/node-$id"
if [ -e "$key.key" ] && [ ! -s "$key.pub" ]; then
    rm -f "$key.key" # a keygen cut short: no public half
fi
if [ -e "$key.key" ] && ! grep -q '^ed25519:' "$key.pub"; then
    # a CURVE key from before signed membership cannot sign: replace it
    mv -f "$key.key" "$key.key.curve-old"
    rm -f "$key.pub"
fi
if [ ! -e "$key.key" ]; then
    "$rumor" keygen --out "$key" >/dev/null
fi
pub=$(cat "$key.pub")
printf 'node %s %s key=%s\n' "$id" "$endpoint" "$pub" >"$run/nodes/.$id.tmp"
mv -f "$run/nodes/.$id.tmp" "$run/nodes/$id"

# Wait (with a deadline) until every task has published its line.
deadline=$(($(date +%s) + wait_s))
while :; do
    have=$(find "$run/nodes" -maxdepth 1 -type f ! -name '.*' | wc -l)
    [ "$have" -ge "$ntasks" ] && break
    [ "$(date +%s)" -lt "$deadline" ] ||
        die "only $have of $ntasks tasks published an endpoint in $run/nodes within ${wait_s}s"
    sleep 0.2
done

# The graph: generated from KIND[:ARGS], or a file without its node lines.
topo="$run/topology-$id"
graph="$run/.graph-$id"
if [ -f "$topology" ]; then
    grep -v '^[[:space:]]*node[[:space:]]' "$topology" >"$graph"
else
    kind=${topology%%:*}
    args=""
    [ "$kind" != "$topology" ] && args=$(echo "${topology#*:}" | tr 'x,' '  ')
    case $kind in
    torus) ;;
    *) args="$ntasks $args" ;;
    esac
    # shellcheck disable=SC2086
    "$rumor" topo gen "$kind" $args --seed "$seed" --out "$graph" ||
        die "cannot generate '$topology' for $ntasks tasks"
fi
i=0
{
    cat "$graph"
    while [ $i -lt "$ntasks" ]; do
        cat "$run/nodes/$i" || die "no endpoint file for task $i"
        i=$((i + 1))
    done
} >"$topo.tmp"
rm -f "$graph"
mv -f "$topo.tmp" "$topo"
"$rumor" topo check "$topo" >/dev/null || die "the topology $topo does not check"

echo "rumor-slurm[$id]: node $id of $ntasks on $host ($endpoint), topology $topo" >&2
if [ "$worker" = 1 ]; then
    # a requeued job restarts every task: none has a neighbour to join
    RUMOR_TOPOLOGY=$topo RUMOR_NODE_ID=$id RUMOR_NODES=$ntasks
    RUMOR_LOCAL_ID=${SLURM_LOCALID:-0} RUMOR_KEY=$key
    RUMOR_METRICS_DIR=$run/metrics RUMOR_OPTIONS= RUMOR_RESTART=0 RUMOR_JOIN=0
    export RUMOR_TOPOLOGY RUMOR_NODE_ID RUMOR_NODES RUMOR_LOCAL_ID RUMOR_KEY \
        RUMOR_METRICS_DIR RUMOR_OPTIONS RUMOR_RESTART RUMOR_JOIN
    exec "$@"
fi
exec "$rumor" node --topology "$topo" --id "$id" --key "$key" \
    --metrics-dir "$run/metrics" "$@"
