#!/bin/sh
# Plots of the adaptive-compression experiment from the raw files of
# scripts/adaptive-experiment.sh: accuracy against modelled time at 10
# Mbit/s and against bits (seed 1) per task, and the budget trace of the
# rate-drop run. usage: bench/adaptive/plots.sh WORK OUT
set -eu
WORK=$1
OUT=$2
STYLE="set style line 1 lc rgb '#000000' lw 2
set style line 2 lc rgb '#1f77b4' lw 2 dt 2
set style line 3 lc rgb '#1f77b4' lw 2
set style line 4 lc rgb '#ff7f0e' lw 2 dt 2
set style line 5 lc rgb '#ff7f0e' lw 2
set style line 6 lc rgb '#2ca02c' lw 2
set style line 7 lc rgb '#8c564b' lw 2 dt 4
set style line 8 lc rgb '#9467bd' lw 2 dt 3
set style line 9 lc rgb '#d62728' lw 3
set style line 10 lc rgb '#e377c2' lw 3 dt 2"
for task in digits synth; do
    for x in time bits; do
        plot=""
        while IFS='|' read -r k label; do
            col=5 # modelled seconds
            # shellcheck disable=SC2016 # a gnuplot expression, not shell
            [ "$x" = bits ] && col='($2*8)'
            plot="$plot${plot:+, }'$WORK/$task-$k-10M-1.csv' using $col:4 with lines ls $k title '$label'"
        done <"$WORK/$task.labels"
        if [ "$x" = time ]; then
            xl="modelled time (s): 10 Mbit/s links, 1 ms latency"
            ls="unset logscale x"
        else
            xl="total bits sent by the 8 nodes"
            ls="set logscale x"
        fi
        gnuplot <<GP
set terminal pngcairo size 1000,620 font 'Sans,11'
$STYLE
set output '$OUT/adaptive-$task-$x.png'
set datafile separator ','
$ls
set key bottom right
set grid
set xlabel '$xl'
set ylabel 'held-out accuracy of the average model'
set title '$task, 8 nodes on a ring (rumor sim train, seed 1)'
plot $plot
GP
    done
done
awk -F, 'NR > 1 && $2 == 0 && $3 == 1' "$WORK/drop-trace.csv" >"$WORK/drop-0-1.csv"
gnuplot <<GP
set terminal pngcairo size 1000,620 font 'Sans,11'
set output '$OUT/adaptive-rate-drop.png'
set datafile separator ','
set logscale y
set grid
set key top right
set xlabel 'step'
set ylabel 'bytes per message, node 0 to node 1'
set y2label 'link rate (bit/s)'
set logscale y2
set y2tics
set title 'Rule-based controller, link rate 100 -> 10 Mbit/s at step 100 (modelled)'
plot '$WORK/drop-0-1.csv' using 1:6 with lines lw 2 lc rgb '#1f77b4' title 'budget', \
     '' using 1:7 with points pt 7 ps 0.4 lc rgb '#d62728' title 'bytes sent', \
     '' using 1:4 axes x1y2 with lines lw 2 dt 2 lc rgb '#000000' title 'link rate', \
     '' using 1:5 axes x1y2 with lines lw 1 lc rgb '#2ca02c' title 'estimated rate'
GP
