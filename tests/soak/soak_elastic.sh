#!/usr/bin/env bash
# Elastic soak (docs/reliability.md, "Soak"): `rumor launch` runs 8 nodes
# on a ring over loopback (CURVE, the default MLP on the digits, a ring
# algorithm: all-reduce unless SOAK_ALGO says otherwise) for DURATION
# seconds; every KILL_EVERY seconds one node picked at random gets kill -9
# and the launcher restarts it (--join), so the view change, the
# re-formed ring and the re-admission run all along. Every SAMPLE_EVERY
# seconds it records, for every node process running, its resident memory
# (VmRSS), open descriptors, step, epoch and members. A leak shows as RSS
# or descriptors growing in a process that lives through many kills. Not
# part of `make test`.
#
# usage: tests/soak/soak_elastic.sh [DURATION]      (default 1800)
#   RUMOR_BIN          the rumor binary (default build/bin/rumor)
#   SOAK_ALGO          --algo and its options (default "allreduce")
#   SOAK_ARGS          more `rumor node` options (default: none)
#   SOAK_KILL_EVERY    seconds between kills (default 60)
#   SOAK_SAMPLE_EVERY  seconds between samples (default 10)
#   SOAK_WARMUP        seconds before the first kill (default 20)
#   SOAK_OUT           where samples.csv, kills.csv, summary.txt and
#                      launch.out go (default /tmp/rumor-soak-elastic-STAMP,
#                      kept)
# Exit status 1 when the launcher ended before DURATION (the run did not
# survive its kills) or a node was not running at the end.
# Run it niced: nice -n 10 tests/soak/soak_elastic.sh 1800
set -euo pipefail

duration=${1:-1800}
bin=${RUMOR_BIN:-build/bin/rumor}
algo=${SOAK_ALGO:-allreduce}
kill_every=${SOAK_KILL_EVERY:-60}
sample_every=${SOAK_SAMPLE_EVERY:-10}
warmup=${SOAK_WARMUP:-20}
out=${SOAK_OUT:-/tmp/rumor-soak-elastic-$(date -u +%Y%m%dT%H%M%S)}
nodes=8
dir=$(mktemp -d /tmp/rumor-soak-run-XXXXXX)
launcher=

cleanup() {
    if [ -n "$launcher" ] && kill -0 "$launcher" 2>/dev/null; then
        kill -TERM "$launcher" 2>/dev/null || true
        # bounded: the launcher kills its nodes after its own grace
        for _ in $(seq 300); do
            kill -0 "$launcher" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$launcher" 2>/dev/null || true
    fi
    if [ -n "$launcher" ]; then
        wait "$launcher" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

mkdir -p "$out"
"$bin" topo gen ring "$nodes" --local --out "$dir/ring.topo" >/dev/null
# shellcheck disable=SC2086
"$bin" launch --topology "$dir/ring.topo" --metrics-dir "$dir/run" \
    --restart 1000 --steps 1000000000000 --eval-every 1000 \
    --log-level warn --progress off --algo $algo ${SOAK_ARGS:-} \
    >"$out/launch.out" 2>&1 &
launcher=$!

node_pid() { # the launcher's child running node i, or nothing
    pgrep -P "$launcher" -f -- "--id $1( |$)" | head -n 1 || true
}

field() { # the last value of a metrics field of node i
    tail -n 1 "$dir/run/node-$1.jsonl" 2>/dev/null |
        grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2 || true
}

echo "t,node,pid,rss_kb,fds,step,epoch,members" >"$out/samples.csv"
echo "t,node,pid" >"$out/kills.csv"
sample() { # t: one row per running node
    local t=$1 i p rss fds
    for i in $(seq 0 $((nodes - 1))); do
        p=$(node_pid "$i")
        [ -n "$p" ] || continue
        rss=$(awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
        fds=$(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
        [ -n "$rss" ] || continue
        echo "$t,$i,$p,$rss,$fds,$(field "$i" step),$(field "$i" epoch),$(field "$i" members)" \
            >>"$out/samples.csv"
    done
}

t0=$(date +%s)
next_kill=$((t0 + warmup))
next_sample=$t0
kills=0
survived=1
while :; do
    now=$(date +%s)
    [ $((now - t0)) -ge "$duration" ] && break
    if ! kill -0 "$launcher" 2>/dev/null; then
        survived=0
        break
    fi
    if [ "$now" -ge "$next_sample" ]; then
        sample $((now - t0))
        next_sample=$((next_sample + sample_every))
    fi
    if [ "$now" -ge "$next_kill" ]; then
        victim=$(shuf -i 0-$((nodes - 1)) -n 1)
        p=$(node_pid "$victim")
        if [ -n "$p" ]; then
            kill -KILL "$p" 2>/dev/null || true
            echo "$((now - t0)),$victim,$p" >>"$out/kills.csv"
            kills=$((kills + 1))
        fi
        next_kill=$((next_kill + kill_every))
    fi
    sleep 1
done
elapsed=$(($(date +%s) - t0))
sample "$elapsed"
running=$(awk -F, -v t="$elapsed" 'NR > 1 && $1 == t' "$out/samples.csv" | wc -l)

{
    echo "soak_elastic: $nodes nodes, ring, --algo $algo ${SOAK_ARGS:-}; $("$bin" version 2>/dev/null | head -n 1)"
    echo "soak_elastic: ${elapsed} s of ${duration}; a kill -9 every ${kill_every} s after ${warmup} s: $kills kills; samples every ${sample_every} s"
    echo "soak_elastic: launcher $([ "$survived" = 1 ] && echo running at the end || echo ENDED EARLY); $running of $nodes nodes running at the end; restarts: $(grep -c 'restarted with' "$out/launch.out" || true)"
    echo "per process (first and last sample; the ones that lived longest tell a leak):"
    awk -F, 'NR > 1 {
        k = $2 "," $3
        if (!(k in first)) { first[k] = $1; r0[k] = $4; f0[k] = $5; s0[k] = $6 }
        last[k] = $1; r1[k] = $4; f1[k] = $5; s1[k] = $6; e1[k] = $7; m1[k] = $8; n[k]++
    }
    END {
        printf "%-5s %8s %7s %7s %10s %10s %8s %5s %5s %10s %10s %6s %8s\n",
            "node", "pid", "from_s", "to_s", "rss0_kB", "rss1_kB", "d_kB",
            "fd0", "fd1", "step0", "step1", "epoch", "members"
        for (k in n) {
            split(k, a, ",")
            printf "%-5s %8s %7s %7s %10s %10s %8d %5s %5s %10s %10s %6s %8s\n",
                a[1], a[2], first[k], last[k], r0[k], r1[k], r1[k] - r0[k],
                f0[k], f1[k], s0[k], s1[k], e1[k], m1[k]
        }
    }' "$out/samples.csv" | { read -r head; echo "$head"; sort -k3,3n -k1,1n; }
} | tee "$out/summary.txt"
echo "soak_elastic: samples, kills and the launcher's output in $out"
[ "$survived" = 1 ] && [ "$running" = "$nodes" ]
