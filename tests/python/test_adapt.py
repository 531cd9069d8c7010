"""Adaptive compression through the Peer API (issue #12,
docs/adaptive.md): the caller's time between two gossip() calls is the
compute time the link budgets aim at, and PowerSGD's adaptive rank is
reported in the metrics lines."""
import json

import torch

import rumor
from conftest import run_nodes


def _rows(mdir, i):
    return [json.loads(line) for line in open(mdir / f"node-{i}.jsonl")]


def test_peer_adapt__comm_share__budget_from_the_callers_compute(local2,
                                                                 tmp_path):
    """With adapt-density 1e-6 the budget without a compute time would be
    under one byte (reported as 0): a budget of a byte or more can only
    come from the link estimate times the compute time the peer fed."""
    topo, keys = local2
    mdir = tmp_path / "metrics"

    def node(i):
        w = [torch.randn(64, 32, generator=torch.Generator().manual_seed(i))]
        x = torch.randn(256, 256)
        with rumor.Peer(topology=topo, node_id=i, key=keys[i], algo="choco",
                        codec="qsgd:bits=4", gamma=0.5, adapt="rule",
                        comm_share=0.5, adapt_density=1e-6,
                        metrics_dir=str(mdir)) as peer:
            for _ in range(8):
                for _ in range(4):  # the caller's compute
                    x = torch.tanh(x @ x) / 16
                peer.gossip(w)
                peer.report(loss=float(x.abs().mean()))
        return True
    run_nodes([lambda: node(0), lambda: node(1)])
    for i in range(2):
        rows = _rows(mdir, i)
        assert len(rows) == 8
        links = rows[-1]["adapt"]
        assert len(links) == 1 and links[0]["peer"] == 1 - i
        assert links[0]["rate_bytes_s"] > 0
        assert links[0]["budget"] >= 1
        assert rows[0]["adapt"][0]["budget"] == 0  # no compute time yet


def test_peer_adapt__powersgd_rule__rank_in_metrics_same_on_both(local2,
                                                                 tmp_path):
    """A tight error budget raises PowerSGD's rank; both peers report the
    same rank and error at every step (the rule reads all-reduced sums)."""
    topo, keys = local2
    mdir = tmp_path / "metrics"

    def node(i):
        g = torch.Generator().manual_seed(10 + i)
        base = torch.randn(48, 8, generator=torch.Generator().manual_seed(3))
        mix = torch.randn(8, 40, generator=torch.Generator().manual_seed(4))
        with rumor.Peer(topology=topo, node_id=i, key=keys[i],
                        algo="powersgd", rank=1, adapt="rule",
                        adapt_error=0.05, adapt_rank_max=4,
                        metrics_dir=str(mdir)) as peer:
            w = [torch.zeros(48, 40)]
            for _ in range(10):
                w[0].copy_(base @ mix + 0.01 * torch.randn(48, 40,
                                                           generator=g))
                peer.gossip(w)
                peer.report()
        return True
    run_nodes([lambda: node(0), lambda: node(1)])
    a, b = _rows(mdir, 0), _rows(mdir, 1)
    assert len(a) == len(b) == 10
    assert [r["adapt_rank"] for r in a] == [r["adapt_rank"] for r in b]
    ranks = [r["adapt_rank"]["rank"] for r in a]
    assert ranks[0] == 1 and ranks[-1] == 4
    assert ranks == sorted(ranks)
