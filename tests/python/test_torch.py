"""rumor.torch.GossipModel: the exchange overlapped with the gradient
gives the reference loop's numbers, buffers are handled as documented,
gradient algorithms average gradients in buckets during backward (the
same numbers as one exchange at its end), and the peer's state travels
in state_dict (nodes as threads of this process, each with its own
transport on loopback; the launcher test runs it in real processes)."""
import copy
import logging
import shutil

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


def train_wrapped(topo, keys, i, algo, overlap=True, module=None,
                  stats=None, **options):
    module = make_model() if module is None else module
    model = rumor.torch.GossipModel(module, topology=topo,
                                    node_id=i, key=keys[i], algo=algo,
                                    seed=1, overlap=overlap, **options)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for t in range(STEPS):
        x, y = batch(i, t)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.finish()
    out = flat(model.module)
    if stats is not None:
        stats[i] = (model.peer.buckets, model.peer.metrics())
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


def sgd_reference(module, nodes, uses=None):
    """Single-process SGD on the union of the nodes' batches: what
    data-parallel SGD with exactly averaged gradients computes."""
    opt = torch.optim.SGD(module.parameters(), lr=LR)
    for t in range(STEPS):
        opt.zero_grad()
        for i in range(nodes):
            x, y = batch(i, t)
            out = module(x) if uses is None else module(x, uses(i))
            (torch.nn.functional.cross_entropy(out, y) / nodes).backward()
        opt.step()
    return flat(module)


# a bucket per parameter: 4 buckets
TINY_MB = 1e-6


@pytest.mark.parametrize("cap_mb", [25, TINY_MB])
def test_gossip_model__allreduce__every_node_same_model(ring, cap_mb):
    """Gradient exchange: the gradients are averaged (in one bucket, or
    one per parameter), so every node takes the same step from the same
    model."""
    topo, keys = ring
    got = run_nodes([lambda i=i: train_wrapped(topo, keys, i, "allreduce",
                                               bucket_cap_mb=cap_mb)
                     for i in range(NODES)])
    for g in got[1:]:
        assert torch.equal(g, got[0])
    # and that step is the full-batch SGD step on the union of the data
    want = sgd_reference(make_model(), NODES)
    assert torch.allclose(got[0], want, rtol=0, atol=1e-5)


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


GRADIENT_ALGOS = [("allreduce", {}),
                  ("powersgd", {"rank": 1}),
                  ("allreduce", {"codec": "topk:ratio=0.25", "ef": "ef"}),
                  ("allreduce", {"codec": "qsgd:bits=4"})]


@pytest.mark.parametrize("algo,options", GRADIENT_ALGOS,
                         ids=["allreduce", "powersgd", "topk-ef", "qsgd"])
def test_gossip_model__buckets__same_bits_as_one_exchange(local2, algo,
                                                          options):
    """A bucket per parameter, exchanged during backward, gives the bits
    of one exchange at its end (2 nodes: the ring's sums do not depend on
    its chunks; PowerSGD's Q and the error memories are per tensor, and
    PowerSGD's Q and QSGD's rounding are drawn from the whole model's
    streams), and the buckets really travel apart: a step sends 4 times
    the frames."""
    topo, keys = local2
    stats = {True: {}, False: {}}
    got = [run_nodes([lambda i=i: train_wrapped(
        topo, keys, i, algo, overlap=overlap, bucket_cap_mb=TINY_MB,
        stats=stats[overlap], **options) for i in range(2)])
        for overlap in (True, False)]
    for g, w in zip(*got):
        assert torch.equal(g, w), (g - w).abs().max()
    assert torch.equal(got[0][0], got[0][1])
    assert [stats[True][i][0] for i in range(2)] == [4, 4]
    assert [stats[False][i][0] for i in range(2)] == [0, 0]
    frames = [stats[o][0][1]["gossip_frames_sent"] for o in (True, False)]
    assert frames[0] == 4 * frames[1] > 0, frames


