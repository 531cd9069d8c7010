#!/bin/sh
# Draws the consensus experiment (docs/gossip.md) for a ring, a torus and a
# complete graph: consensus error against bits sent per node, one line per
# algorithm, with `rumor sim consensus` (8 or 16 nodes, a 100x100 standard
# normal matrix per node, 2000 steps) and gnuplot (Debian gnuplot-nox).
#   usage: scripts/plot-consensus.sh [RUMOR_BIN] [OUT_DIR]
# defaults: build/bin/rumor and docs/. Writes OUT_DIR/consensus-ring8.png,
# consensus-torus4x4.png and consensus-complete8.png; the CSV files stay in
# a temporary directory that is removed at the end. An error of exactly 0
# (the all-reduce after one step) is drawn at the 1e-16 floor.
set -eu
BIN=${1:-build/bin/rumor}
OUT=${2:-docs}
STEPS=2000
command -v gnuplot >/dev/null || { echo "needs gnuplot (gnuplot-nox)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# label|options (the same consensus step sizes on every graph)
ALGOS='allreduce|--algo allreduce
dpsgd|--algo dpsgd --gamma 1
choco qsgd:bits=4, gamma 0.5|--algo choco --codec qsgd:bits=4 --gamma 0.5
choco topk:ratio=0.01, gamma 0.02|--algo choco --codec topk:ratio=0.01 --gamma 0.02
choco sign, gamma 0.1|--algo choco --codec sign --gamma 0.1
deepsqueeze qsgd:bits=4, gamma 0.05|--algo deepsqueeze --codec qsgd:bits=4 --gamma 0.05
powergossip rank 1|--algo powergossip --rank 1 --gamma 1
powergossip rank 4|--algo powergossip --rank 4 --gamma 1'

for graph in ring:8 torus:4x4 complete:8; do
    name=$(echo "$graph" | tr -d ':')
    plot=""
    k=0
    echo "$ALGOS" | while IFS='|' read -r label opts; do
        k=$((k + 1))
        # shellcheck disable=SC2086 # opts is a list of words
        "$BIN" sim consensus --topology "$graph" --size 100x100 \
            --steps $STEPS --every 10 $opts >"$TMP/$name-$k.csv"
        echo "$k|$label" >>"$TMP/$name.labels"
    done
    while IFS='|' read -r k label; do
        plot="$plot${plot:+, }'$TMP/$name-$k.csv' using 2:(\$3 > 1e-16 ? \$3 : 1e-16) every ::2 with linespoints ls $k title '$label'"
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
set output '$OUT/consensus-$name.png'
set datafile separator ','
set logscale xy
set format x '10^{%L}'
set format y '10^{%L}'
set xlabel 'bits sent per node (headers included)'
set ylabel 'consensus error, relative to step 0'
set title 'Consensus on $graph, 100x100 per node, $STEPS steps (rumor sim consensus)'
set yrange [1e-16:10]
set key inside right top box opaque
set grid
plot $plot
GP
    echo "wrote $OUT/consensus-$name.png"
done
