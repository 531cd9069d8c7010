"""PowerSGD's options (PyTorch PowerSGDState's names) and PowerGossip's
iterations and warm_start as rumor.Peer keywords and `rumor sim train`
options: they reach the run, and misapplied ones are refused as by
`rumor node`."""
import ctypes
import os
import subprocess

import numpy as np
import pytest
import torch

import rumor
from conftest import ROOT, run_nodes
from rumor._lib import lib

RUMOR_BIN = os.environ.get("RUMOR_BIN",
                           os.path.join(ROOT, "build", "bin", "rumor"))


def _pair(topo, keys, make, **kw):
    """Two peers, one gossip() each; returns (tensors, metrics) per node."""
    def node(i):
        tensors = make(i)
        with rumor.Peer(topology=topo, node_id=i, key=keys[i], **kw) as p:
            p.gossip(tensors)
            return tensors, p.metrics()
    return run_nodes([lambda: node(0), lambda: node(1)])


def _matrix(i):
    return [torch.randn(8, 6, generator=torch.Generator().manual_seed(i))]


def test_start_powerSGD_iter__first_step_is_the_exact_mean(local2):
    topo, keys = local2
    mean = (_matrix(0)[0] + _matrix(1)[0]) / 2
    plain = _pair(topo, keys, _matrix, algo="powersgd",
                  start_powerSGD_iter=1)
    for (t,), _ in plain:
        assert torch.allclose(t, mean, rtol=1e-6, atol=1e-6)
    compressed = _pair(topo, keys, _matrix, algo="powersgd", rank=1)
    for (t,), _ in compressed:  # rank 1: not the mean
        assert not torch.allclose(t, mean, rtol=1e-3, atol=1e-3)
        assert torch.linalg.matrix_rank(t).item() == 1


def _matrix_32x24(i):
    return [torch.randn(32, 24, generator=torch.Generator().manual_seed(i))]


def test_no_rank__powersgd_runs_at_rank_4(local2):
    """No rank: the C default for powersgd, 4 (docs/gossip.md, "PowerSGD
    defaults"), as if given: a 32 x 24 matrix ((32 + 24) 4 x 2 < 768:
    compressed) comes back as the same rank-4 approximation."""
    topo, keys = local2
    default = _pair(topo, keys, _matrix_32x24, algo="powersgd")
    four = _pair(topo, keys, _matrix_32x24, algo="powersgd", rank=4)
    for ((d,), md), ((f,), mf) in zip(default, four):
        assert torch.equal(d, f)
        assert md["gossip_bytes_sent"] == mf["gossip_bytes_sent"]
        assert torch.linalg.matrix_rank(d).item() == 4


def test_one_sided_and_the_rest__reach_the_run(local2):
    topo, keys = local2
    out = _pair(topo, keys, _matrix, algo="powersgd", rank=2,
                one_sided=True, iterations=3, min_compression_rate=1,
                warm_start=False, orthogonalization_epsilon=1e-8,
                batch_tensors_with_same_shape=False)
    (a,), ma = out[0]
    (b,), _ = out[1]
    assert torch.equal(a, b)  # the same approximation on both nodes
    mean = (_matrix(0)[0] + _matrix(1)[0]) / 2
    assert not torch.allclose(a, mean, rtol=1e-3, atol=1e-3)
    # three averaged products (Q, P, Q: 12 + 16 + 12 floats) against the
    # hook's two (P, Q: 16 + 12)
    hook = _pair(topo, keys, _matrix, algo="powersgd", rank=2)
    assert ma["gossip_bytes_sent"] > hook[0][1]["gossip_bytes_sent"]


@pytest.mark.parametrize("kw,says", [
    (dict(algo="dpsgd", warm_start=False),
     "--warm-start does not apply to --algo dpsgd"),
    (dict(algo="powersgd", iterations=2),
     "--iterations applies to --algo powersgd with --one-sided"),
    (dict(algo="powersgd", one_sided=True, use_error_feedback=False),
     "--one-sided needs --use-error-feedback"),
])
def test_misapplied__refused_as_by_rumor_node(local2, kw, says):
    topo, keys = local2
    with pytest.raises(rumor.RumorError) as e:
        rumor.Peer(topology=topo, node_id=0, key=keys[0], **kw)
    assert says in str(e.value)


