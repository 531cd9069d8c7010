"""Error feedback and the compressed all-reduce as rumor.Peer keywords
(`codec=` with algo="allreduce", `ef=`): two peers end each step with
the mean of their top-k messages, the memory carrying what was dropped
(checked against a torch computation of p = g + e, topk(p), e = p -
topk(p)); misapplied memories are refused as by `rumor node`."""
import pytest
import torch

import rumor
from conftest import run_nodes

K = 2


def _grads(i, step):
    g = torch.Generator().manual_seed(100 * step + i)
    return torch.randn(12, generator=g)


def _topk(p):
    keep = torch.zeros_like(p)
    idx = p.abs().topk(K).indices
    keep[idx] = p[idx]
    return keep


def test_allreduce_topk_with_ef__mean_of_error_fed_topk(local2):
    topo, keys = local2
    steps = 3

    def node(i):
        t = torch.zeros(12)
        out = []
        with rumor.Peer(topology=topo, node_id=i, key=keys[i],
                        algo="allreduce", codec=f"topk:k={K}",
                        ef="ef") as p:
            for s in range(steps):
                t.copy_(_grads(i, s))
                p.gossip([t])
                out.append(t.clone())
        return out

    got = run_nodes([lambda: node(0), lambda: node(1)])
    e = [torch.zeros(12), torch.zeros(12)]
    for s in range(steps):
        sent = []
        for i in range(2):
            q = _grads(i, s) + e[i]
            sent.append(_topk(q))
            e[i] = q - sent[i]
        want = (sent[0] + sent[1]) / 2
        assert torch.equal(got[0][s], got[1][s])
        assert torch.allclose(got[0][s], want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("kw,says", [
    (dict(algo="choco", ef="ef"),
     "--ef ef does not apply to --algo choco: its public copies"),
    (dict(algo="allreduce", ef="ef-decay:0.7"),
     "it needs a codec (--codec)"),
    (dict(algo="dpsgd", ef="dgc:0.9"),
     "--ef dgc:0.9 does not apply to --algo dpsgd"),
])
def test_misapplied_ef__refused_as_by_rumor_node(local2, kw, says):
    topo, keys = local2
    with pytest.raises(rumor.RumorError) as e:
        rumor.Peer(topology=topo, node_id=0, key=keys[0], **kw)
    assert says in str(e.value)
