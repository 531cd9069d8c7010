#!/bin/sh
# End to end with a real Docker engine: builds docker/Dockerfile, generates
# a 4-node ring with `rumor compose`, runs it with compose until every
# container has exited, and checks that each node exited 0 after its last
# step (metrics). Where no engine is reachable (a docker client alone, as
# on the development machine) it prints why and exits 77 ("skipped"),
# which tests/integration/test_deploy.c reports as a visible skip.
# usage: RUMOR_BIN=build/bin/rumor sh tests/integration/docker_e2e.sh
# (from the repository root). Everything it starts it also removes.
set -eu

STEPS=60
LIMIT_S=600

skip() {
    echo "docker_e2e: skipped: $*"
    exit 77
}

command -v docker >/dev/null 2>&1 || skip "no docker client on PATH"
why=$(docker info 2>&1 >/dev/null) || skip "no Docker engine reachable ($(echo "$why" | head -n1))"
if docker compose version >/dev/null 2>&1; then
    compose="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then
    compose="docker-compose"
else
    skip "neither 'docker compose' nor docker-compose is installed"
fi
bin=${RUMOR_BIN:-build/bin/rumor}
[ -x "$bin" ] || { echo "docker_e2e: $bin is not built" >&2; exit 1; }
bin=$(realpath "$bin")
[ -f docker/Dockerfile ] || { echo "docker_e2e: run from the repository root" >&2; exit 1; }

image="rumor:e2e-$$"
project="rumor-e2e-$$"
work=$(mktemp -d /tmp/rumor-docker-e2e-XXXXXX)
cleanup() {
    (cd "$work" && $compose -p "$project" down --volumes --remove-orphans) >/dev/null 2>&1 || true
    docker image rm "$image" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

echo "docker_e2e: building $image"
docker build -f docker/Dockerfile -t "$image" .

cd "$work"
"$bin" topo gen ring 4 --out ring.topo >/dev/null
"$bin" compose --topology ring.topo --image "$image" --restart on-failure \
    --link-rate 1gbit --link-delay 1ms \
    --workload lsq --steps "$STEPS" --progress off >docker-compose.yml
$compose -p "$project" up -d

# Poll until every container has exited, with a deadline.
deadline=$(($(date +%s) + LIMIT_S))
while :; do
    running=$($compose -p "$project" ps -q | xargs -r docker inspect -f '{{.State.Running}}' | grep -c true || true)
    [ "$running" -eq 0 ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
        $compose -p "$project" logs --tail 20
        echo "docker_e2e: FAILED: containers still running after ${LIMIT_S}s"
        exit 1
    fi
    sleep 1
done

failed=0
for i in 0 1 2 3; do
    cid=$($compose -p "$project" ps -q "node-$i")
    code=$(docker inspect -f '{{.State.ExitCode}}' "$cid")
    last=$(tail -n1 "rumor-state/metrics/node-$i.jsonl" 2>/dev/null || true)
    case $last in
    *"\"step\":$STEPS,"*) ;;
    *) code="$code (no step $STEPS in its metrics)" ;;
    esac
    echo "docker_e2e: node-$i exit $code"
    [ "$code" = 0 ] || failed=1
done
if [ $failed -ne 0 ]; then
    $compose -p "$project" logs --tail 20
    echo "docker_e2e: FAILED"
    exit 1
fi
echo "docker_e2e: passed: 4 containers trained $STEPS steps and exited 0"
