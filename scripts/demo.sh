#!/bin/sh
# make demo: what Rumor can show today. The training demo (a local cluster
# training an MLP with PowerGossip, issue #7) replaces this once the node
# runtime exists; until then the demo exercises the topology tooling that a
# user writes experiments with.
set -eu
rumor=${RUMOR_BIN:-build/bin/rumor}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

echo "== $($rumor version | head -n 1)"
$rumor version | tail -n +2
echo
echo "== consensus speed of common topologies (8 and 16 nodes)"
printf '%-28s %6s %6s %8s  %s\n' topology nodes edges degree "spectral gap"
for spec in "ring 8" "torus 4 4" "hypercube 16" "exponential 16" \
    "random-regular 16 4" "watts-strogatz 16 4 0.2" "complete 8" \
    "one-peer-exp 16"; do
    # shellcheck disable=SC2086
    $rumor topo gen $spec --seed 1 --out "$dir/t.topo"
    $rumor topo check "$dir/t.topo" >"$dir/check.txt"
    nodes=$(sed -n 's/^nodes: //p' "$dir/check.txt")
    edges=$(sed -n 's/^edges: //p' "$dir/check.txt")
    degree=$(sed -n 's/^degree: \([0-9.]*\).*/\1/p' "$dir/check.txt")
    gap=$(sed -n 's/^spectral gap: //p' "$dir/check.txt")
    printf '%-28s %6s %6s %8s  %s\n' "$spec" "$nodes" "$edges" "$degree" "$gap"
done
echo
echo "== a hand-written file with a mistake, as 'rumor topo check' reports it"
printf 'nodes 4\nedge 0 1\nedge 1 2\nedge 2 3\nedge 3 4\n' >"$dir/typo.topo"
cat -n "$dir/typo.topo"
$rumor topo check "$dir/typo.topo" 2>&1 || true
echo
echo "== consensus on an 8-ring, a random 100x100 matrix per node (simulator)"
echo "   bits each node sends until the error is below 1e-6 of the start"
printf '%-44s %8s %14s\n' algorithm steps bits/node
for algo in "dpsgd" "dpsgd --gamma 1.308" "powergossip --rank 1" \
    "powergossip --rank 1 --gamma 1.308" "choco --codec qsgd:bits=4 --gamma 0.5" \
    "choco --codec topk:ratio=0.05 --gamma 0.1" "allreduce"; do
    # shellcheck disable=SC2086
    $rumor sim consensus --topology ring:8 --size 100x100 --steps 5000 \
        --algo $algo >"$dir/run.csv"
    awk -F, -v name="$algo" 'NR > 1 && $3 < 1e-6 {
            printf "%-44s %8d %14d\n", name, $1, $2; found = 1; exit }
        END { if (!found) printf "%-44s %8s %14s\n", name, "-", "not reached" }' \
        "$dir/run.csv"
done
echo
echo "The training demo (4-node local cluster, PowerGossip vs all-reduce)"
echo "is not available yet: it needs the node runtime (issue #7)."
