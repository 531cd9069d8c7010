#!/bin/sh
# Draws the consensus experiment (docs/gossip.md) for a ring, a torus and a
# complete graph: consensus error against bits sent per node, one line per
# algorithm, with `rumor sim consensus` (8 or 16 nodes, a 100x100 standard
# normal matrix per node, 2000 steps) and gnuplot (Debian gnuplot-nox).
# Each algorithm that takes a gamma runs at its tuned gamma on each graph:
# `--gamma-grid` (the reference's 20 values from 1e-4 to 1.308, the lowest
# error to the starting mean after TUNE_STEPS steps, by default the plotted
# STEPS: a gamma can look best early and then drift up, as CHOCO with sign
# at 0.79 on the ring does after 500 steps). The tuning is most of the
# run time, which grows with STEPS (see docs/gossip.md).
#   usage: scripts/plot-consensus.sh [RUMOR_BIN] [OUT_DIR]
# defaults: build/bin/rumor and docs/. Writes OUT_DIR/consensus-ring8.png,
# consensus-torus4x4.png and consensus-complete8.png, and prints the table
# of docs/gossip.md (markdown) on stdout; the CSV files stay in a temporary
# directory that is removed at the end. The error drawn is the reference's
# (mean_i ||x_i - x_bar_0||^2 relative to step 0, x_bar_0 the starting
# mean); an error of exactly 0 is drawn at the 1e-16 floor.
set -eu
BIN=${1:-build/bin/rumor}
OUT=${2:-docs}
STEPS=${STEPS:-2000}
TUNE_STEPS=${TUNE_STEPS:-$STEPS}
command -v gnuplot >/dev/null || { echo "needs gnuplot (gnuplot-nox)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# label|options|tune (yes: gamma from --gamma-grid on each graph)
ALGOS='allreduce|--algo allreduce|no
dpsgd|--algo dpsgd|yes
choco qsgd:bits=4|--algo choco --codec qsgd:bits=4|yes
choco qsgd:bits=4,biased=1|--algo choco --codec qsgd:bits=4,biased=1|yes
choco topk:ratio=0.01|--algo choco --codec topk:ratio=0.01|yes
choco sign|--algo choco --codec sign|yes
deepsqueeze qsgd:bits=4|--algo deepsqueeze --codec qsgd:bits=4|yes
powergossip rank 1|--algo powergossip --rank 1|yes
powergossip rank 4|--algo powergossip --rank 4|yes'

echo "| graph | algorithm | tuned gamma | bits/node to 1e-4 | bits/node after $STEPS steps | error after $STEPS steps | to the current mean |"
echo "|---|---|---|---|---|---|---|"
for graph in ring:8 torus:4x4 complete:8; do
    name=$(echo "$graph" | tr -d ':')
    plot=""
    k=0
    echo "$ALGOS" | while IFS='|' read -r label opts tune; do
        k=$((k + 1))
        gamma=""
        if [ "$tune" = yes ]; then
            # shellcheck disable=SC2086 # opts is a list of words
            gamma=$("$BIN" sim consensus --topology "$graph" --size 100x100 \
                --steps "$TUNE_STEPS" $opts --gamma-grid 2>/dev/null |
                awk -F, '$5 == 1 { print $1 }')
            [ -n "$gamma" ] || { echo "$graph $label: no gamma converged" >&2; exit 1; }
            opts="$opts --gamma $gamma"
            label="$label, gamma $(printf '%.3g' "$gamma")"
        fi
        # shellcheck disable=SC2086 # opts is a list of words
        "$BIN" sim consensus --topology "$graph" --size 100x100 \
            --steps $STEPS --every 1 $opts >"$TMP/$name-$k.csv" 2>/dev/null
        echo "$k|$label" >>"$TMP/$name.labels"
        awk -F, -v g="$graph" -v l="$label" -v gm="${gamma:--}" '
            NR > 1 && reach == "" && $3 <= 1e-4 { reach = sprintf("%.3g", $2) }
            { bits = $2; err = $3; cur = $4 }
            END {
                split(l, part, ", gamma ")
                printf "| %s | %s | %s | %s | %.3g | %.3g | %.3g |\n", g, part[1],
                    gm == "-" ? "-" : sprintf("%.3g", gm),
                    reach == "" ? "not reached" : reach, bits, err, cur
            }' "$TMP/$name-$k.csv"
    done
    while IFS='|' read -r k label; do
        plot="$plot${plot:+, }'$TMP/$name-$k.csv' using 2:(\$3 > 1e-16 ? \$3 : 1e-16) every 10::2 with linespoints ls $k title '$label'"
    done <"$TMP/$name.labels"
    gnuplot <<GP
set terminal pngcairo size 1100,700 font 'Sans,11'
set style line 1 lc rgb '#000000' lw 2 pt 7 ps 0.6 pi 40
set style line 2 lc rgb '#888888' lw 2 dt 2 pt 5 ps 0.6 pi 40
set style line 3 lc rgb '#1f77b4' lw 2 pt 9 ps 0.6 pi 40
set style line 4 lc rgb '#ff7f0e' lw 2 pt 11 ps 0.6 pi 40
set style line 5 lc rgb '#2ca02c' lw 2 pt 13 ps 0.6 pi 40
set style line 6 lc rgb '#9467bd' lw 2 dt 3 pt 4 ps 0.6 pi 40
set style line 7 lc rgb '#d62728' lw 3 pt 6 ps 0.6 pi 40
set style line 8 lc rgb '#8c564b' lw 2 dt 4 pt 8 ps 0.6 pi 40
set style line 9 lc rgb '#17becf' lw 2 dt 5 pt 10 ps 0.6 pi 40
set output '$OUT/consensus-$name.png'
set datafile separator ','
set logscale xy
set format x '10^{%L}'
set format y '10^{%L}'
set xlabel 'bits sent per node (headers included)'
set ylabel 'error to the starting mean, relative to step 0'
set title 'Consensus on $graph, 100x100 per node, $STEPS steps, tuned gamma (rumor sim consensus)'
set yrange [1e-16:10]
set key inside left bottom box opaque
set grid
plot $plot
GP
    echo "wrote $OUT/consensus-$name.png" >&2
done