def test_powergossip_iterations__that_many_messages_per_step(local2):
    topo, keys = local2
    one = _pair(topo, keys, lambda i: [torch.full((6, 6), float(i))],
                algo="powergossip")
    three = _pair(topo, keys, lambda i: [torch.full((6, 6), float(i))],
                  algo="powergossip", iterations=3)
    b1 = one[0][1]["gossip_bytes_sent"]
    b3 = three[0][1]["gossip_bytes_sent"]
    assert b3 == 3 * b1


class _Rng(ctypes.Structure):  # struct rumor_rng
    _fields_ = [("seed", ctypes.c_uint64), ("stream", ctypes.c_uint64),
                ("index", ctypes.c_uint64), ("block", ctypes.c_uint32 * 4),
                ("block_at", ctypes.c_uint64)]


def _normals(seed, stream, n):
    """n standard normals of Rumor's stream (seed, stream), as float32."""
    lib.rumor_rng_normal.restype = ctypes.c_double
    rng = _Rng()
    lib.rumor_rng_init(ctypes.byref(rng), ctypes.c_uint64(seed),
                       ctypes.c_uint64(stream))
    return np.array([lib.rumor_rng_normal(ctypes.byref(rng))
                     for _ in range(n)], dtype=np.float32)


def _powergossip_reference(x0, x1, steps, warm, seed):
    """epfml/powergossip's PowerGossip.step on the edge 0-1 of ring:2
    (weight 1/2, gamma 1, rank 1), in numpy float64: iteration t odd
    orthogonalizes q and sends M q, even t the other side; the edge's
    factors start from Rumor's draws of the pair's seed (streams 0 and 1
    of the first matrix) and, without warm start, the factor to
    orthogonalize is drawn afresh before each iteration (stream
    (t << 24) | column, lowrank.h)."""
    lib.rumor_seed_derive.restype = ctypes.c_uint64
    pair = lib.rumor_seed_derive(ctypes.c_uint64(seed), ctypes.c_uint64(0),
                                 ctypes.c_uint64(1))
    n, m = x0.shape
    p = _normals(pair, 0, n).astype(np.float64)
    q = _normals(pair, 1, m).astype(np.float64)
    x0, x1 = x0.astype(np.float64), x1.astype(np.float64)
    for t in range(1, steps + 1):
        d = x1 - x0  # from the higher id to the lower
        if t % 2:
            if not warm:
                q = _normals(pair, t << 24, m).astype(np.float64)
            q = q / (np.linalg.norm(q) + 1e-8)
            p = d @ q
        else:
            if not warm:
                p = _normals(pair, t << 24, n).astype(np.float64)
            p = p / (np.linalg.norm(p) + 1e-8)
            q = d.T @ p
        move = 0.5 * np.outer(p, q)
        x0, x1 = x0 + move, x1 - move
    return x0, x1


@pytest.mark.parametrize("warm", [True, False])
def test_powergossip_warm_start__both_ends_follow_the_reference(local2, warm):
    topo, keys = local2
    start = [_matrix(i)[0].numpy().copy() for i in range(2)]

    def node(i):
        x = [torch.from_numpy(start[i].copy())]
        with rumor.Peer(topology=topo, node_id=i, key=keys[i],
                        algo="powergossip", seed=5, warm_start=warm) as p:
            for _ in range(3):
                p.gossip(x)
        return x[0].numpy()
    got = run_nodes([lambda: node(0), lambda: node(1)])
    want = _powergossip_reference(start[0], start[1], 3, warm, seed=5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    other = _powergossip_reference(start[0], start[1], 3, not warm, seed=5)
    assert not np.allclose(got[0], other[0], rtol=1e-3, atol=1e-3)


def _sim_train(*extra):
    if not os.access(RUMOR_BIN, os.X_OK):
        pytest.fail(f"no rumor binary at {RUMOR_BIN} (set RUMOR_BIN)")
    cmd = [RUMOR_BIN, "sim", "train", "--topology", "ring:4",
           "--workload", "lsq", "--steps", "6", "--every", "2", *extra]
    return subprocess.run(cmd, check=True, capture_output=True,
                          text=True).stdout


def test_sim_train__start_powersgd_iter__runs_as_all_reduce_until_then():
    """Until start_iter PowerSGD is the all-reduce of the gradients, bit
    for bit and byte for byte."""
    allreduce = _sim_train("--algo", "allreduce")
    late = _sim_train("--algo", "powersgd", "--start-powersgd-iter", "6")
    assert late == allreduce
    early = _sim_train("--algo", "powersgd", "--start-powersgd-iter", "2")
    assert early != allreduce
    assert early.splitlines()[1] == allreduce.splitlines()[1]  # step 2
