#!/bin/sh
# make demo: a 4-node local cluster on loopback, CURVE on every link,
# training an MLP on the embedded digits (data/digits.csv) with PowerGossip
# rank 1, then the same number of steps with uncompressed ring all-reduce,
# then a comparison of the final held-out accuracy and the bytes each node
# sent, and PNG plots (rumor plot, gnuplot). `make demo` installs the
# Debian packages (scripts/deps.sh) and builds before this runs.
# Outputs stay in DEMO_DIR (default: build/demo next to the binary).
set -eu
rumor=${RUMOR_BIN:-build/bin/rumor}
dir=${DEMO_DIR:-$(dirname "$(dirname "$rumor")")/demo}
steps=${DEMO_STEPS:-1500}
rm -rf "$dir"
mkdir -p "$dir"

echo "== $($rumor version | head -n 1)"
echo
echo "== a 4-node ring on 127.0.0.1, one signing key per node"
$rumor topo gen ring 4 --local --out "$dir/ring.topo"
grep '^node' "$dir/ring.topo" | sed 's/key=\(.\{16\}\).*/key=\1.../'
echo

common="--workload mlp --hidden 64 --optimizer momentum --lr 0.05 --batch 32
--steps $steps --eval-every 250 --deadline-ms 10000 --log-level warn"

echo "== PowerGossip rank 1: $steps steps of the MLP 64-64-10 on the digits"
# shellcheck disable=SC2086
$rumor launch --topology "$dir/ring.topo" --metrics-dir "$dir/powergossip" \
    --algo powergossip --rank 1 $common
echo
echo "== the same with uncompressed ring all-reduce (of the gradients)"
# shellcheck disable=SC2086
$rumor launch --topology "$dir/ring.topo" --metrics-dir "$dir/allreduce" \
    --algo allreduce $common
echo
echo "== comparison on the held-out 20% (accuracy: mean over the nodes of"
echo "   each node's own model; average: the average of the 4 final models;"
echo "   bytes: mean per node, frame headers included)"
$rumor plot "$dir/powergossip" "$dir/allreduce" --out "$dir/plots" \
    | tee "$dir/summary.txt"
awk 'NR == 2 { pg = $6 } NR == 3 { ar = $6 }
    END { if (pg > 0) printf "PowerGossip sent %.1fx fewer bytes than all-reduce\n", ar / pg }' \
    "$dir/summary.txt"
echo
echo "metrics: $dir/powergossip/node-*.jsonl, $dir/allreduce/node-*.jsonl"
echo "logs:    $dir/*/node-*.log"
