"""Stale exchanges under the binding (stale=S, node/peer.c over
node/stale.c): rumor.Peer's gossip() lands the exchange of step t at the
gossip() of step t + S, bit for bit the recurrence of docs/gossip.md
("Stale exchanges"), and flush() lands the rest; rumor.torch.GossipModel
with localsgd and stale trains as well as without in real processes; what
cannot run stale is refused with the reason."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import rumor
from conftest import ROOT, run_nodes

RUMOR_BIN = os.path.abspath(os.environ.get(
    "RUMOR_BIN", os.path.join(ROOT, "build", "bin", "rumor")))
NODES, NUMEL, STEPS, PERIOD, STALE = 4, 11, 14, 4, 2
DILOCO = dict(algo="localsgd", period=PERIOD, outer_lr=0.7,
              outer_momentum=0.9)


def _initial(i):
    return np.sin(0.7 * np.arange(NUMEL) + 1.3 * i).astype(np.float32)


def _inner(i, t):
    """The caller's inner step t of node i (any fixed function)."""
    return (0.05 * np.cos(0.3 * (t + np.arange(NUMEL)) + i)).astype(
        np.float32)


def _ring_mean(xs):
    """gossip/ring.c's mean: chunk c summed from node c on, then / n."""
    mean = np.empty(NUMEL, np.float32)
    for c in range(NODES):
        lo, hi = c * NUMEL // NODES, (c + 1) * NUMEL // NODES
        s = xs[c][lo:hi].copy()
        for k in range(1, NODES):
            s = xs[(c + k) % NODES][lo:hi] + s
        mean[lo:hi] = s / np.float32(NODES)
    return mean


def _reference(stale):
    """DiLoCo's synchronization of step t on snapshots s_t, landing at
    step t + stale as x += G_t - s_t (the last after the last step)."""
    x = [_initial(i) for i in range(NODES)]
    anchor = velocity = None
    lr, mu = np.float32(0.7), np.float32(0.9)
    pending = None
    for t in range(STEPS):
        x = [x[i] + _inner(i, t) for i in range(NODES)]
        if pending is not None and pending[0] + stale <= t:
            x = [x[i] + (pending[2] - pending[1][i]) for i in range(NODES)]
            pending = None
        if t % PERIOD == 0:
            snap = [v.copy() for v in x]
            mean = _ring_mean(snap)
            if anchor is None:
                g, velocity = mean, np.zeros(NUMEL, np.float32)
            else:
                d = anchor - mean
                velocity = mu * velocity + d
                g = anchor - lr * (d + mu * velocity)
            anchor = g
            pending = (t, snap, g)
    if pending is not None:
        x = [x[i] + (pending[2] - pending[1][i]) for i in range(NODES)]
    return x


def _peer_run(topo, keys, i, seen, dtype):
    x = _initial(i).astype(dtype)
    with rumor.Peer(topology=topo, node_id=i, key=keys[i], stale=STALE,
                    **DILOCO) as peer:
        for t in range(STEPS):
            x += _inner(i, t)
            peer.gossip([x])
            if i == 0 and t == 0:
                seen["in_flight"] = peer.in_flight
                try:
                    peer.state_dict()
                except RuntimeError as e:
                    seen["refused"] = str(e)
            if i == 0 and t == STALE:
                seen["state"] = peer.state_dict()
        peer.flush()
        assert not peer.in_flight
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_peer_localsgd_stale2__reference_recurrence__bit_identical(tmp_path,
                                                                   dtype):
    """float64 goes through the staging: a float32 copy in, the landing
    on it, written back; the float64 sum of two floats is exact, so it
    rounds as the float32 sum does and the bits are the same."""
    topo = rumor.topology.local(f"ring:{NODES}", str(tmp_path))
    keys = [str(tmp_path / "keys" / f"node-{i}") for i in range(NODES)]
    seen = {}
    got = run_nodes([lambda i=i: _peer_run(topo, keys, i, seen, dtype)
                     for i in range(NODES)])
    got = [g.astype(np.float32) for g in got]
    want, other = _reference(STALE), _reference(1)
    assert any((w != o).any() for w, o in zip(want, other))  # S acts
    for i in range(NODES):
        assert got[i].tobytes() == want[i].tobytes(), (i, got[i], want[i])
    # a checkpoint waits for a step with nothing in flight
    assert "a stale exchange is in flight" in seen.get("refused", ""), seen
    assert seen["state"]["state"][:8] == b"RUMORPS1"


def test_peer_stale__what_cannot_run_stale__refused_with_reason(tmp_path):
    topo = rumor.topology.local("ring:2", str(tmp_path))
    key = str(tmp_path / "keys" / "node-0")
    x = np.zeros(4, np.float32)
    with pytest.raises(rumor.RumorError, match="needs the model exchange"):
        rumor.Peer(topology=topo, node_id=0, key=key, algo="powersgd",
                   stale=1).register([x])
    with pytest.raises(rumor.RumorError,
                       match=r"stale \(5\) must be at most period \(4\)"):
        rumor.Peer(topology=topo, node_id=0, key=key, algo="localsgd",
                   period=4, stale=5).register([x])
    with pytest.raises(rumor.RumorError, match="join: a joiner"):
        rumor.Peer(topology=topo, node_id=0, key=key, algo="localsgd",
                   stale=1, join=True).register([x])
    with rumor.Peer(topology=topo, node_id=0, key=key, algo="localsgd",
                    stale=1) as peer:
        peer.register([x])
        assert peer.stale == 1
        with pytest.raises(rumor.RumorError, match="average\\(\\) with"):
            peer.average()
        with pytest.raises(rumor.RumorError, match="stale exchanges run"):
            peer.set_buckets([(0, 1)])


