#!/bin/sh
# `make deploy-test`: a 4-node cluster from `rumor compose` in real
# containers, as docker/README.md tells a user to run it.
#   1. base: a Debian 12 image; debian:12.11-slim when the engine has it,
#      else rumor-base:bookworm, built without any registry (mmdebstrap |
#      docker import) when missing and kept for the next run
#   2. image: docker/Dockerfile on that base (--build-arg BASE)
#   3. cluster: a generated ring, the compose file with its default restart
#      policy, `compose up` in the foreground; once node 2 has a checkpoint
#      and has passed step CRASH_AT, its `rumor` process is killed inside the
#      container (SIGKILL, not `docker kill`, which Docker counts as a stop)
#   4. checks: `up` returned by itself; every node reached the last step,
#      accuracy >= ACC_MIN, exited 0 and stays exited; metrics, models and
#      checkpoints are on the host; no secret key in any image layer, image
#      history or container/image configuration; node 2 was restarted
#      once by the policy, the survivors never; the crash checks of
#      docker_crash_check.sh (node 2 resumed from its checkpoint and its
#      neighbours re-admitted it and gossiped with it again, whether or not
#      they had marked it down; the survivors never stopped)
# Prints the seconds of each phase, and which path each neighbour took.
# Where no engine is reachable it exits 77 ("skipped") with the reason;
# scripts/with-docker.sh starts one as root. On failure the logs and
# metrics stay in /tmp/rumor-docker-e2e-logs-PID (always with
# RUMOR_E2E_KEEP=1).
# usage: RUMOR_BIN=build/bin/rumor sh tests/integration/docker_e2e.sh
# (from the repository root). It removes what it starts, except the base.
set -eu

STEPS=1500
DELAY=20ms    # ~45 ms a step: the run lasts about a minute
CRASH_AT=400  # node 2's step when it is killed (checkpoints every 100)
ACC_MIN=0.93  # `rumor launch --nodes 4 --steps 1500 --delay-ms 20`: 0.969
LIMIT_S=600   # for `up` to return
SETTLE_S=15   # a finished cluster must still be down after this
VICTIM=2
BASE_LOCAL=rumor-base:bookworm

skip() {
    echo "docker_e2e: skipped: $*"
    exit 77
}
fail() {
    echo "docker_e2e: FAILED: $*"
    exit 1
}
t0=$(date +%s)
phase() {
    now=$(date +%s)
    echo "docker_e2e: [time] $1: $((now - t0)) s"
    t0=$now
}

command -v docker >/dev/null 2>&1 || skip "no docker client on PATH"
why=$(docker info 2>&1 >/dev/null) || skip "no Docker engine reachable ($(echo "$why" | grep . | tail -n1))"
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
here=$(realpath "$(dirname "$0")")

