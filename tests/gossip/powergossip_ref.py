#!/usr/bin/python3
"""A re-implementation of the reference's PowerGossip consensus experiment.

This is NOT the reference's code. It re-implements, in a single process,
the algorithm and the experiment of epfml/powergossip at commit
a1a80cb0c3dc2dace3a73456fd068f21a4b883c9: class PowerGossip and the
function orthogonalize in algorithms.py, the Ring topology in
topologies.py, and GossipProblem ("random" data) with the main loop of
gossip_run.py. The reference runs one MPI process per node; here the n
nodes are simulated in one process, in float32 as the reference does:

  - node i starts from torch.randn(size, size) after torch.manual_seed(42 + i)
    (gossip_run.py: reset_randomness, seed 42 + rank);
  - ring weights 1/3 (self and both neighbours);
  - per edge (a, b), a < b, numpy RandomState(int("0" + str(a) + str(b)))
    draws one seed for p's buffer and one for q's; torch.randn fills them
    (PowerGossip.init_state with seed 0, fill_with_random_values);
  - iteration k (0-based, one per step with num_iterations 1): k = 0 is a
    no-op; odd k swaps the roles of p and q; every edge orthogonalizes p
    (Gram-Schmidt with eps 1e-8), computes q = M^T p (even k) or M q (odd),
    sends it, takes the difference oriented from the higher rank to the
    lower, and applies x += sign * w * diffusion_rate * p q^T (sign -1 when
    self > neighbour); warm start: p and q carry over; with
    --no-warm-start (the reference's warm_start=False, gossip_run.py's
    power_gossip_random) the factor to orthogonalize is first refilled
    from the edge's RandomState, which each end keeps and advances in step
    (one torch seed drawn per iteration k >= 1);
  - error: mean over nodes of ||x_i - mean of the starting x||^2, printed
    relative to step 0; bits: 32 per float sent per node, as the
    reference's num_bits counts (no headers).

Usage: /usr/bin/python3 tests/gossip/powergossip_ref.py [--nodes 8]
       [--size 100] [--rank 1] [--gamma 1.308] [--steps 5000] [--every 100]
       [--no-warm-start]
Prints CSV: step,bits_per_node,rel_error.
"""
import argparse
import sys

import numpy as np
import torch


def gram_schmidt(m, eps=1e-8):
    for i in range(m.shape[1]):
        col = m[:, i:i + 1]
        col /= torch.sqrt(torch.sum(col ** 2)) + eps
        if i + 1 < m.shape[1]:
            rest = m[:, i + 1:]
            rest -= torch.sum(col * rest, dim=0) * col


def fill(rng, size, rank):
    """fill_with_random_values: one torch seed from the edge's rng."""
    seed = rng.randint(1_000_000_000)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return torch.randn(size * rank).view(size, rank)


def edge_rng(a, b):
    return np.random.RandomState(int("0" + str(a) + str(b)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rank", type=int, default=1)
    ap.add_argument("--gamma", type=float, default=1.308)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--no-warm-start", dest="warm", action="store_false")
    args = ap.parse_args()
    n, size, rank = args.nodes, args.size, args.rank
    x = []
    for i in range(n):
        torch.manual_seed(42 + i)
        x.append(torch.randn(size, size))
    target = sum(x) / n

    def error():
        return float(sum(torch.sum((xi - target) ** 2) for xi in x) / n)

    nbrs = [sorted({(i - 1) % n, (i + 1) % n} - {i}) for i in range(n)]
    weight = 1.0 / 3.0
    # Both ends of an edge start from the same factors; each keeps its own
    # copy (they stay equal: both apply the same operations).
    p, q, rngs = {}, {}, {}
    for i in range(n):
        for j in nbrs[i]:
            rngs[i, j] = edge_rng(min(i, j), max(i, j))
            p[i, j] = fill(rngs[i, j], size, rank)  # p's buffer, then q's
            q[i, j] = fill(rngs[i, j], size, rank)
    e0 = error()
    bits = 0
    print("step,bits_per_node,rel_error")
    print(f"0,0,{1.0:.9g}")
    for step in range(1, args.steps + 1):
        k = step - 1
        if k > 0:
            sent = {}
            for i in range(n):
                for j in nbrs[i]:
                    left, right = (q[i, j], p[i, j]) if k % 2 else (p[i, j], q[i, j])
                    if not args.warm:
                        left[:] = fill(rngs[i, j], size, rank)
                    gram_schmidt(left)
                    mat = x[i] if k % 2 else x[i].t()
                    right[:] = mat @ left
                    sent[i, j] = right.clone()
                    bits += 32 * right.numel()
            for i in range(n):
                for j in nbrs[i]:
                    right = p[i, j] if k % 2 else q[i, j]
                    if i > j:
                        right[:] = sent[i, j] - sent[j, i]
                    else:
                        right[:] = sent[j, i] - sent[i, j]
            new = [xi.clone() for xi in x]
            for i in range(n):
                for j in nbrs[i]:
                    sign = -1.0 if i > j else 1.0
                    new[i].add_(p[i, j] @ q[i, j].t(),
                                alpha=sign * weight * args.gamma)
            x = new
        if step % args.every == 0 or step == args.steps or step < 10:
            print(f"{step},{bits / n:.0f},{error() / e0:.9g}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
