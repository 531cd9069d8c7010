#!/bin/sh
# bench/gpu/run.sh: the GPU tier, run ON a lent GPU machine (the `device`
# tool's `run`, carry [".gpu-debs"], after bench/gpu/prepare.sh here).
# Ordered so that what only a GPU can show comes first, each step under its
# own time limit, and one lease (15 minutes of device time, all tries
# together) fits it:
#  1. unpack the carried Debian packages into /tmp/rumor-deb (not into /:
#     the GPU image is another distribution) and build with
#     nvcc -arch=sm_90 into build/gpu (USE_CUDA=yes);
#  2. the tests that run CUDA code (lowrank's cuda-against-cpu tests, the
#     CUDA workload's gradients, the peer with CUDA tensors, and pytest's
#     CUDA-tensor cases with the machine's own PyTorch);
#  3. bench/gpu/peer_gpu.py: 4-process Peer runs with CUDA tensors (and a
#     mixed ring) against the same runs on the CPU; bench/gpu/codec_gpu.py:
#     the device codecs against the copy rate and PyTorch (issue 31);
#     bench/gpu/lowrank_gpu.c: the PowerSGD step on the cuda backend
#     (4096 x 4096, ResNet-18, ResNet-50 and GPT-2 medium's 355 M)
#     against the device-to-device copy bandwidth measured in the same run,
#     after checking each rank's result against the cpu backend;
#  4. PyTorch's PowerSGD hook on the same GPU, same shapes and ranks
#     (bench/gpu/hook_gpu.py);
#  5. `rumor launch` of the demo's 4-node CURVE ring with `--cuda` (the
#     MLP's forward and backward on the GPU) against the same run without;
#  6. `rumor bench net` (the CURVE target needs more cores than CI has)
#     and the CPU codec benchmark, for the record of the host;
#  7. with RUMOR_GPU_CHECK_S=SECONDS, the whole suite in that time.
# Logs go under $OUT (the device tool brings them back); record the
# results with their date in docs/benchmarks.md.
set -u
D=/tmp/rumor-deb
OUT=${OUT:-/tmp/rumor-gpu-out}
B=build/gpu
mkdir -p "$D" "$OUT"
for f in .gpu-debs/*.deb; do dpkg -x "$f" "$D"; done
ML=$D/usr/lib/x86_64-linux-gnu
# Links such as libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13 are
# absolute: point them into $D, or the linker falls back to a static .a.
find "$D" -type l | while read -r l; do
    case $(readlink "$l") in /*) ln -sf "$D$(readlink "$l")" "$l" ;; esac
done
export LD_LIBRARY_PATH="$ML:$ML/openblas-pthread:$D/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
# Debian points these names at OpenBLAS through alternatives, which
# dpkg -x does not create.
for n in libblas.so.3 liblapack.so.3; do
    [ -e "$ML/$n" ] || ln -sf "openblas-pthread/$n" "$ML/$n"
done
[ -e "$ML/libopenblas.so" ] || ln -sf openblas-pthread/libopenblas.so "$ML/libopenblas.so"
CF="$(sed "s|@D@|$D|g" .gpu-debs/cflags) -I$D/usr/include"
LB="-L$ML -L$ML/openblas-pthread -L$D/lib/x86_64-linux-gnu -Wl,-rpath-link,$ML $(cat .gpu-debs/libs)"
status=0

# step NAME SECONDS CMD...: runs CMD under a time limit, its output
# appended to $OUT/NAME.log and the last lines of this step's printed.
step() {
    name=$1 limit=$2
    shift 2
    echo "== $name: $*" | tee -a "$OUT/$name.log"
    start=$(wc -l <"$OUT/$name.log")
    timeout "$limit" "$@" >>"$OUT/$name.log" 2>&1
    rc=$?
    tail -n +$((start + 1)) "$OUT/$name.log" | tail -n 12
    [ $rc -eq 0 ] || {
        echo "!! $name: exit $rc"
        status=1
    }
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    nvcc --version | tail -2
    nproc
    python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
} 2>&1 | tee "$OUT/gpu.log"

CUDA_TESTS="$B/tests/unit/test_lowrank $B/tests/unit/test_lowrank_list $B/tests/unit/test_train
$B/tests/unit/test_core $B/tests/unit/test_codec_device
$B/tests/unit/test_gossip_device $B/tests/unit/test_gossip_copy
$B/tests/integration/test_peer $B/tests/integration/test_peer_cuda
$B/tests/integration/test_node_device"
# shellcheck disable=SC2086 # lists of flags and targets
step build 300 make -j16 BUILD=$B USE_CUDA=yes DEPS=no \
    NVCCFLAGS="-O2 -std=c++17 -arch=sm_90" \
    PKG_CFLAGS="$CF" PKG_LIBS="$LB" CMOCKA_LIBS="-L$ML -lcmocka" \
    all $CUDA_TESTS
"$B/bin/rumor" version | tee -a "$OUT/gpu.log"

for t in $CUDA_TESTS; do
    step cuda_tests 120 env CMOCKA_MESSAGE_OUTPUT=stdout RUMOR_BIN=$B/bin/rumor "$t"
done
step cuda_tests 180 env RUMOR_BIN=$B/bin/rumor RUMOR_LIB="$PWD/$B/lib/librumor.so" \
    python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_binding.py \
    tests/python/test_peer_cuda.py

# Issue 31's exchange on the GPU: 4-process Peer runs against the CPU's.
step peer_gpu 150 env RUMOR_BIN=$B/bin/rumor RUMOR_LIB="$PWD/$B/lib/librumor.so" \
    python3 bench/gpu/peer_gpu.py --steps 20

# RUMOR_GPU_TESTS_ONLY=1: the tests above and no benchmark (a re-check
# after a change, in less of the lease).
[ "${RUMOR_GPU_TESTS_ONLY:-0}" = 1 ] && exit $status

# Issue 31's device codecs against the copy rate and PyTorch.
step codec_gpu 90 env RUMOR_LIB="$PWD/$B/lib/librumor.so" \
    python3 bench/gpu/codec_gpu.py 1e8 5

# shellcheck disable=SC2086
gcc -std=c11 -D_DEFAULT_SOURCE -O2 -Iinclude -I. -I/usr/local/cuda/include \
    bench/gpu/lowrank_gpu.c $B/lib/librumor.a $LB \
    -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
    -lcusolver -lcublas -lcudart -lstdc++ -lpthread -lm \
    -o $B/lowrank_gpu || status=1
SHAPES="tests/data/resnet18_cifar10.shapes tests/data/resnet50_imagenet.shapes
tests/data/gpt2_medium.shapes"
# shellcheck disable=SC2086
step lowrank_gpu 180 ./$B/lowrank_gpu 11 $SHAPES
for s in 4096x4096 $SHAPES; do
    step hook_gpu 120 python3 bench/gpu/hook_gpu.py "$s" 11 1 2 4
done

demo=/tmp/rumor-demo
mkdir -p $demo
$B/bin/rumor topo gen ring 4 --local --out $demo/ring.topo >/dev/null
common="--workload mlp --hidden 64 --optimizer momentum --lr 0.05 --batch 32
--steps 300 --eval-every 100 --deadline-ms 10000 --log-level warn
--topology $demo/ring.topo --algo powergossip --rank 1"
# shellcheck disable=SC2086
step launch 120 $B/bin/rumor launch $common --metrics-dir $demo/cpu
# shellcheck disable=SC2086
step launch 120 $B/bin/rumor launch $common --metrics-dir $demo/cuda --cuda

step host 150 $B/bin/rumor bench net
step host 90 env OPENBLAS_NUM_THREADS=1 $B/bin/rumor bench compress --reps 3

# The whole suite, when asked for with its time limit (its pytest step
# needs /usr/bin/python3 with torch, which the GPU image may lack: the CUDA
# cases ran above; the rest is CPU code that CI runs).
[ "${RUMOR_GPU_CHECK_S:-0}" -gt 0 ] && step check "$RUMOR_GPU_CHECK_S" make -j16 BUILD=$B USE_CUDA=yes DEPS=no \
    NVCCFLAGS="-O2 -std=c++17 -arch=sm_90" \
    PKG_CFLAGS="$CF" PKG_LIBS="$LB" CMOCKA_LIBS="-L$ML -lcmocka" check
exit $status