image="rumor:e2e-$$"
project="rumor-e2e-$$"
work=$(mktemp -d /tmp/rumor-docker-e2e-XXXXXX)
cleanup() {
    status=$?
    if [ $status -ne 0 ] || [ "${RUMOR_E2E_KEEP:-0}" = 1 ]; then
        keep=/tmp/rumor-docker-e2e-logs-$$
        mkdir -p "$keep"
        (cd "$work" && cp -r ./*.log docker-compose.yml rumor-state/metrics "$keep"/) 2>/dev/null || true
        echo "docker_e2e: logs and metrics kept in $keep"
    fi
    (cd "$work" && $compose -p "$project" down --volumes --remove-orphans) >/dev/null 2>&1 || true
    docker image rm "$image" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. base image
base=debian:12.11-slim
if ! docker image inspect "$base" >/dev/null 2>&1; then
    base=$BASE_LOCAL
    if ! docker image inspect "$base" >/dev/null 2>&1; then
        if ! command -v mmdebstrap >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
            sh scripts/deps.sh mmdebstrap >/dev/null || true
        fi
        command -v mmdebstrap >/dev/null 2>&1 ||
            fail "no Debian 12 base image and no mmdebstrap to build $base (apt-get install mmdebstrap)"
        echo "docker_e2e: building $base with mmdebstrap (no registry)"
        mmdebstrap --quiet --variant=apt bookworm - | docker import - "$base" >/dev/null
    fi
fi
phase "base image $base"

# 2. the CPU image; RUN steps use the host's network (the private engine
# of with-docker.sh has no default bridge)
echo "docker_e2e: building $image on $base"
docker build --quiet --network host --build-arg BASE="$base" \
    -f docker/Dockerfile -t "$image" . >/dev/null
phase "image build"

# 3. the cluster, with a crash
cd "$work"
"$bin" topo gen ring 4 --out ring.topo >/dev/null
"$bin" compose --topology ring.topo --image "$image" --link-delay "$DELAY" \
    --steps "$STEPS" --progress off >docker-compose.yml
$compose -p "$project" up >up.log 2>&1 &
up=$!
deadline=$(($(date +%s) + LIMIT_S))

metrics=rumor-state/metrics
step_of() { # the last step in node $1's metrics, 0 before the first
    tail -n 1 "$metrics/node-$1.jsonl" 2>/dev/null | sed -n 's/^{"step":\([0-9]*\),.*/\1/p' | grep . || echo 0
}
until [ "$(step_of $VICTIM)" -ge $CRASH_AT ] &&
    ls rumor-state/node-$VICTIM/node-$VICTIM.step-*.ckpt >/dev/null 2>&1; do
    kill -0 $up 2>/dev/null || fail "compose up ended before the crash ($(tail -n 5 up.log))"
    [ "$(date +%s)" -lt "$deadline" ] || fail "node $VICTIM never reached step $CRASH_AT"
    sleep 0.2
done
killed_at=$(step_of $VICTIM)
# shellcheck disable=SC2016 # expanded inside the container
$compose -p "$project" exec -T "node-$VICTIM" sh -c 'kill -KILL $(pidof rumor)'
echo "docker_e2e: killed rumor in node-$VICTIM at step $killed_at"
phase "cluster start to crash"

while kill -0 $up 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        kill $up 2>/dev/null || true
        tail -n 20 up.log
        fail "compose up had not returned after ${LIMIT_S}s"
    fi
    sleep 1
done
up_status=0
wait $up || up_status=$?
phase "crash to compose up returned (status $up_status)"

# 4. checks
sleep $SETTLE_S
for i in 0 1 2 3; do
    $compose -p "$project" logs --no-color "node-$i" >"node-$i.log" 2>&1 || true
done
failed=0
bad() {
    echo "docker_e2e: $*"
    failed=1
}
for i in 0 1 2 3; do
    cid=$($compose -p "$project" ps -q "node-$i")
    state=$(docker inspect -f '{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$cid")
    want_restarts=0
    [ $i -eq $VICTIM ] && want_restarts=1
    [ "$state" = "exited 0 $want_restarts" ] ||
        bad "node-$i: state '$state' after ${SETTLE_S}s, want 'exited 0 $want_restarts' (status, exit code, restarts)"
    last=$(tail -n 1 "$metrics/node-$i.jsonl" 2>/dev/null || true)
    acc=$(echo "$last" | sed -n 's/.*"accuracy":\([0-9.e+-]*\).*/\1/p')
    case $last in
    "{\"step\":$STEPS,"*) ;;
    *) bad "node-$i: no step $STEPS in its metrics (last: ${last:-none})" ;;
    esac
    awk -v a="${acc:-0}" -v m=$ACC_MIN 'BEGIN { exit !(a >= m) }' ||
        bad "node-$i: accuracy ${acc:-none} below $ACC_MIN"
    grep -q "node-$i.*step $STEPS/$STEPS .*accuracy" up.log ||
        bad "node-$i: no final accuracy line in the compose up output"
    ls "rumor-state/node-$i/node-$i.step-"*"$STEPS.ckpt" >/dev/null 2>&1 ||
        bad "node-$i: no checkpoint of step $STEPS in rumor-state/node-$i"
    [ -s "$metrics/node-$i.model" ] || bad "node-$i: no final model in $metrics"
    echo "docker_e2e: node-$i: $state, accuracy $acc"
done

# node 0: a survivor with as many neighbours as node 2 (1 and 3)
sh "$here/docker_crash_check.sh" . $STEPS "$killed_at" $VICTIM 0 1 3 || failed=1

# No secret key anywhere Docker keeps image or container data.
docker save "$image" >image.tar
containers=$($compose -p "$project" ps -q)
for i in 0 1 2 3; do
    secret=$(cat "keys/node-$i.key")
    [ ${#secret} -ge 32 ] || fail "keys/node-$i.key holds no key"
    # shellcheck disable=SC2086 # $containers: one argument per id
    for where in image.tar history inspect; do
        case $where in
        image.tar) found=$(grep -c -a -F -- "$secret" image.tar || true) ;;
        history) found=$(docker history --no-trunc "$image" | grep -c -F -- "$secret" || true) ;;
        inspect) found=$(docker inspect "$image" $containers | grep -c -F -- "$secret" || true) ;;
        esac
        [ "$found" -eq 0 ] || bad "node-$i's secret key is in the $where"
    done
done
phase "checks"
if [ $failed -ne 0 ]; then
    tail -n 30 up.log
    fail "see above"
fi
echo "docker_e2e: passed: node-$VICTIM killed at step $killed_at came back, 4 nodes trained $STEPS steps and stayed down"
