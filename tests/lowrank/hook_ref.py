"""Runs PyTorch's own PowerSGD hook (torch/distributed/algorithms/
ddp_comm_hooks/powerSGD_hook.py) on given gradients and a given first Q,
for the lowrank unit test. One process, a gloo group of size 1, a stand-in
for DDP's GradBucket; the hook's _orthogonalize is wrapped only to record
P before and after orthogonalization.

usage: /usr/bin/python3 hook_ref.py IN OUT
IN (little-endian): int32 rank, float32 eps, int32 steps, int32 ntensors,
  int32 start_iter, float32 min_compression_rate, int32 use_error_feedback,
  int32 warm_start (PowerSGDState's fields); per tensor int32 ndim + int32
  dims[ndim]; int32 qsets, float32 q[qsets][q floats] (the hook's q memory
  layout): the random Q of each step that draws one, in order, handed to
  the hook in place of torch.randn; per step, per tensor float32
  grad[numel].
OUT: per step the hook's output buffer (every tensor) alone for a step of
  vanilla all-reduce (before start_iter); for a compressed step float32 P
  before orthogonalization (p memory layout), Q (q memory; with warm_start
  only: without it the hook drops Q), the output buffer, the error memory
  (with use_error_feedback only).
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
    steps, ntensors, start_iter = ints(3)
    min_rate, = struct.unpack_from("<f", data, off)
    off += 4
    use_ef, warm = ints(2)
    shapes = []
    for _ in range(ntensors):
        ndim, = ints(1)
        shapes.append(tuple(ints(ndim)))
    q_floats = 0
    for s in shapes:
        n = s[0]
        m = int(np.prod(s)) // n
        r = min(n, m, rank)
        if len(s) >= 2 and hook._should_compress(n, m, r, min_rate)[0]:
            q_floats += m * r
    qsets, = ints(1)
    q_draws = np.frombuffer(data, "<f4", qsets * q_floats, off).copy()
    off += 4 * qsets * q_floats
    numel = sum(int(np.prod(s)) for s in shapes)

    store = tempfile.NamedTemporaryFile(delete=False)
    store.close()
    os.unlink(store.name)
    dist.init_process_group("gloo", init_method="file://" + store.name,
                            rank=0, world_size=1)
    state = hook.PowerSGDState(process_group=None,
                               matrix_approximation_rank=rank,
                               start_powerSGD_iter=2,
                               min_compression_rate=min_rate,
                               use_error_feedback=bool(use_ef),
                               warm_start=bool(warm),
                               orthogonalization_epsilon=eps)
    # DDP rebuilds its buckets after the first iteration, hence the hook's
    # start_powerSGD_iter >= 2 with error feedback or warm start; there is
    # no DDP here, so any start is the hook's own schedule
    state.start_powerSGD_iter = start_iter

    calls = []
    original = hook._orthogonalize

    def recording(matrices, epsilon=0):
        before = matrices.clone()
        original(matrices, epsilon)
        calls.append(before)

    drawn = 0

    def given_randn(*shape, **kwargs):
        """The hook's fresh Q (torch.randn after a torch.manual_seed): the
        next values of q_draws instead, in the order the hook asks."""
        nonlocal drawn
        k = int(np.prod(shape))
        if drawn + k > q_draws.size:
            raise RuntimeError("hook_ref: the hook drew more Q than given")
        v = torch.tensor(q_draws[drawn:drawn + k]).view(*shape)
        drawn += k
        return v

    hook._orthogonalize = recording
    torch.randn = given_randn
    out = open(sys.argv[2], "wb")
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
        compressed = state.iter >= state.start_powerSGD_iter
        hook.powerSGD_hook(state, Bucket(buf, grads)).wait()
        if not compressed:
            out.write(buf.numpy().astype("<f4").tobytes())
            continue
        ncomp = len(calls) // 2
        p_before = [c.reshape(-1) for c in calls[ncomp:]]
        ps = torch.cat(p_before) if p_before else torch.empty(0)
        out.write(ps.numpy().astype("<f4").tobytes())
        if warm:
            out.write(state.q_memory_dict[0].numpy().astype("<f4").tobytes())
        out.write(buf.numpy().astype("<f4").tobytes())
        if use_ef:
            out.write(state.error_dict[0].numpy().astype("<f4").tobytes())
    out.close()
    if drawn != q_draws.size:
        print("hook_ref: %d of %d Q values used" % (drawn, q_draws.size),
              file=sys.stderr)
        os._exit(1)
    os._exit(0)  # skip gloo teardown, which can abort at exit


main()