@pytest.mark.parametrize("algo,options", GRADIENT_ALGOS[:2],
                         ids=["allreduce", "powersgd"])
def test_gossip_model__buckets_4_nodes__one_exchange_within_rounding(
        ring, algo, options):
    """With 4 nodes the ring cuts its chunks from each bucket, so an
    element's 4 terms may be summed in another order: after 30 steps the
    models differ by float32 roundings (measured: 3e-9 all-reduce, 2e-7
    PowerSGD, whose orthogonalization and error memory carry them on),
    and every node still holds the same bits."""
    topo, keys = ring
    got = [run_nodes([lambda i=i: train_wrapped(
        topo, keys, i, algo, overlap=overlap, bucket_cap_mb=TINY_MB,
        **options) for i in range(NODES)]) for overlap in (True, False)]
    assert all(torch.equal(g, got[0][0]) for g in got[0])
    assert torch.allclose(got[0][0], got[1][0], rtol=0, atol=1e-6), \
        (got[0][0] - got[1][0]).abs().max()


class Branches(torch.nn.Module):
    """A parameter (extra) that some nodes use and others do not."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(6, 8).double()
        self.extra = torch.nn.Linear(8, 8).double()
        self.last = torch.nn.Linear(8, 3).double()
        self.use_extra = False

    def forward(self, x, use_extra=None):
        h = torch.tanh(self.first(x))
        if self.use_extra if use_extra is None else use_extra:
            h = h + self.extra(h)
        return self.last(h)


def test_gossip_model__unused_parameter__buckets_complete(local2):
    """Node 1 never uses `extra`: its hooks never run there, so its
    buckets go at the end of backward with zero gradients, while node 0
    exchanges them during backward; both get the average of the two
    nodes' gradients, as single-process SGD on both batches computes."""
    topo, keys = local2

    mods = [Branches() for _ in range(4)]  # here: torch's seed is global
    mods[0].use_extra = True
    got = run_nodes([lambda i=i: train_wrapped(
        topo, keys, i, "allreduce", module=mods[i], bucket_cap_mb=TINY_MB)
        for i in range(2)])
    assert torch.equal(got[0], got[1])
    want = sgd_reference(Branches(), 2, uses=lambda i: i == 0)
    assert torch.allclose(got[0], want, rtol=0, atol=1e-5), \
        (got[0] - want).abs().max()
    unused = run_nodes([lambda i=i: train_wrapped(
        topo, keys, i, "allreduce", module=mods[2 + i],
        bucket_cap_mb=TINY_MB) for i in range(2)])
    start = flat(Branches())
    n_first = sum(p.numel() for p in Branches().first.parameters())
    n_extra = sum(p.numel() for p in Branches().extra.parameters())
    extra = slice(n_first, n_first + n_extra)  # used by no node: unmoved
    assert torch.equal(unused[0][extra], start[extra])


def test_peer_buckets__out_of_order_or_bad_ranges__refused(local2):
    topo, keys = local2
    peer = rumor.Peer(topology=topo, node_id=0, key=keys[0],
                      algo="allreduce")
    peer.register([torch.zeros(3), torch.zeros(4), torch.zeros(5)])
    for bad in ([(0, 2)], [(0, 2), (1, 2)], [(0, 1), (1, 0), (1, 2)],
                [(0, 3), (3, 1)]):
        with pytest.raises(rumor.RumorError, match="every tensor once"):
            peer.set_buckets(bad)
    peer.set_buckets([(2, 1), (0, 2)])
    assert peer.buckets == 2
    with pytest.raises(rumor.RumorError, match="in order"):
        peer.gossip_bucket(1)
    peer.close()
    gossip = rumor.Peer(topology=topo, node_id=1, key=keys[1], algo="dpsgd")
    gossip.register([torch.zeros(3)])
    with pytest.raises(rumor.RumorError, match="exchange it whole"):
        gossip.set_buckets([(0, 1)])
    gossip.close()


