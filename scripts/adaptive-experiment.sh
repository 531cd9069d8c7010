#!/bin/sh
# The seed paper's experiment at the scale of this machine (docs/adaptive.md):
# 8 nodes on a ring, baselines and the adaptive controllers, links of 10
# Mbit/s, 100 Mbit/s and 1 Gbit/s, 3 seeds.
#   Part 1, simulator (`rumor sim train` with modelled links: every node
#   sees the link timings of the given rate, compute per step is fixed):
#   the MLP on the embedded digits and a larger synthetic task; total bits,
#   final accuracy (of the nodes' average model), modelled time to a
#   target accuracy.
#   Part 2, real processes (`rumor launch`, 8 nodes on loopback, Rumor's
#   link shaping at 100 Mbit/s): wall-clock time to a target accuracy.
#   Part 3, a modelled link whose rate drops 10x mid-run: the budget trace.
#   Part 4 ("rank"), PowerSGD with fixed ranks and with the rank rule
#   (`--adapt rule`) against all-reduce in the simulator, on digits and
#   Fashion-MNIST: bits, final accuracy, steps to a target accuracy.
# usage: nice -n 10 scripts/adaptive-experiment.sh [RUMOR_BIN] [OUT_DIR]
# defaults: build/bin/rumor and docs/. Writes OUT_DIR/adaptive-*.png and
# prints the tables of docs/adaptive.md (also left in $WORK, with the raw
# CSV files; default WORK: a temporary directory, removed at the end).
# STEPS_DIGITS, STEPS_SYNTH, STEPS_REAL and SEEDS override the scale.
set -eu
BIN=${1:-build/bin/rumor}
OUT=${2:-docs}
STEPS_DIGITS=${STEPS_DIGITS:-300}
STEPS_SYNTH=${STEPS_SYNTH:-150}
STEPS_REAL=${STEPS_REAL:-60}
SEEDS=${SEEDS:-"1 2 3"}
PY=/usr/bin/python3
command -v gnuplot >/dev/null || { echo "needs gnuplot (gnuplot-nox)" >&2; exit 1; }
if [ -z "${WORK:-}" ]; then
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"

# label|options (CHOCO consensus step sizes as tuned in docs/adaptive.md)
METHODS='uncompressed|--algo dpsgd
top-1%|--algo choco --codec topk:ratio=0.01 --gamma 0.05
top-5%|--algo choco --codec topk:ratio=0.05 --gamma 0.05
fixed 8-bit (fp8)|--algo choco --codec fp8 --gamma 0.5
fixed 4-bit (fp4)|--algo choco --codec fp4 --gamma 0.5
QSGD 4-bit|--algo choco --codec qsgd:bits=4 --gamma 0.5
DGC 99%|--algo choco --codec dgc:ratio=0.01 --gamma 0.05
PowerGossip rank 1|--algo powergossip --rank 1
rule-based|--algo choco --codec qsgd:bits=4 --gamma 0.5 --adapt rule --comm-share 0.2
learned|--algo choco --codec qsgd:bits=4 --gamma 0.5 --adapt learned --comm-share 0.2'
RATES='10M 100M 1G'
DIGITS='--workload mlp --dataset digits --lr 0.1 --compute-ms 5'
SYNTH='--workload mlp --dataset synthetic:n=4000,dim=128,classes=10,separation=0.2 --hidden 128 --lr 0.1 --compute-ms 20'

sim_task() { # task-name steps options
    task=$1 steps=$2 opts=$3
    k=0
    rm -f "$WORK/$task.labels"
    echo "$METHODS" | while IFS='|' read -r label mopts; do
        k=$((k + 1))
        for rate in $RATES; do
            for seed in $SEEDS; do
                f="$WORK/$task-$k-$rate-$seed.csv"
                # shellcheck disable=SC2086 # option lists
                "$BIN" sim train --topology ring:8 --steps "$steps" --every 10 \
                    --seed "$seed" --link-rate "$rate" --link-latency-ms 1 \
                    $opts $mopts >"$f"
            done
        done
        echo "$k|$label" >>"$WORK/$task.labels"
    done
}

# PARTS selects what runs (a run interrupted can be resumed part by part)
PARTS=${PARTS:-"digits synth real drop rank"}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

echo "part 1: simulator" >&2
if has digits; then sim_task digits "$STEPS_DIGITS" "$DIGITS"; fi
if has synth; then sim_task synth "$STEPS_SYNTH" "$SYNTH"; fi

