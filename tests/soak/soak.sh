#!/usr/bin/env bash
# Soak test (docs/reliability.md): runs 8 `rumor node` processes on a ring
# over loopback (CURVE, D-PSGD, the default MLP on the digits) for
# DURATION seconds and reports each node's resident memory (VmRSS) and
# open file descriptors at the start (after WARMUP seconds) and at the
# end, plus the steps it made, the peers it skipped and what it rejected.
# A leak shows as RSS or descriptors growing with time. Not part of
# `make test`.
#
# usage: tests/soak/soak.sh DURATION [WARMUP]
#   RUMOR_BIN   the rumor binary (default build/bin/rumor)
#   SOAK_ARGS   extra `rumor node` options (default: none)
#   SOAK_CHAOS  N > 0: every N seconds kill -9 one node (in turn, never
#               node 0) and restart it with --join, so the fault paths
#               (skip, down, probe, handshake, state transfer) run all
#               along; its row then shows the newest process
# Run it niced: nice -n 10 tests/soak/soak.sh 3600
set -euo pipefail

duration=${1:?usage: soak.sh DURATION [WARMUP]}
warmup=${2:-20}
bin=${RUMOR_BIN:-build/bin/rumor}
nodes=8
dir=$(mktemp -d /tmp/rumor-soak-XXXXXX)
pids=()

cleanup() {
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        # bounded: a node stops within one deadline, else it is killed
        for _ in $(seq 100); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT

"$bin" topo gen ring "$nodes" --local --out "$dir/ring.topo" >/dev/null

start_node() { # i [--join]
    # shellcheck disable=SC2086
    "$bin" node --topology "$dir/ring.topo" --id "$1" \
        --key "$dir/keys/node-$1" --steps 1000000000000 --eval-every 1000 \
        --metrics-dir "$dir/run" --log-level warn --progress off \
        ${SOAK_ARGS:-} ${2:-} >>"$dir/node-$1.out" 2>&1 &
    pids[$1]=$!
}

for i in $(seq 0 $((nodes - 1))); do start_node "$i"; done

# RSS in kB, open descriptors, steps done (last metrics line), of node i
sample() {
    local i=$1 p=${pids[$1]} rss fds step
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo dead)
    fds=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
    step=$(tail -n 1 "$dir/run/node-$i.jsonl" 2>/dev/null |
        grep -o '"step":[0-9]*' | cut -d: -f2)
    echo "$rss $fds ${step:-0}"
}

field() { # the last value of a metrics field of node i
    tail -n 1 "$dir/run/node-$1.jsonl" 2>/dev/null |
        grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2
}

sleep "$warmup"
declare -a start
for i in $(seq 0 $((nodes - 1))); do start[$i]=$(sample "$i"); done
t0=$(date +%s)
chaos=${SOAK_CHAOS:-0}
victim=1
kills=0
while [ $(($(date +%s) - t0)) -lt "$duration" ]; do
    if [ "$chaos" -gt 0 ]; then
        sleep "$chaos"
        kill -KILL "${pids[$victim]}" 2>/dev/null || true
        wait "${pids[$victim]}" 2>/dev/null || true
        start_node "$victim" --join
        kills=$((kills + 1))
        victim=$((victim % (nodes - 1) + 1))
    else
        sleep "$duration"
    fi
done
elapsed=$(($(date +%s) - t0))

echo "soak: $nodes nodes, ring, $(basename "$bin") $("$bin" version 2>/dev/null | head -n 1)"
echo "soak: ${elapsed} s measured after a ${warmup} s warm-up; ${SOAK_ARGS:-default options}; $kills kill -9 and rejoin"
printf '%-5s %10s %10s %6s %6s %12s %12s %8s %8s %9s\n' node rss0_kB rss1_kB \
    fd0 fd1 step0 step1 skipped downs rejected
fail=0
for i in $(seq 0 $((nodes - 1))); do
    read -r r0 f0 s0 <<<"${start[$i]}"
    read -r r1 f1 s1 <<<"$(sample "$i")"
    [ "$r1" = dead ] && fail=1
    printf '%-5s %10s %10s %6s %6s %12s %12s %8s %8s %9s\n' "$i" "$r0" "$r1" \
        "$f0" "$f1" "$s0" "$s1" "$(field "$i" skipped)" \
        "$(field "$i" peers_down)" "$(field "$i" rejected_nonfinite)"
done
exit $fail
