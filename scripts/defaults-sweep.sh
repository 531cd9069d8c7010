#!/bin/sh
# The defaults table of docs/gossip.md ("Defaults"): every algorithm with
# no gossip option but --algo, on rings, tori and complete graphs of 4 to
# 32 nodes, with `rumor node`'s default workload and optimizer (MLP with
# 32 hidden units, momentum 0.9, lr 0.05, batch 32). Prints a markdown
# table of the held-out accuracy of the nodes' average model after STEPS
# steps ("diverged" for a non-finite loss or the divergence error, "failed"
# for a run that printed nothing).
#
#   sh scripts/defaults-sweep.sh BIN [DATASET [STEPS [GRAPHS]]]
#   sh scripts/defaults-sweep.sh build/bin/rumor digits 300
#   sh scripts/defaults-sweep.sh build/bin/rumor fashion-mnist 1500 "ring:6 torus:4x4"
set -eu
bin=${1:?usage: defaults-sweep.sh BIN [DATASET [STEPS [GRAPHS]]]}
dataset=${2:-digits}
steps=${3:-300}
graphs=${4:-"ring:4 ring:6 ring:32 torus:4x4 torus:4x8 complete:8 complete:32"}
algos="allreduce dpsgd choco deepsqueeze moniqua powergossip powersgd localsgd"
node="--workload mlp --hidden 32 --batch 32 --optim momentum --lr 0.05 \
--momentum 0.9 --dataset $dataset --steps $steps --every $steps"

printf '| algo |'
for g in $graphs; do printf ' %s |' "$g"; done
printf '\n|---|'
for g in $graphs; do printf -- '---|'; done
printf '\n'
for a in $algos; do
    printf '| %s |' "$a"
    for g in $graphs; do
        # shellcheck disable=SC2086 # $node is a list of options
        out=$("$bin" sim train --topology "$g" --algo "$a" $node 2>&1) || true
        acc=$(printf '%s\n' "$out" | awk -F, '
            /training diverged/ { bad = 1 }
            NF == 4 && $1 ~ /^[0-9]+$/ { last = $3 ~ /inf|nan/ ? "nan" : $4 }
            END {
                if (bad || last == "nan") print "diverged"
                else if (last == "") print "failed"
                else printf "%.3f", last
            }')
        printf ' %s |' "$acc"
    done
    printf '\n'
done
