"""rumor.torch.GossipModel: the exchange overlapped with the gradient
gives the reference loop's numbers, buffers are handled as documented,
gradient algorithms average gradients at the end of backward, and the
peer's state travels in state_dict (nodes as threads of this process; the
launcher test runs it in real processes)."""
import copy
import logging

import pytest

torch = pytest.importorskip("torch")

import rumor  # noqa: E402
import rumor.torch  # noqa: E402
from conftest import run_nodes  # noqa: E402

NODES = 4
STEPS = 30
LR = 0.1


def _template(batchnorm):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(6, 8)]
    if batchnorm:
        layers.append(torch.nn.BatchNorm1d(8))
    layers += [torch.nn.Tanh(), torch.nn.Linear(8, 3)]
    return torch.nn.Sequential(*layers).double()


# made here, not in the node threads: torch's seed is global
TEMPLATES = {False: _template(False), True: _template(True)}


def make_model(batchnorm=False):
    """The same initial model on every node."""
    return copy.deepcopy(TEMPLATES[batchnorm])


def batch(node, step):
    g = torch.Generator().manual_seed(1000 * node + step)
    x = torch.randn(16, 6, generator=g, dtype=torch.float64) + node
    return x, torch.randint(0, 3, (16,), generator=g)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train_wrapped(topo, keys, i, algo, overlap=True, **options):
    model = rumor.torch.GossipModel(make_model(), topology=topo, node_id=i,
                                    key=keys[i], algo=algo, seed=1,
                                    overlap=overlap, **options)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for t in range(STEPS):
        x, y = batch(i, t)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.finish()
    out = flat(model.module)
    model.close()
    return out


def train_reference(topo, keys, i, algo, **options):
    """The reference loop with a plain Peer: the look-ahead (a no-op but
    for step-ahead EF), gradient at x_t, gossip a copy of x_t, then
    x_{t+1} = W x_t - lr g(x_t)."""
    model = make_model()
    params = list(model.parameters())
    copy = [p.detach().clone() for p in params]
    peer = rumor.Peer(topology=topo, node_id=i, key=keys[i], algo=algo,
                      seed=1, **options)
    for t in range(STEPS):
        with torch.no_grad():
            for c, p in zip(copy, params):
                c.copy_(p)
            peer.step_ahead(copy)
            for c, p in zip(copy, params):
                p.copy_(c)
        x, y = batch(i, t)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            peer.gossip(copy)
            for p, c, g in zip(params, copy, grads):
                p.copy_(c - LR * g)
    peer.close()
    return flat(model)


@pytest.fixture
def ring(tmp_path):
    topo = rumor.topology.local(f"ring:{NODES}", str(tmp_path))
    return topo, [str(tmp_path / "keys" / f"node-{i}") for i in range(NODES)]


@pytest.mark.parametrize("overlap", [True, False])
def test_gossip_model__dpsgd__reference_loop_numbers(ring, overlap):
    topo, keys = ring
    got = run_nodes([lambda i=i: train_wrapped(topo, keys, i, "dpsgd",
                                               overlap) for i in range(NODES)])
    want = run_nodes([lambda i=i: train_reference(topo, keys, i, "dpsgd")
                      for i in range(NODES)])
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=0, atol=1e-10), (g - w).abs().max()


SAEF = {"delta_codec": "qsgd:bits=4", "ef_alpha": 1, "period": 2}


def test_gossip_model__step_ahead_ef__reference_loop_numbers(ring):
    """Local SGD with compressed deltas and step-ahead error feedback: the
    gradient is taken at the look-ahead point, in the wrapper as in the
    reference loop (rumor.Peer.step_ahead), which `rumor node` runs."""
    topo, keys = ring
    got = run_nodes([lambda i=i: train_wrapped(topo, keys, i, "localsgd",
                                               **SAEF)
                     for i in range(NODES)])
    want = run_nodes([lambda i=i: train_reference(topo, keys, i, "localsgd",
                                                  **SAEF)
                      for i in range(NODES)])
    plain = run_nodes([lambda i=i: train_reference(
        topo, keys, i, "localsgd", delta_codec="qsgd:bits=4", period=2)
        for i in range(NODES)])
    for g, w, p in zip(got, want, plain):
        assert torch.allclose(g, w, rtol=0, atol=1e-10), (g - w).abs().max()
        assert not torch.allclose(w, p, rtol=0, atol=1e-6)  # it looked ahead


