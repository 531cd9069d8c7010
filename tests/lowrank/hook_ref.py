"""Runs PyTorch's own PowerSGD hook (torch/distributed/algorithms/
ddp_comm_hooks/powerSGD_hook.py) on given gradients and a given first Q,
for the lowrank unit test. One process, a gloo group of size 1, a stand-in
for DDP's GradBucket; the hook's _orthogonalize is wrapped only to record
P before and after orthogonalization.

usage: /usr/bin/python3 hook_ref.py IN OUT
IN (little-endian): int32 rank, float32 eps, int32 steps, int32 ntensors,
  per tensor int32 ndim + int32 dims[ndim]; float32 q_init[...] (the hook's
  q memory layout); per step, per tensor float32 grad[numel].
OUT: per step float32 P before orthogonalization (p memory layout), Q
  (q memory), the hook's output buffer (every tensor), the error memory.
Exit status 3 when torch is missing (the C test then skips).
"""
import os
import struct
import sys
import tempfile

import numpy as np

try:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as hook
except ImportError as err:  # the test prints this and skips
    print("hook_ref: %s" % err, file=sys.stderr)
    sys.exit(3)


class Bucket:
    """The parts of dist.GradBucket the hook uses."""

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


def main():
    torch.set_num_threads(1)
    data = open(sys.argv[1], "rb").read()
    off = 0

    def ints(n):
        nonlocal off
        v = struct.unpack_from("<%di" % n, data, off)
        off += 4 * n
        return v

    rank, = ints(1)
    eps, = struct.unpack_from("<f", data, off)
    off += 4
    steps, ntensors = ints(2)
    shapes = []
    for _ in range(ntensors):
        ndim, = ints(1)
        shapes.append(tuple(ints(ndim)))
    q_floats = 0
    p_floats = 0
    for s in shapes:
        n = s[0]
        m = int(np.prod(s)) // n
        r = min(n, m, rank)
        if len(s) >= 2 and hook._should_compress(n, m, r, 2)[0]:
            q_floats += m * r
            p_floats += n * r
    q_init = np.frombuffer(data, "<f4", q_floats, off)
    off += 4 * q_floats
    numel = sum(int(np.prod(s)) for s in shapes)

    store = tempfile.NamedTemporaryFile(delete=False)
    store.close()
    os.unlink(store.name)
    dist.init_process_group("gloo", init_method="file://" + store.name,
                            rank=0, world_size=1)
    state = hook.PowerSGDState(process_group=None,
                               matrix_approximation_rank=rank,
                               start_powerSGD_iter=2,
                               min_compression_rate=2,
                               use_error_feedback=True,
                               warm_start=True,
                               orthogonalization_epsilon=eps)
    state.iter = 2  # compress from the first call
    state.p_memory_dict[0] = torch.empty(p_floats)
    state.q_memory_dict[0] = torch.tensor(q_init.copy())

    calls = []
    original = hook._orthogonalize

    def recording(matrices, epsilon=0):
        before = matrices.clone()
        original(matrices, epsilon)
        calls.append(before)

    hook._orthogonalize = recording
    out = open(sys.argv[2], "wb")
    ncomp = None
    for _ in range(steps):
        buf = torch.tensor(np.frombuffer(data, "<f4", numel, off).copy())
        off += 4 * numel
        grads = []
        at = 0
        for s in shapes:
            k = int(np.prod(s))
            grads.append(buf[at:at + k].view(*s))
            at += k
        calls.clear()
        hook.powerSGD_hook(state, Bucket(buf, grads)).wait()
        ncomp = len(calls) // 2
        p_before = [c.reshape(-1) for c in calls[ncomp:]]
        ps = torch.cat(p_before) if p_before else torch.empty(0)
        out.write(ps.numpy().astype("<f4").tobytes())
        out.write(state.q_memory_dict[0].numpy().astype("<f4").tobytes())
        out.write(buf.numpy().astype("<f4").tobytes())
        out.write(state.error_dict[0].numpy().astype("<f4").tobytes())
    out.close()
    os._exit(0)  # skip gloo teardown, which can abort at exit


main()
