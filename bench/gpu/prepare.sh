#!/bin/sh
# bench/gpu/prepare.sh: run HERE (the development machine, Debian 12), once,
# before bench/gpu/run.sh is sent to a lent GPU machine with the `device`
# tool. The GPU machine reaches no package registry, so the Debian packages
# the build and the binaries need (headers, .so links, the libraries and
# the libraries they load that the GPU image may lack) are downloaded into
# .gpu-debs/ (ignored through .git/info/exclude so it travels only as a
# `carry` path), plus the compiler flags pkg-config gives here, rewritten for
# the folder run.sh unpacks them into. About 15 MiB.
#
# usage: sh bench/gpu/prepare.sh   (from the repository root)
set -eu
dir=.gpu-debs
grep -qx '/.gpu-debs/' .git/info/exclude 2>/dev/null ||
    echo '/.gpu-debs/' >>.git/info/exclude
mkdir -p "$dir"
rm -f "$dir"/*.deb
# Build: headers and .so links. Run: the libraries and what they load.
pkgs="libzmq3-dev libzmq5 libsodium-dev libsodium23 libopenblas-dev
libopenblas-pthread-dev libopenblas0-pthread libopenblas0 liblapacke-dev
liblapacke libtmglib3 libgfortran5 libzstd-dev libzstd1 libinih-dev libinih1
libinireader0 libcjson-dev libcjson1 libcmocka-dev libcmocka0 libnorm1
libpgm-5.3-0 libbsd0 libmd0 zlib1g-dev zlib1g"
# shellcheck disable=SC2086
(cd "$dir" && apt-get download $pkgs >/dev/null)
# Compiler and linker flags as this machine's pkg-config gives them; run.sh
# replaces @D@ by the unpack folder.
libs="libzmq libsodium openblas lapacke libzstd inih libcjson zlib"
# shellcheck disable=SC2086
pkg-config --cflags $libs | sed 's|-I/usr|-I@D@/usr|g' >"$dir/cflags"
# shellcheck disable=SC2086
pkg-config --libs $libs >"$dir/libs"
du -sh "$dir"
echo "now: device run with carry [\".gpu-debs\"] and command 'sh bench/gpu/run.sh'"