def test_peer_looks_ahead__only_step_ahead_ef(local2):
    topo, keys = local2
    x = torch.zeros(8)
    saef = rumor.Peer(topology=topo, node_id=0, key=keys[0], algo="localsgd",
                      **SAEF)
    saef.register([x])
    plain = rumor.Peer(topology=topo, node_id=1, key=keys[1], algo="dpsgd")
    plain.register([torch.zeros(8)])
    assert saef.looks_ahead and not plain.looks_ahead
    saef.close()
    plain.close()


def test_gossip_model__allreduce__every_node_same_model(ring):
    """Gradient exchange: the gradients are averaged at the end of
    backward, so every node takes the same step from the same model."""
    topo, keys = ring
    got = run_nodes([lambda i=i: train_wrapped(topo, keys, i, "allreduce")
                     for i in range(NODES)])
    for g in got[1:]:
        assert torch.equal(g, got[0])
    # and that step is the full-batch SGD step on the union of the data
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for t in range(STEPS):
        opt.zero_grad()
        for i in range(NODES):
            x, y = batch(i, t)
            (torch.nn.functional.cross_entropy(model(x), y) / NODES).backward()
        opt.step()
    assert torch.allclose(got[0], flat(model), rtol=0, atol=1e-5)


def train_batchnorm(topo, keys, i, buffers):
    model = rumor.torch.GossipModel(make_model(batchnorm=True),
                                    topology=topo, node_id=i, key=keys[i],
                                    algo="dpsgd", seed=1, buffers=buffers)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for t in range(STEPS):
        x, y = batch(i, t)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    model.finish()
    bn = model.module[1]
    out = (bn.running_mean.clone(), int(bn.num_batches_tracked))
    model.close()
    return out


@pytest.mark.parametrize("buffers", ["average", "local"])
def test_gossip_model__batchnorm__buffers_as_documented(ring, buffers,
                                                        caplog):
    topo, keys = ring
    with caplog.at_level(logging.WARNING, logger="rumor"):
        got = run_nodes([lambda i=i: train_batchnorm(topo, keys, i, buffers)
                         for i in range(NODES)])
    means = torch.stack([m for m, _ in got])
    spread = (means.max(0).values - means.min(0).values).max().item()
    # the nodes' data are shifted by their id: local statistics differ by
    # about that much, averaged ones agree
    if buffers == "average":
        assert spread < 0.3, spread
    else:
        assert spread > 1.0, spread
    assert all(n == STEPS for _, n in got)  # integer buffers stay local
    assert "integer buffers stay local to each node: 1.num_batches_tracked" \
        in caplog.text


def test_gossip_model__state_dict__carries_peer_state(ring):
    topo, keys = ring

    def node(i):
        model = rumor.torch.GossipModel(make_model(), topology=topo,
                                        node_id=i, key=keys[i], algo="dpsgd",
                                        seed=1)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        for t in range(5):
            x, y = batch(i, t)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        state = model.state_dict()
        step = model.peer.step
        model.close()
        return state, step

    got = run_nodes([lambda i=i: node(i) for i in range(NODES)])
    state, step = got[1]
    assert state["rumor_peer"]["node_id"] == 1 and step == 5
    # a new wrapper (its peer not started) takes the model and the step
    fresh = rumor.torch.GossipModel(make_model(), topology=topo, node_id=1,
                                    key=keys[1], algo="dpsgd", seed=1)
    fresh.load_state_dict(state)
    assert fresh.peer.step == 5
    assert torch.equal(fresh.module[0].weight, state["module.0.weight"])
    fresh.peer.close()
