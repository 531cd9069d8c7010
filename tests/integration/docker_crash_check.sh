#!/bin/sh
# The crash checks of `make deploy-test` (tests/integration/docker_e2e.sh),
# on what a finished cluster left in its directory DIR: node-N.log (node
# N's output) and rumor-state/metrics/node-N.jsonl for every node. Node
# VICTIM's rumor was killed at about step KILLED_AT and its container
# restarted; REF is a survivor with as many neighbours as VICTIM, and
# NEIGHBOUR... are VICTIM's neighbours.
#   - VICTIM resumed from a checkpoint within 100 steps of KILLED_AT and
#     finished the SYNC handshake with every neighbour after that ("node J
#     is back" in its log, after "resumed from");
#   - its neighbours gossiped with it again: from its checkpoint's step to
#     STEPS it received at least half the gossip bytes per step that REF
#     received over the whole run;
#   - each neighbour either marked it down and re-admitted it ("node V is
#     down", then "node V is back", and `readmitted` >= 1), or never marked
#     it down (it was back within --down-after deadlines): both are right,
#     and which one happens depends on how fast the container restarts;
#     either way no neighbour has a peer down at its last step;
#   - the survivors never stopped: each one's metrics are one process
#     (`seconds` never falls) with steps rising to STEPS.
# Prints each problem, then one line with which path each neighbour took.
# usage: docker_crash_check.sh DIR STEPS KILLED_AT VICTIM REF NEIGHBOUR...
# Exit status: 0 when every check holds, 1 otherwise, 2 on bad usage.
set -eu
[ $# -ge 6 ] || {
    echo "usage: docker_crash_check.sh DIR STEPS KILLED_AT VICTIM REF NEIGHBOUR..." >&2
    exit 2
}
dir=$1 steps=$2 killed_at=$3 victim=$4 ref=$5
shift 5
failed=0
bad() {
    echo "docker_e2e: $*"
    failed=1
}
metrics() { cat "$dir/rumor-state/metrics/node-$1.jsonl" 2>/dev/null || true; }
field() { # the number of field $2 in the JSON line $1
    echo "$1" | sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p"
}
line_of() { # node $1's metrics line of step $2
    metrics "$1" | grep "^{\"step\":$2," | tail -n 1
}

# The victim's side.
after=$(sed -n '/resumed from/,$p' "$dir/node-$victim.log" 2>/dev/null || true)
resumed=$(echo "$after" | sed -n 's/.*resumed from .* (step \([0-9]*\)).*/\1/p' | head -n 1)
if [ -z "$resumed" ]; then
    bad "node-$victim did not resume from a checkpoint (no 'resumed from' in its log)"
    resumed=0
elif [ "$resumed" -gt $((killed_at + 100)) ] || [ "$resumed" -lt $((killed_at - 100)) ]; then
    bad "node-$victim resumed from step $resumed, not from a checkpoint near step $killed_at"
fi
ref_bytes=$(field "$(line_of "$ref" "$steps")" gossip_bytes_recv)
from=$(field "$(line_of "$victim" "$resumed")" gossip_bytes_recv)
to=$(field "$(line_of "$victim" "$steps")" gossip_bytes_recv)
awk -v a="${from:-x}" -v b="${to:-x}" -v r="${ref_bytes:-x}" -v n=$((steps - resumed)) -v s="$steps" \
    'BEGIN { exit !(a b r ~ /^[0-9.e+]+$/ && b - a >= 0.5 * r / s * n) }' ||
    bad "node-$victim received ${from:-?} -> ${to:-?} gossip bytes from step $resumed to $steps, want at least half of node $ref's rate (${ref_bytes:-?} bytes in $steps steps)"

# Its neighbours'.
paths=""
for j in "$@"; do
    echo "$after" | grep -q "node $j is back (handshake done)" ||
        bad "node-$victim: no handshake with node $j after its restart"
    last=$(metrics "$j" | tail -n 1)
    down=$(field "$last" peers_down)
    [ "${down:-x}" = 0 ] || bad "node-$j: ${down:-no count of} peers down at its last step, want 0"
    # the fault path's mark ("...; skipping it and probing"), not the
    # transport's "net: node N is down (was late)"
    marked="node $victim is down (.*skipping it"
    if grep -q "$marked" "$dir/node-$j.log"; then
        n=$(field "$last" readmitted)
        if ! sed -n "/$marked/,\$p" "$dir/node-$j.log" | grep -q "node $victim is back" ||
            [ "${n:-0}" -lt 1 ]; then
            bad "node-$j marked node-$victim down and never re-admitted it (readmitted ${n:-none})"
        fi
        paths="$paths node-$j marked it down and re-admitted it;"
    else
        paths="$paths node-$j never marked it down (back within the deadlines);"
    fi
done

# The survivors'.
for f in "$dir"/rumor-state/metrics/node-*.jsonl; do
    i=${f##*/node-}
    i=${i%.jsonl}
    [ "$i" != "$victim" ] || continue
    metrics "$i" | sed -n 's/^{"step":\([0-9]*\),.*"seconds":\([0-9.e+-]*\),.*/\1 \2/p' |
        awk -v n="$steps" '$1 <= s || $2 < t { bad = 1 } { s = $1; t = $2 } END { exit bad || s != n }' ||
        bad "node-$i: its metrics show a stop or a restart (not one process with steps rising to $steps)"
done
echo "docker_e2e: node-$victim resumed from step $resumed and received ${from:-?} -> ${to:-?} gossip bytes after;$paths"
exit $failed
