#!/bin/sh
# make lint: banned functions (R1.4), include direction (a module includes
# only the public headers of modules before it, and not those of $apart;
# a library file includes no private header of a module after it, nor of
# cli/, bench/ or tests/), and every public header compiling on its own
# and staying under 500 lines (R3.3). A module's one public header is
# include/rumor/MODULE.h; a long one keeps its declarations in parts,
# include/rumor/MODULE/*.h, which that header includes and which nothing
# outside include/rumor/MODULE* includes. usage: lint.sh CC CFLAGS [headers]
set -u
cc=$1
cflags=$2
only=${3:-all}
status=0
order="core compress lowrank topology net gossip train node"
# pairs MODULE:HEADER a module must not include although it is below: the
# algorithms meet the network only through the node's exchange driver
apart="gossip:net"

rank_of() {
    i=0
    for m in $order; do
        [ "$m" = "$1" ] && { echo $i; return; }
        i=$((i + 1))
    done
    echo 99 # cli, bench, tests, python: outside the library, may include everything
}

header_lines_max=500

check_headers() {
    for h in include/rumor/*.h include/rumor/*/*.h; do
        [ -e "$h" ] || continue
        if ! $cc $cflags -fsyntax-only -x c "$h" 2>/tmp/rumor-lint.$$; then
            echo "lint: $h does not compile on its own:"
            cat /tmp/rumor-lint.$$
            status=1
        fi
        if [ "$(wc -l <"$h")" -gt $header_lines_max ]; then
            echo "lint: $h is over $header_lines_max lines: split it into parts"
            status=1
        fi
    done
    rm -f /tmp/rumor-lint.$$
}

# two headers under one include guard: the second one included is empty
check_guards() {
    dup=$(git ls-files '*.h' | xargs sed -s -n '1,/^#ifndef/s/^#ifndef \([A-Z0-9_]*_H\)$/\1/p' |
        sort | uniq -d)
    if [ -n "$dup" ]; then
        echo "lint: include guards used by more than one header: $dup"
        status=1
    fi
}

check_banned() {
    banned='strcpy|strcat|sprintf|vsprintf|strtok|gets|atoi|atol|sscanf'
    # \b, not -w: -w rejects "sscanf(line" (a word character follows the
    # match); clang-format leaves no space before a call's parenthesis
    hits=$(git ls-files '*.c' '*.h' '*.cu' | xargs grep -nE "\b($banned)\(" 2>/dev/null)
    if [ -n "$hits" ]; then
        echo "lint: banned functions (use snprintf / strtol with checks):"
        echo "$hits"
        status=1
    fi
}

# include/rumor/gossip.h and include/rumor/gossip/*.h are both gossip's
module_of() {
    case "$1" in
    include/rumor/*/*) m=${1#include/rumor/} && echo "${m%%/*}" ;;
    include/rumor/*) basename "$1" .h ;;
    *) echo "${1%%/*}" ;;
    esac
}

check_include_direction() {
    for f in $(git ls-files '*.c' '*.h' '*.cu'); do
        mod=$(module_of "$f")
        own=$(rank_of "$mod")
        for part in $(sed -n 's/^#include "rumor\/\([a-z_]*\)\/[a-z_0-9]*\.h".*/\1/p' "$f"); do
            case "$f" in
            include/rumor/"$part".h | include/rumor/"$part"/*) ;;
            *)
                echo "lint: $f includes a part of rumor/$part.h: include rumor/$part.h"
                status=1
                ;;
            esac
        done
        for inc in $(sed -n 's/^#include "rumor\/\([a-z_]*\)[./].*/\1/p' "$f"); do
            [ "$inc" = rumor ] && continue
            if [ "$(rank_of "$inc")" -gt "$own" ]; then
                echo "lint: $f includes rumor/$inc.h, a module above $mod"
                status=1
            fi
            case " $apart " in
            *" $mod:$inc "*)
                echo "lint: $f includes rumor/$inc.h, which $mod/ must not use"
                status=1
                ;;
            esac
        done
    done
}

# "DIR/x.h": cli/ is linked into the `rumor` binary only (as curl keeps
# src/ apart from lib/), so the library never reaches into it
check_private_includes() {
    for f in $(git ls-files -- $order | grep -E '\.(c|h|cu)$'); do
        mod=${f%%/*}
        own=$(rank_of "$mod")
        for dir in $(sed -n 's/^#include "\([a-z_]*\)\/[a-z_0-9]*\.h".*/\1/p' "$f"); do
            [ "$dir" = rumor ] && continue
            if [ "$(rank_of "$dir")" -gt "$own" ]; then
                echo "lint: $f includes a private header of $dir/, above $mod"
                status=1
            fi
        done
    done
}

check_headers
check_guards
if [ "$only" = all ]; then
    check_banned
    check_include_direction
    check_private_includes
fi
[ $status -eq 0 ] && echo "lint: ok"
exit $status
