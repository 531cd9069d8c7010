#!/bin/sh
# Runs commands in a clean clone of HEAD inside a brand-new Debian 12 root
# (mmdebstrap, apt variant: no compiler, no pkg-config, no library), so that
# an install step missing from scripts/deps.sh fails here instead of on a
# user's first machine. .ci/run uses it for `make test`.
#
# usage: fresh-root.sh COMMAND...   (as root, from anywhere in the checkout)
# Each COMMAND runs in order with `sh -c` in /src/rumor inside the root, as
# a fresh login would (env -i); logs go to $FRESH_ROOT_DIR (default
# /tmp/rumor-fresh-root)/log-N.txt and are shown as they are written.
# /usr/local/cuda, when present, is bound read-only into the root: the CUDA
# toolkit is not a Debian package, and with it the root builds the CUDA
# backend as this machine does.
# Exit status: 0 when every command passed; 3 when no root could be built
# (not root, no mmdebstrap, no Debian mirror): the caller may fall back;
# otherwise that of the first command that failed.
set -eu
[ $# -gt 0 ] || { echo "usage: fresh-root.sh COMMAND..." >&2; exit 2; }
cannot() { echo "[fresh-root] cannot build a fresh root: $*"; exit 3; }
[ "$(id -u)" -eq 0 ] || cannot "needs root (chroot, mounts)"
repo=$(git rev-parse --show-toplevel)
dir=${FRESH_ROOT_DIR:-/tmp/rumor-fresh-root}
root=$dir/root

if ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "[fresh-root] installing mmdebstrap"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends mmdebstrap; } \
        >/dev/null 2>&1 || cannot "mmdebstrap is missing and apt-get could not install it"
fi

unmount_all() {
    for m in usr/local/cuda dev/pts dev proc sys; do
        mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m"
    done
    return 0
}
trap 'unmount_all; rm -rf "$root"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$dir"
unmount_all
rm -rf "$root"

# The host's own Debian sources, so that the root sees the same mirror.
sources=$(ls /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1 || true)
echo "[fresh-root] building a minimal Debian 12 root in $root"
start=$(date +%s)
mmdebstrap --variant=apt --include=make,git,ca-certificates bookworm \
    "$root" ${sources:+"$sources"} >"$dir/mmdebstrap.log" 2>&1 || {
    tail -n 5 "$dir/mmdebstrap.log"
    cannot "mmdebstrap failed (log: $dir/mmdebstrap.log)"
}
echo "[fresh-root] root ready in $(($(date +%s) - start)) s"
cp /etc/resolv.conf "$root/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    >"$root/etc/hosts"
for m in dev dev/pts proc sys; do mount --bind "/$m" "$root/$m"; done
if [ -d /usr/local/cuda/bin ]; then
    mkdir -p "$root/usr/local/cuda"
    mount --bind -o ro /usr/local/cuda "$root/usr/local/cuda"
fi
git clone -q "$repo" "$root/src/rumor"
git -C "$root/src/rumor" checkout -q "$(git -C "$repo" rev-parse HEAD)"

n=0
for cmd in "$@"; do
    n=$((n + 1))
    log=$dir/log-$n.txt
    echo "[fresh-root] \$ $cmd   (log: $log)"
    start=$(date +%s)
    status=0
    # sh has no pipefail: the status travels through the log.
    {
        chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            sh -c "cd /src/rumor && $cmd" 2>&1
        echo "[fresh-root-status] $?"
    } | tee "$log"
    status=$(sed -n 's/^\[fresh-root-status\] //p' "$log" | tail -n 1)
    [ -n "$status" ] || status=1
    echo "[fresh-root] '$cmd': exit $status after $(($(date +%s) - start)) s"
    [ "$status" -eq 0 ] || exit "$status"
done
