#!/bin/sh
# Installs the Debian 12 packages Rumor needs, only those missing. Quick and
# silent when everything is there; needs root (or sudo) to install.
# usage: deps.sh [EXTRA_PACKAGE...]   (extra packages for one target only:
# scripts/with-docker.sh asks for docker.io when it must start an engine)
set -eu

# Build and test: compiler, pkg-config, cmocka (unit tests), clang with its
# libFuzzer/sanitizer runtime (make fuzz), clang-format (make format-check).
# Runtime: OpenBLAS + LAPACKE (topology spectra, low-rank), libzmq (Z85 keys,
# transport) and libsodium (CURVE). libzstd: the compress benchmark's
# side-by-side line against zstd -1 (docs/benchmarks.md). python3-torch and
# python3-numpy: the lowrank tests run PyTorch's own powerSGD_hook.py as the
# reference, and `rumor bench lowrank` times it; python3-torch also runs
# tests/gossip/powergossip_ref.py, the PowerGossip reference curve.
# gnuplot-nox: scripts/plot-consensus.sh draws the consensus plots in docs/,
# and `rumor plot` (make demo) the training plots. libinih-dev: `rumor node
# --config` INI files. libcjson-dev: the node's JSON-lines metrics (written,
# and read back by `rumor plot` and the node tests). python3-pytest: the
# python/rumor binding's tests (tests/python), run by `make check`;
# python3-venv: `pip install ./python` into a venv that sees Debian's torch
# (README, "Use from PyTorch"). docker-compose: tests/integration/test_deploy.c
# validates `rumor compose` output with `docker-compose config` (no engine).
PACKAGES="build-essential pkg-config libcmocka-dev clang libclang-rt-14-dev
clang-format libopenblas-dev liblapacke-dev libzmq3-dev libsodium-dev
libzstd-dev python3-torch python3-numpy gnuplot-nox libinih-dev libcjson-dev
python3-pytest python3-venv docker-compose zlib1g-dev dataset-fashion-mnist
$*"

missing=""
for pkg in $PACKAGES; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    case "$status" in
    *"install ok installed"*) ;;
    *) missing="$missing $pkg" ;;
    esac
done
[ -z "$missing" ] && exit 0

echo "[deps] installing:$missing"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "[deps] these Debian packages are missing:$missing" >&2
    echo "[deps] run as root: apt-get install -y$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
