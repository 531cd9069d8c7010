"""PyTorch's own PowerSGD hook on the GPU, the reference of the GPU tier.

Same shapes, ranks and step as bench/gpu/lowrank_gpu.c and
tests/lowrank/bench_hook.py (error feedback and warm start on, past
start_powerSGD_iter), but the bucket lives on cuda:0 and the process group
is NCCL of size 1 (its all-reduces are then near no-ops, so the time is the
hook's compression compute). Timed with torch.cuda.synchronize() around
each step; the first step (allocations) is not counted; median of STEPS.
Also prints the device-to-device copy bandwidth seen by PyTorch in the same
run (bytes read + written).

usage: python3 bench/gpu/hook_gpu.py SHAPES STEPS RANK...   (on the GPU host)
"""
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as hook



class Bucket:
    def __init__(self, buffer, grads):
        self._buffer, self._grads = buffer, grads

    def buffer(self):
        return self._buffer

    def index(self):
        return 0

    def gradients(self):
        return self._grads

    def is_last(self):
        return True


def shapes_of(arg):
    if "x" in arg and not os.path.exists(arg):
        return [tuple(int(v) for v in arg.split("x"))]
    shapes = []
    for line in open(arg):
        line = line.split("#")[0].split()
        if line:
            shapes.append(tuple(int(v) for v in line[1:]))
    return shapes


def copy_gbps():
    a = torch.empty(1 << 28, device="cuda")  # 1 GiB of float32
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        b.copy_(a)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return 2 * a.numel() * 4 / times[3] / 1e9


def main():
    shapes = shapes_of(sys.argv[1])
    steps = int(sys.argv[2])
    store = tempfile.NamedTemporaryFile(delete=False)
    store.close()
    os.unlink(store.name)
    dist.init_process_group("nccl", init_method="file://" + store.name,
                            rank=0, world_size=1)
    print("torch %s on %s; device-to-device copy %.1f GB/s (torch)" % (
        torch.__version__, torch.cuda.get_device_name(0), copy_gbps()))
    numel = sum(int(torch.tensor(s).prod()) for s in shapes)
    gen = torch.Generator().manual_seed(0)
    source = torch.randn(numel, generator=gen).cuda()
    for rank in (int(r) for r in sys.argv[3:]):
        state = hook.PowerSGDState(process_group=None,
                                   matrix_approximation_rank=rank,
                                   start_powerSGD_iter=2,
                                   use_error_feedback=True, warm_start=True)
        state.iter = 2
        buf = torch.empty(numel, device="cuda")
        grads, at = [], 0
        for s in shapes:
            k = int(torch.tensor(s).prod())
            grads.append(buf[at:at + k].view(*s))
            at += k
        times = []
        for step in range(steps + 1):
            buf.copy_(source)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            hook.powerSGD_hook(state, Bucket(buf, grads)).wait()
            torch.cuda.synchronize()
            if step > 0:
                times.append(time.perf_counter() - t0)
        times.sort()
        print("rank %d seconds_per_step %.6f" % (rank, times[len(times) // 2]))
        sys.stdout.flush()
    dist.destroy_process_group()


main()
