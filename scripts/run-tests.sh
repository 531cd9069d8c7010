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

# pytest: tests/python, the python/rumor binding on this build's
# librumor.so (RUMOR_LIB), with Debian's python3 and its torch, numpy and
# pytest. In a sanitizer build python3 loads the sanitizer runtimes first
# (RUMOR_PRELOAD, from the Makefile); Python's own allocations are not
# leak-checked (test_peer checks the peer's under LeakSanitizer).
preload_ok=yes
if [ -n "${RUMOR_SAN:-}" ]; then
    [ -z "${RUMOR_PRELOAD:-}" ] && preload_ok=no
    for so in ${RUMOR_PRELOAD:-}; do
        [ -f "$so" ] || preload_ok=no
    done
fi
if [ -n "${RUMOR_LIB:-}" ] && [ $preload_ok = no ]; then
    echo "pytest: SKIPPED: no sanitizer runtime to preload for -fsanitize=$RUMOR_SAN (RUMOR_PRELOAD='${RUMOR_PRELOAD:-}')"
elif [ -n "${RUMOR_LIB:-}" ]; then
    LD_PRELOAD="${RUMOR_PRELOAD:-}" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        RUMOR_LIB=$RUMOR_LIB /usr/bin/python3 -m pytest -q \
        -p no:cacheprovider tests/python >"$log" 2>&1
    rc=$?
    cat "$log"
    last=$(tail -n 1 "$log")
    p=$(echo "$last" | grep -o '[0-9][0-9]* passed' | cut -d' ' -f1)
    f=$(echo "$last" | grep -o '[0-9][0-9]* failed' | cut -d' ' -f1)
    e=$(echo "$last" | grep -o '[0-9][0-9]* error' | cut -d' ' -f1)
    f=$((${f:-0} + ${e:-0}))
    [ $rc -ne 0 ] && [ $f -eq 0 ] && f=1 # no tests ran, or pytest missing
    passed=$((passed + ${p:-0}))
    failed=$((failed + f))
    [ $rc -ne 0 ] && bad_bins="$bad_bins pytest"
    printf '  %-28s %4d passed, %d failed\n' "python (pytest)" "${p:-0}" "$f" >>"$table"
fi

echo
echo "summary by module ($build):"
cat "$table"
[ -n "$bad_bins" ] && echo "failing:$bad_bins ($build)"
echo "tests: $passed passed, $failed failed"
[ -z "$bad_bins" ]