def test_gossip_model__buckets__state_dict_round_trip(local2):
    """PowerSGD's state (warm-start Q, error memories) per bucket travels
    in state_dict; a wrapper without buckets is told why it cannot load
    it."""
    topo, keys = local2

    def node(i):
        model = rumor.torch.GossipModel(make_model(), topology=topo,
                                        node_id=i, key=keys[i],
                                        algo="powersgd", seed=1,
                                        bucket_cap_mb=TINY_MB)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        for t in range(3):
            x, y = batch(i, t)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        state = model.state_dict()
        model.close()
        return state

    state = run_nodes([lambda i=i: node(i) for i in range(2)])[1]

    def fresh(**options):
        return rumor.torch.GossipModel(make_model(), topology=topo,
                                       node_id=1, key=keys[1],
                                       algo="powersgd", seed=1, **options)

    same = fresh(bucket_cap_mb=TINY_MB)
    same.load_state_dict(copy.copy(state))
    assert same.peer.step == 3 and same.peer.buckets == 4
    again = {}
    same._save_to_state_dict(again, "", False)
    assert again["rumor_peer"]["state"] == state["rumor_peer"]["state"]
    same.peer.close()
    whole = fresh(overlap=False)
    with pytest.raises(rumor.RumorError, match="saved with buckets"):
        whole.load_state_dict(copy.copy(state))
    whole.peer.close()


def test_gossip_model__closed__module_wrapped_again(tmp_path):
    """close() removes the gradient hooks (both kinds): a module wrapped
    again trains under its new wrapper alone, while the old wrappers'
    hooks would restart their closed peers on a topology now gone."""
    mods = [make_model() for _ in range(2)]
    for overlap in (True, False):
        d = tmp_path / str(overlap)
        topo = rumor.topology.local("ring:2", str(d))
        keys = [str(d / "keys" / f"node-{i}") for i in range(2)]
        run_nodes([lambda i=i: train_wrapped(
            topo, keys, i, "allreduce", module=mods[i], overlap=overlap,
            bucket_cap_mb=TINY_MB) for i in range(2)])
        shutil.rmtree(d)
    topo = rumor.topology.local("ring:2", str(tmp_path / "again"))
    keys = [str(tmp_path / "again" / "keys" / f"node-{i}") for i in range(2)]
    got = run_nodes([lambda i=i: train_wrapped(
        topo, keys, i, "allreduce", module=mods[i], bucket_cap_mb=TINY_MB)
        for i in range(2)])
    assert torch.equal(got[0], got[1])


def test_joiner_state__adam_state_dict__read_back_as_saved():
    """The state a member sends a joiner (rumor.torch._pack) reads back
    (with torch.load's weights_only reader) as the state_dicts it came
    from: tuples, integer keys, floats, tensors; a joiner's Adam then
    takes the same step as the member's."""
    torch.manual_seed(3)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.99))
    net(torch.randn(4, 3)).sum().backward()
    opt.step()
    blob = rumor.torch._pack({"module": net.state_dict(),
                              "optimizer": opt.state_dict()})
    got = rumor.torch._unpack(blob)
    joiner = torch.nn.Linear(3, 2)
    joiner.load_state_dict(got["module"])
    joiner_opt = torch.optim.Adam(joiner.parameters())
    joiner_opt.load_state_dict(got["optimizer"])
    assert joiner_opt.state_dict()["param_groups"] == \
        opt.state_dict()["param_groups"]
    for net_, opt_ in ((net, opt), (joiner, joiner_opt)):
        opt_.zero_grad()
        net_(torch.ones(4, 3)).sum().backward()
        opt_.step()
    for a, b in zip(net.parameters(), joiner.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("cut", [0, 8, 50, -1])
def test_joiner_state__cut_or_garbage__raises(cut):
    blob = rumor.torch._pack({"module": torch.nn.Linear(3, 2).state_dict(),
                              "optimizer": None})
    bad = blob[:cut] if cut >= 0 else b"\xff" * len(blob)
    with pytest.raises(Exception):
        rumor.torch._unpack(bad)
