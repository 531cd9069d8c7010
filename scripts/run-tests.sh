#!/bin/sh
# Runs test binaries, then fuzz-corpus replays, and ends with one summary
# line "tests: N passed, M failed" counting test cases (cmocka's own counts,
# one per replayed corpus file). Exit status is non-zero when any failed.
# usage: run-tests.sh BUILD TEST_BIN... -- REPLAY_BIN...
set -u
build=$1
shift
log=$(mktemp)
table=$(mktemp)
trap 'rm -f "$log" "$table"' EXIT
passed=0
failed=0
bad_bins=""

count() { # $1 = pattern before the count in cmocka's summary
    sed -n "s/^\[  $1  \] \([0-9][0-9]*\) test.*/\1/p" "$log" | head -n1
}

while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    bin=$1
    shift
    CMOCKA_MESSAGE_OUTPUT=stdout "$bin" >"$log" 2>&1
    rc=$?
    cat "$log"
    p=$(count PASSED)
    f=$(count FAILED)
    [ $rc -ne 0 ] && [ -z "$f" ] && f=1 # crashed before its summary
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    [ $rc -ne 0 ] && bad_bins="$bad_bins $bin"
    name=$(basename "$bin")
    printf '  %-28s %4d passed, %d failed\n' "${name#test_}" "${p:-0}" "${f:-0}" >>"$table"
done
[ $# -gt 0 ] && shift

for bin in "$@"; do
    name=$(basename "$bin")
    corpus="tests/fuzz/corpus/${name#fuzz_}"
    "$bin" "$corpus" >"$log" 2>&1
    rc=$?
    cat "$log"
    n=$(sed -n 's/^replay: \([0-9][0-9]*\) inputs.*/\1/p' "$log")
    if [ $rc -eq 0 ]; then
        passed=$((passed + ${n:-0}))
        f=0
    else
        failed=$((failed + 1))
        bad_bins="$bad_bins $bin"
        f=1
    fi
    printf '  %-28s %4d passed, %d failed\n' "replay ${name#fuzz_}" "${n:-0}" "$f" >>"$table"
done

echo
echo "summary by module ($build):"
cat "$table"
[ -n "$bad_bins" ] && echo "failing:$bad_bins ($build)"
echo "tests: $passed passed, $failed failed"
[ -z "$bad_bins" ]
