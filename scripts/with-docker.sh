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
# An engine that answers may still be unable to run a container (a chroot
# without cgroups, say): before COMMAND, a one-file image of this machine's
# /usr/bin/true must run, which takes seconds and no registry.
#
# usage: with-docker.sh COMMAND...   (DOCKER_HOST is exported to COMMAND)
# Exit status: COMMAND's; 3 when no engine can be had or it cannot run a
# container (the reason printed in one line).
set -eu
[ $# -gt 0 ] || { echo "usage: with-docker.sh COMMAND..." >&2; exit 2; }
cannot() {
    echo "[docker] no Docker engine: $*"
    exit 3
}
here=$(dirname "$0")

# Runs /usr/bin/true in a container (with its libraries, from ldd) or
# prints why it could not; a minute at most, so that it cannot hang CI.
runs_containers() {
    probe=rumor-probe:$$
    # shellcheck disable=SC2046 # one argument per library path
    out=$(tar -chf - /usr/bin/true $(ldd /usr/bin/true | grep -o '/[^ ]*') 2>/dev/null |
        timeout 60 docker import - "$probe" 2>&1 >/dev/null &&
        timeout 60 docker run --rm --network none "$probe" /usr/bin/true 2>&1)
    status=$?
    docker image rm "$probe" >/dev/null 2>&1 || true
    [ $status -eq 0 ] || echo "$out" | grep . | tail -n 1
    return $status
}

if why=$(docker info 2>&1 >/dev/null); then
    why=$(runs_containers) || cannot "the engine that answers cannot run a container: $why"
    exec "$@"
fi
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
        why=$(grep -m 1 "failed to start daemon" "$dir/dockerd.log" || tail -n 1 "$dir/dockerd.log")
        cannot "dockerd did not start: $why"
    fi
    sleep 1
done
why=$(runs_containers) || cannot "dockerd started but cannot run a container: $why"
echo "[docker] private engine at $sock ($(docker info -f '{{.Driver}}') storage), ready in $(($(date +%s) - start)) s"
"$@"