def _launch_stale(tmp_path, stale, steps):
    pytest.importorskip("torch")
    if not os.access(RUMOR_BIN, os.X_OK):
        pytest.fail(f"no rumor binary at {RUMOR_BIN} (set RUMOR_BIN)")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    if env.get("RUMOR_LIB"):
        env["RUMOR_LIB"] = os.path.abspath(env["RUMOR_LIB"])
    run = tmp_path / f"stale{stale}"
    run.mkdir()
    worker = os.path.join(ROOT, "tests", "data", "launch", "stale_worker.py")
    p = subprocess.run(
        [RUMOR_BIN, "launch", "--nodes", "4", "--algo", "localsgd",
         "--period", "4", "--outer-lr", "0.7", "--outer-momentum", "0.9",
         "--stale", str(stale), "--", sys.executable, worker, str(steps)],
        cwd=run, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return {i: json.loads((run / f"result-{i}.json").read_text())
            for i in range(4)}


def test_gossip_model_localsgd_stale2__four_processes__trains_as_stale0(
        tmp_path):
    steps = 200
    plain = _launch_stale(tmp_path, 0, steps)
    stale = _launch_stale(tmp_path, 2, steps)
    for r in stale.values():  # launch's --stale reached the peers
        assert r["steps"] == steps and r["stale"] == 2, r
        assert not r["in_flight"], r
    loss0 = max(r["loss"] for r in plain.values())
    loss2 = max(r["loss"] for r in stale.values())
    acc0 = min(r["accuracy"] for r in plain.values())
    acc2 = min(r["accuracy"] for r in stale.values())
    print(f"stale 0: loss {loss0:.4f} accuracy {acc0:.3f}; "
          f"stale 2: loss {loss2:.4f} accuracy {acc2:.3f}")
    assert acc0 > 0.6 and acc2 > acc0 - 0.05, (acc0, acc2)  # chance 0.25
    assert loss2 < 1.5 * loss0 + 0.05, (loss0, loss2)
    # the synchronizations keep the nodes together: each within 5 % of
    # their mean (the last inner steps after the last snapshot differ)
    ps = np.array([stale[i]["params"] for i in range(4)])
    mean = ps.mean(0)
    for i in range(4):
        rel = np.linalg.norm(ps[i] - mean) / np.linalg.norm(mean)
        assert rel < 0.05, (i, rel)


def test_peer_stale__stop__every_node_stops_after_the_same_step(tmp_path):
    """stop() travels with the exchanges on the peer's thread; every node
    sees the agreed stop at the gossip() that lands it."""
    topo = rumor.topology.local(f"ring:{NODES}", str(tmp_path))

    def node(i):
        x = np.full(NUMEL, float(i), np.float32)
        with rumor.Peer(topology=topo, node_id=i,
                        key=str(tmp_path / "keys" / f"node-{i}"),
                        stale=STALE, log_level="error", **DILOCO) as peer:
            calls = 0
            while calls < 200:
                x += _inner(i, calls)
                if i == 0 and calls == 10:
                    peer.stop()
                if not peer.gossip([x]):
                    break
                calls += 1
            return calls, peer.step, peer.stopped

    ends = run_nodes([lambda i=i: node(i) for i in range(NODES)])
    assert len(set(ends)) == 1, ends
    calls, step, stopped = ends[0]
    assert stopped and 10 < calls < 200 and step == calls, ends


def test_gossip_model_stale__state_dict__refused_in_flight_saved_after(
        tmp_path):
    """GossipModel with stale: state_dict() raises while a synchronization
    is in flight (its correction is in neither the parameters nor the
    state) and carries the peer's state once it landed; finish() lands
    the last one."""
    torch = pytest.importorskip("torch")
    import rumor.torch
    topo = rumor.topology.local("ring:2", str(tmp_path))

    def node(i):
        torch.manual_seed(0)
        model = rumor.torch.GossipModel(
            torch.nn.Linear(3, 2), topology=topo, node_id=i,
            key=str(tmp_path / "keys" / f"node-{i}"), stale=STALE,
            **DILOCO)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        seen = {}
        for t in range(PERIOD + 1):
            x = torch.full((4, 3), float(i + t))
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if t in (0, STALE):
                try:
                    seen[t] = "rumor_peer" in model.state_dict()
                except RuntimeError as e:
                    seen[t] = str(e)
        in_flight = model.peer.in_flight  # the sync of step PERIOD
        model.finish()
        seen["landed"] = in_flight and not model.peer.in_flight
        model.close()
        return seen

    for seen in run_nodes([lambda i=i: node(i) for i in range(2)]):
        assert "a stale exchange is in flight" in seen[0], seen
        assert seen[STALE] is True and seen["landed"], seen
