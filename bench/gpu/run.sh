#!/bin/sh
# bench/gpu/run.sh: the GPU tier of issue 11, run ON a lent GPU machine
# (the `device` tool's `run`, carry [".gpu-debs"], after
# bench/gpu/prepare.sh here). Steps:
#  1. unpack the carried Debian packages into /tmp/rumor-deb (not into /:
#     the GPU image is another distribution);
#  2. build everything with nvcc -arch=sm_90 into build/gpu (USE_CUDA=yes)
#     and run the whole test suite there: the CUDA tests that skip on
#     machines without a GPU run for real;
#  3. build and run bench/gpu/lowrank_gpu.c: the PowerSGD step on the cuda
#     backend against the device-to-device copy bandwidth measured in the
#     same run, after checking each rank's result against the cpu backend;
#  4. PyTorch's PowerSGD hook on the same GPU, same shapes and ranks
#     (bench/gpu/hook_gpu.py);
#  5. the codec tier: compress/ has no CUDA kernels yet, so the CPU codec
#     benchmark is run there only to record the host CPU next to the rest.
# Everything is printed and copied under $OUT (the device tool brings it
# back); record the results with their date in docs/benchmarks.md.
set -u
D=/tmp/rumor-deb
OUT=${OUT:-/tmp/rumor-gpu-out}
mkdir -p "$D" "$OUT"
for f in .gpu-debs/*.deb; do dpkg -x "$f" "$D"; done
ML=$D/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$ML:$ML/openblas-pthread:${LD_LIBRARY_PATH:-}"
# Debian points these names at OpenBLAS through alternatives, which
# dpkg -x does not create.
for n in libblas.so.3 liblapack.so.3; do
    [ -e "$ML/$n" ] || ln -sf "openblas-pthread/$n" "$ML/$n"
done
[ -e "$ML/libopenblas.so" ] || ln -sf openblas-pthread/libopenblas.so "$ML/libopenblas.so"
CF="$(sed "s|@D@|$D|g" .gpu-debs/cflags) -I$D/usr/include"
LB="-L$ML -L$ML/openblas-pthread -Wl,-rpath-link,$ML $(cat .gpu-debs/libs)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
nvcc --version | tail -2 | tee -a "$OUT/gpu.txt"
status=0
echo "== build and test (nvcc -arch=sm_90)"
make -j16 BUILD=build/gpu USE_CUDA=yes NVCCFLAGS="-O2 -std=c++17 -arch=sm_90" \
    PKG_CFLAGS="$CF" PKG_LIBS="$LB" CMOCKA_LIBS="-L$ML -lcmocka" \
    check >"$OUT/check.log" 2>&1 || status=1
tail -25 "$OUT/check.log"
echo "== lowrank on the GPU"
# shellcheck disable=SC2086 # $LB is a list of flags
gcc -std=c11 -D_DEFAULT_SOURCE -O2 -Iinclude -I. -I/usr/local/cuda/include \
    bench/gpu/lowrank_gpu.c build/gpu/lib/librumor.a $LB \
    -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 \
    -lcusolver -lcublas -lcudart -lstdc++ -lpthread -lm \
    -o build/gpu/lowrank_gpu || status=1
./build/gpu/lowrank_gpu 11 >"$OUT/lowrank_gpu.txt" 2>&1 || status=1
cat "$OUT/lowrank_gpu.txt"
echo "== PyTorch powerSGD_hook on the same GPU"
python3 bench/gpu/hook_gpu.py 4096x4096 11 1 2 4 2>&1 | tee "$OUT/hook_gpu.txt"
python3 bench/gpu/hook_gpu.py tests/data/resnet18_cifar10.shapes 11 1 2 4 2>&1 |
    tee -a "$OUT/hook_gpu.txt"
echo "== codecs (CPU of the GPU host; compress/ has no CUDA kernels)"
OPENBLAS_NUM_THREADS=1 ./build/gpu/bin/rumor bench compress --reps 3 2>&1 |
    tee "$OUT/compress_host.txt"
exit $status