echo "part 2: real processes" >&2
REAL_METHODS='uncompressed|--algo dpsgd
QSGD 4-bit|--algo choco --codec qsgd:bits=4 --gamma 0.5
top-1%|--algo choco --codec topk:ratio=0.01 --gamma 0.05
rule-based|--algo choco --codec qsgd:bits=4 --gamma 0.5 --adapt rule --comm-share 0.5
learned|--algo choco --codec qsgd:bits=4 --gamma 0.5 --adapt learned --comm-share 0.5'
"$BIN" topo gen ring 8 --local --out "$WORK/ring8.topo" >/dev/null
k=0
has real && rm -f "$WORK/real.labels"
has real && echo "$REAL_METHODS" | while IFS='|' read -r label mopts; do
    k=$((k + 1))
    # shellcheck disable=SC2086 # option list
    "$BIN" launch --topology "$WORK/ring8.topo" --metrics-dir "$WORK/real-$k" \
        --workload mlp --dataset synthetic:n=4000,dim=256,classes=10,separation=0.2 \
        --hidden 1024 --batch 256 --lr 0.1 --steps "$STEPS_REAL" --eval-every 10 \
        --rate 100M --deadline-ms 120000 --progress off --log-level warn $mopts \
        >"$WORK/real-$k.out" 2>&1 || echo "real run '$label' failed" >&2
    echo "$k|$label" >>"$WORK/real.labels"
done

echo "part 3: a 10x rate drop" >&2
# shellcheck disable=SC2086 # option list
has drop && "$BIN" sim train --topology ring:8 --steps 200 --every 10 --link-rate 100M \
    --rate-drop 100:10 --link-latency-ms 1 $SYNTH --algo choco \
    --codec qsgd:bits=4 --gamma 0.5 --adapt rule --comm-share 0.2 \
    --adapt-trace "$WORK/drop-trace.csv" >"$WORK/drop.csv"

echo "part 4: PowerSGD's rank" >&2
# label|options; all-reduce is the uncompressed reference
RANK_METHODS='all-reduce (uncompressed)|--algo allreduce
rank 1|--algo powersgd --rank 1
rank 2|--algo powersgd --rank 2
rank 4|--algo powersgd --rank 4
rank 8|--algo powersgd --rank 8
rule, adapt-error 0.5|--algo powersgd --rank 1 --adapt rule --adapt-error 0.5 --adapt-rank-max 8
rule, adapt-error 0.9|--algo powersgd --rank 1 --adapt rule --adapt-error 0.9 --adapt-rank-max 8'
# dataset|target accuracy (%): digits, where every rank ends alike, and
# Fashion-MNIST, where the rank shows in the final accuracy
RANK_DATASETS='digits|90
fashion-mnist|75'
rank_table() { # dataset target
    printf '\n%s, %s steps:\n\n' "$1" "$STEPS_DIGITS"
    printf '| method | total bits (8 nodes) | final accuracy | steps to %s %% |\n' "$2"
    printf '|---|---|---|---|\n'
    echo "$RANK_METHODS" | while IFS='|' read -r label mopts; do
        for seed in $SEEDS; do
            # last bits and accuracy, first step at the target (0: never)
            # shellcheck disable=SC2086 # option list
            "$BIN" sim train --topology ring:8 --workload mlp --dataset "$1" \
                --steps "$STEPS_DIGITS" --every 10 --lr 0.1 --optim momentum \
                --seed "$seed" $mopts | awk -F, -v t="$2" '
                NR > 1 { b = $2; a = $4; if (!hit && 100 * a >= t) hit = $1 }
                END { print b "," a "," hit + 0 }'
        done | awk -F, -v label="$label" '
            { b[NR] = $1 / 1e6; a[NR] = 100 * $2; n = NR }  # bits per node
            $3 > 0 { s[++k] = $3 }
            END {
                for (i = 1; i <= n; i++) { mb += b[i] / n; ma += a[i] / n }
                for (i = 1; i <= k; i++) ms += s[i] / k
                for (i = 1; i <= n; i++) {
                    sb += (b[i] - mb) ^ 2; sa += (a[i] - ma) ^ 2
                }
                for (i = 1; i <= k; i++) ss += (s[i] - ms) ^ 2
                d = n > 1 ? n - 1 : 1
                steps = "not reached"
                if (k > 0) steps = sprintf("%.0f ± %.0f", ms, sqrt(ss / (k > 1 ? k - 1 : 1)))
                if (k > 0 && k < n) steps = steps sprintf(" (%d of %d seeds)", k, n)
                printf "| %s | %.1f ± %.1f Mbit | %.1f ± %.1f %% | %s |\n",
                    label, 8 * mb, 8 * sqrt(sb / d), ma, sqrt(sa / d), steps
            }'
    done
}
has rank && echo "$RANK_DATASETS" | while IFS='|' read -r dataset target; do
    rank_table "$dataset" "$target"
done >"$WORK/rank.md"
if has rank; then cat "$WORK/rank.md"; fi

# the tables and plots of parts 1-3 need all their files (from this run
# or, with the same WORK, an earlier one)
if [ -f "$WORK/digits.labels" ] && [ -f "$WORK/synth.labels" ] &&
    [ -f "$WORK/real.labels" ] && [ -f "$WORK/drop-trace.csv" ]; then
    "$PY" bench/adaptive/summarize.py "$WORK" "$WORK"
    sh bench/adaptive/plots.sh "$WORK" "$OUT"
    cat "$WORK/adaptive-results.md"
    echo "wrote $OUT/adaptive-*.png (the tables above go into docs/adaptive.md)" >&2
else
    echo "parts 1-3 incomplete in $WORK: no tables or plots" >&2
fi
