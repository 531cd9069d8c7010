"""PowerSGD's options (PyTorch PowerSGDState's names) and PowerGossip's
iterations as rumor.Peer keywords and `rumor sim train` options: they
reach the run, and misapplied ones are refused as by `rumor node`."""
import os
import subprocess

import pytest
import torch

import rumor
from conftest import ROOT, run_nodes

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
    compressed = _pair(topo, keys, _matrix, algo="powersgd")
    for (t,), _ in compressed:  # rank 1: not the mean
        assert not torch.allclose(t, mean, rtol=1e-3, atol=1e-3)
        assert torch.linalg.matrix_rank(t).item() == 1


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
