#!/bin/sh
# Writes rumor.pc for pkg-config (make install). The public headers include
# only the C library's, so the libraries Rumor links against are private
# link flags (not Requires.private, which would add their -I flags): a
# program needs them only to link librumor.a (pkg-config --static).
# usage: rumor-pc.sh VERSION PREFIX LIBDIR INCLUDEDIR "PRIVATE_LIBS"
set -eu
version=$1 prefix=$2 libdir=$3 includedir=$4 private_libs=$5
# Paths under the prefix are written relative to it, so that
# pkg-config --define-prefix can move a staged tree.
under_prefix() {
    case "$1" in
    "$prefix"/*) echo "\${prefix}${1#"$prefix"}" ;;
    *) echo "$1" ;;
    esac
}
cat <<PC
prefix=$prefix
libdir=$(under_prefix "$libdir")
includedir=$(under_prefix "$includedir")

Name: rumor
Description: Decentralized training with compressed gossip (CurveZMQ links)
Version: $version
Libs: -L\${libdir} -lrumor
Libs.private: $private_libs
Cflags: -I\${includedir}
PC
