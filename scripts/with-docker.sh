#!/bin/sh
# Runs COMMAND with a Docker engine: the one `docker info` reaches (DOCKER_HOST
# or the default socket), or else, as root, a private dockerd started for it
# and stopped after it (`make deploy-test`). The private engine keeps
# everything under one temporary directory (data root, exec root, socket,
# log), creates no docker0 bridge and writes no iptables rules
# (--bridge=none --iptables=false): compose's project network needs neither,
# and image builds use the host's network. Debian's docker.io (dockerd,
# containerd, runc) is installed through scripts/deps.sh when dockerd is
# missing. Nothing else on the machine is touched.
#
# usage: with-docker.sh COMMAND...   (DOCKER_HOST is exported to COMMAND)
# Exit status: COMMAND's; 3 when no engine can be had (the reason printed).
set -eu
[ $# -gt 0 ] || { echo "usage: with-docker.sh COMMAND..." >&2; exit 2; }
cannot() {
    echo "[docker] no Docker engine: $*"
    exit 3
}
here=$(dirname "$0")

why=$(docker info 2>&1 >/dev/null) && exec "$@"
why=$(echo "$why" | grep . | tail -n 1)
[ "$(id -u)" -eq 0 ] || cannot "none reachable (${why:-no docker client}), and starting dockerd needs root"
if ! command -v dockerd >/dev/null 2>&1; then
    sh "$here/deps.sh" docker.io || cannot "dockerd is missing and apt-get could not install docker.io"
fi
command -v docker >/dev/null 2>&1 || cannot "no docker client on PATH"

dir=$(mktemp -d /tmp/rumor-dockerd-XXXXXX)
sock=unix://$dir/docker.sock
start=$(date +%s)
dockerd --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
    --host "$sock" --bridge=none --iptables=false --ip6tables=false \
    >"$dir/dockerd.log" 2>&1 &
pid=$!

# dockerd stops the containers and the containerd it started; its mounts
# are gone once it has exited, and only then is its directory removed.
stop() {
    status=$?
    trap - EXIT INT TERM
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    grep -o " $dir/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf "$dir"
    echo "[docker] private engine stopped"
    exit "$status"
}
trap stop EXIT
trap 'exit 130' INT TERM

export DOCKER_HOST="$sock"
until docker info >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null || [ $(($(date +%s) - start)) -ge 60 ]; then
        tail -n 5 "$dir/dockerd.log"
        cannot "dockerd did not start (log above)"
    fi
    sleep 1
done
echo "[docker] private engine at $sock, ready in $(($(date +%s) - start)) s"
"$@"
