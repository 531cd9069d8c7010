#!/bin/sh
# Writes the compile and link flags of the packages Rumor builds against, as
# make variables, from pkg-config (the Makefile's $(BUILD)/config.mk). Fails,
# naming the package, when one is missing: run scripts/deps.sh (make deps).
# usage: config-mk.sh "LIBRARY_PACKAGES" "TEST_PACKAGES"
set -eu
libs=$1
tests=$2
command -v pkg-config >/dev/null 2>&1 || {
    echo "config-mk: pkg-config is not installed (run: make deps)" >&2
    exit 1
}
for pkg in $libs $tests; do
    pkg-config --exists --print-errors "$pkg" >&2 || {
        echo "config-mk: pkg-config does not know '$pkg' (run: make deps)" >&2
        exit 1
    }
done
# shellcheck disable=SC2086
echo "PKG_CFLAGS := $(pkg-config --cflags $libs)"
# shellcheck disable=SC2086
echo "PKG_LIBS := $(pkg-config --libs $libs)"
# shellcheck disable=SC2086
echo "CMOCKA_LIBS := $(pkg-config --libs $tests)"
