"""Times PyTorch's own PowerSGD hook (powerSGD_hook.py) on CPU for
`rumor bench lowrank`: error feedback on, warm start on, one process in a
gloo group of size 1 (its all-reduces are then near no-ops, so the time is
the hook's compression compute), torch limited to one thread like the C
kernels it is compared with.

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
        self._buffer = buffer
        self._grads = grads

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


def main():
    torch.set_num_threads(1)
    shapes = shapes_of(sys.argv[1])
    steps = int(sys.argv[2])
    store = tempfile.NamedTemporaryFile(delete=False)
    store.close()
    os.unlink(store.name)
    dist.init_process_group("gloo", init_method="file://" + store.name,
                            rank=0, world_size=1)
    numel = sum(int(torch.tensor(s).prod()) for s in shapes)
    gen = torch.Generator().manual_seed(0)
    source = torch.randn(numel, generator=gen)
    for rank in (int(r) for r in sys.argv[3:]):
        state = hook.PowerSGDState(process_group=None,
                                   matrix_approximation_rank=rank,
                                   start_powerSGD_iter=2,
                                   use_error_feedback=True, warm_start=True)
        state.iter = 2
        buf = torch.empty(numel)
        grads = []
        at = 0
        for s in shapes:
            k = int(torch.tensor(s).prod())
            grads.append(buf[at:at + k].view(*s))
            at += k
        times = []
        for step in range(steps + 1):
            buf.copy_(source)
            t0 = time.perf_counter()
            hook.powerSGD_hook(state, Bucket(buf, grads)).wait()
            if step > 0:  # the first step allocates
                times.append(time.perf_counter() - t0)
        times.sort()
        print("rank %d seconds_per_step %.6f" % (rank, times[len(times) // 2]))
        sys.stdout.flush()
    os._exit(0)  # skip gloo teardown, which can abort at exit


main()
