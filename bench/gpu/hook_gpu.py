"""PyTorch's own PowerSGD hook on the GPU, the reference of the GPU tier.

Same shapes, ranks and step as bench/gpu/lowrank_gpu.c and the CPU
reference tests/lowrank/bench_hook.py, whose helpers this reuses (error
feedback and warm start on, past start_powerSGD_iter), but the bucket
lives on cuda:0 and the process group is NCCL of size 1 (its all-reduces
are then near no-ops, so the time is the hook's compression compute).
Timed with torch.cuda.synchronize() around each step; the first step
(allocations) is not counted; median of STEPS. Also prints the
device-to-device copy bandwidth seen by PyTorch in the same run (bytes
read + written).

usage: python3 bench/gpu/hook_gpu.py SHAPES STEPS RANK...   (on the GPU host)
"""
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "lowrank"))
import bench_hook  # noqa: E402  (path set just above)


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
    bench_hook.init_group("nccl")
    print("torch %s on %s; device-to-device copy %.1f GB/s (torch)" % (
        torch.__version__, torch.cuda.get_device_name(0), copy_gbps()))
    bench_hook.time_ranks(bench_hook.shapes_of(sys.argv[1]), int(sys.argv[2]),
                          [int(r) for r in sys.argv[3:]], device="cuda",
                          sync=torch.cuda.synchronize)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
