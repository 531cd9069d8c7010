"""Times PyTorch's own PowerSGD hook (powerSGD_hook.py) for
`rumor bench lowrank`: error feedback on, warm start on, one process in a
process group of size 1 (its all-reduces are then near no-ops, so the time
is the hook's compression compute). On CPU (this script's entry point)
torch is limited to one thread like the C kernels it is compared with;
bench/gpu/hook_gpu.py reuses the helpers below on cuda:0.

usage: /usr/bin/python3 bench_hook.py SHAPES STEPS RANK...
SHAPES is a shape file (NAME DIM [DIM...] per line) or NxM for one matrix.
Prints one line per rank: "rank R seconds_per_step S" (median of STEPS).
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


def init_group(backend):
    """A process group of one (gloo on CPU, nccl on a GPU)."""
    store = tempfile.NamedTemporaryFile(delete=False)
    store.close()
    os.unlink(store.name)
    dist.init_process_group(backend, init_method="file://" + store.name,
                            rank=0, world_size=1)


def time_ranks(shapes, steps, ranks, device="cpu", sync=lambda: None):
    """Prints "rank R seconds_per_step S" per rank: the median of STEPS
    hook steps on a bucket on device (the first step, which allocates, is
    not counted); sync() runs before and after each timed step."""
    numel = sum(int(torch.tensor(s).prod()) for s in shapes)
    gen = torch.Generator().manual_seed(0)
    source = torch.randn(numel, generator=gen).to(device)
    for rank in ranks:
        state = hook.PowerSGDState(process_group=None,
                                   matrix_approximation_rank=rank,
                                   start_powerSGD_iter=2,
                                   use_error_feedback=True, warm_start=True)
        state.iter = 2
        buf = torch.empty(numel, device=device)
        grads, at = [], 0
        for s in shapes:
            k = int(torch.tensor(s).prod())
            grads.append(buf[at:at + k].view(*s))
            at += k
        times = []
        for step in range(steps + 1):
            buf.copy_(source)
            sync()
            t0 = time.perf_counter()
            hook.powerSGD_hook(state, Bucket(buf, grads)).wait()
            sync()
            if step > 0:
                times.append(time.perf_counter() - t0)
        times.sort()
        print("rank %d seconds_per_step %.6f" % (rank, times[len(times) // 2]))
        sys.stdout.flush()


def main():
    torch.set_num_threads(1)
    init_group("gloo")
    time_ranks(shapes_of(sys.argv[1]), int(sys.argv[2]),
               [int(r) for r in sys.argv[3:]])
    os._exit(0)  # skip gloo teardown, which can abort at exit


if __name__ == "__main__":
    main()
