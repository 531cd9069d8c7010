"""The ctypes binding: tensors of every accepted dtype gossiped in place
and read back, refused dtypes and layouts, C errors as exceptions with the
C message, codecs, topologies, keys, metrics and checkpoints."""
import os

import numpy as np
import pytest
import torch

import rumor
from conftest import run_nodes

# (make tensor from a float64 numpy array, name); averaging k and k + 2 is
# k + 1: exact in every accepted dtype for small integers
ACCEPTED = [
    (lambda a: torch.tensor(a, dtype=torch.float32), "torch.float32"),
    (lambda a: torch.tensor(a, dtype=torch.float64), "torch.float64"),
    (lambda a: torch.tensor(a, dtype=torch.float16), "torch.float16"),
    (lambda a: torch.tensor(a, dtype=torch.bfloat16), "torch.bfloat16"),
    (lambda a: a.astype(np.float32), "numpy.float32"),
    (lambda a: a.astype(np.float64), "numpy.float64"),
    (lambda a: a.astype(np.float16), "numpy.float16"),
]


def _pair(topo, keys, make_tensors, call="gossip", algo="allreduce", **kw):
    """Two nodes, each with its tensors, one step; returns the tensors."""
    def node(i):
        tensors = make_tensors(i)
        with rumor.Peer(topology=topo, node_id=i, key=keys[i], algo=algo,
                        **kw) as peer:
            getattr(peer, call)(tensors)
            return tensors, peer.metrics()
    return run_nodes([lambda: node(0), lambda: node(1)])


def _ptr(x):
    return x.data_ptr() if isinstance(x, torch.Tensor) else x.ctypes.data


def test_gossip__every_accepted_dtype__averaged_in_place(local2):
    topo, keys = local2
    base = np.arange(12, dtype=np.float64).reshape(3, 4)

    def make(i):
        return [mk(base + 2 * i) for mk, _ in ACCEPTED]

    ptrs = {}

    def make_and_remember(i):
        ts = make(i)
        ptrs[i] = [_ptr(t) for t in ts]
        return ts

    (t0, m0), (t1, _) = _pair(topo, keys, make_and_remember)
    for k, (_, name) in enumerate(ACCEPTED):
        for i, ts in enumerate((t0, t1)):
            got = np.asarray(ts[k].float() if isinstance(ts[k], torch.Tensor)
                             else ts[k], dtype=np.float64)
            np.testing.assert_array_equal(got, base + 1, err_msg=name)
            assert _ptr(ts[k]) == ptrs[i][k], f"{name} was moved"
    assert m0["steps"] == 1 and m0["gossip_bytes_sent"] > 0
    # host tensors: staged without a copy across PCIe
    assert m0["pcie_h2d_bytes"] == 0 and m0["pcie_d2h_bytes"] == 0


@pytest.mark.parametrize("bad", [
    torch.zeros(3, dtype=torch.int32), torch.zeros(3, dtype=torch.int64),
    torch.zeros(3, dtype=torch.uint8), torch.zeros(3, dtype=torch.bool),
    torch.zeros(3, dtype=torch.complex64), np.zeros(3, dtype=np.int32),
    np.zeros(3, dtype=np.complex128), np.zeros(3, dtype=np.uint16)],
    ids=lambda b: str(b.dtype))
def test_register__unsupported_dtype__refused(local2, bad):
    topo, keys = local2
    peer = rumor.Peer(topology=topo, node_id=0, key=keys[0], algo="dpsgd")
    with pytest.raises(TypeError, match="dtype"):
        peer.register([torch.zeros(2), bad])
    peer.close()


def test_register__non_contiguous_or_read_only__refused(local2):
    topo, keys = local2
    peer = rumor.Peer(topology=topo, node_id=0, key=keys[0], algo="dpsgd")
    with pytest.raises(ValueError, match="contiguous"):
        peer.register([torch.zeros(4, 4).t()])
    with pytest.raises(ValueError, match="contiguous"):
        peer.register([np.zeros((4, 4), dtype=np.float32)[:, ::2]])
    ro = np.zeros(4, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        peer.register([ro])
    peer.close()


def test_register__cuda_tensor_without_cuda_build__clear_error(local2):
    if rumor.cuda_built():
        pytest.skip("this librumor.so has CUDA: CUDA tensors are accepted")
    from rumor import _tensors

    class FakeCuda(torch.Tensor):  # a CPU tensor that says it is on cuda
        @property
        def device(self):
            return torch.device("cuda:0")

    t = torch.zeros(3).as_subclass(FakeCuda)
    with pytest.raises(RuntimeError, match="built without CUDA"):
        _tensors.describe(t, 0)


def test_set_stream__host_tensors__refused_with_the_reason(local2):
    """A stream orders copies of CUDA tensors: with host tensors (or a
    librumor without CUDA) one handed in is refused with the C message;
    None, the default, always goes."""
    topo, keys = local2
    with pytest.raises(TypeError, match="stream"):
        rumor.Peer(topology=topo, node_id=0, key=keys[0], stream="fast")
    peer = rumor.Peer(topology=topo, node_id=0, key=keys[0], algo="dpsgd",
                      stream=12345)  # applied at registration
    with pytest.raises(rumor.RumorError) as e:
        peer.register([torch.zeros(3)])
    if rumor.cuda_built():
        assert e.value.errname == "RUMOR_EINVAL"
        assert "none of the peer's tensors is in CUDA memory" in str(e.value)
    else:
        assert e.value.errname == "RUMOR_ENOTSUP"
        assert "built without CUDA" in str(e.value)
    peer.close()
    peer = rumor.Peer(topology=topo, node_id=0, key=keys[0], algo="dpsgd")
    peer.register([torch.zeros(3)])
    peer.set_stream(None)
    assert peer.stream is None
    with pytest.raises(rumor.RumorError, match="set stream"):
        peer.set_stream(12345)
    assert peer.stream is None  # a refused stream is not kept
    peer.close()


def test_options__bad_value__raises_c_message():
    with pytest.raises(rumor.RumorError) as e:
        rumor.Options(lr="fast")
    assert e.value.errname == "RUMOR_EINVAL"
    assert "lr" in str(e.value) and "fast" in str(e.value)
    with pytest.raises(rumor.RumorError, match="no_such_option|unknown"):
        rumor.Options(no_such_option=1)


def test_peer__option_for_another_algorithm__refused_as_by_rumor_node(local2):
    topo, keys = local2
    with pytest.raises(rumor.RumorError, match="rank"):
        rumor.Peer(topology=topo, node_id=0, key=keys[0], algo="dpsgd",
                   rank=2)


def test_register__missing_topology__raises_with_the_file_name(tmp_path):
    missing = str(tmp_path / "missing.topo")
    peer = rumor.Peer(topology=missing, node_id=0, insecure=True,
                      algo="dpsgd")
    with pytest.raises(rumor.RumorError) as e:
        peer.register([torch.zeros(3)])
    assert "missing.topo" in str(e.value)
    assert e.value.errname == "RUMOR_ENOTFOUND"


def test_register__wrong_key__raises_eauth(local2):
    topo, keys = local2
    peer = rumor.Peer(topology=topo, node_id=0, key=keys[1], algo="dpsgd")
    with pytest.raises(rumor.RumorError) as e:
        peer.register([torch.zeros(3)])
    assert e.value.errname == "RUMOR_EAUTH"
    assert "public key" in e.value.message


def test_gossip__other_tensors_after_registration__refused(local2):
    topo, keys = local2
    peer = rumor.Peer(topology=topo, node_id=0, key=keys[0], algo="dpsgd",
                      connect_timeout_ms=200)
    w = torch.zeros(3)
    peer.register([w])
    with pytest.raises(ValueError, match="registered"):
        peer.gossip([torch.zeros(3)])
    peer.close()


def test_gossip__silent_neighbour__times_out_with_tensors_unchanged(local2):
    topo, keys = local2
    peer = rumor.Peer(topology=topo, node_id=0, key=keys[0], algo="dpsgd",
                      connect_timeout_ms=300)
    w = torch.arange(3, dtype=torch.float32)
    with pytest.raises(rumor.RumorError) as e:
        peer.gossip([w])
    assert e.value.errname == "RUMOR_ETIMEDOUT"
    assert torch.equal(w, torch.arange(3, dtype=torch.float32))
    peer.close()


def test_average__powergossip_peer__exact_mean(local2):
    topo, keys = local2
    out = _pair(topo, keys,
                lambda i: [torch.full((4, 3), float(4 * i)),
                           torch.full((5,), float(-2 * i))],
                call="average", algo="powergossip")
    for tensors, _ in out:
        assert torch.equal(tensors[0], torch.full((4, 3), 2.0))
        assert torch.equal(tensors[1], torch.full((5,), -1.0))


def test_checkpoint__restored_peers__continue_bit_identically(local2,
                                                                tmp_path):
    topo, keys = local2
    opts = dict(algo="choco", codec="qsgd:bits=4", gamma=0.5, seed=5)
    rng = np.random.default_rng(0)
    start = [rng.standard_normal((6, 5)).astype(np.float32) for _ in (0, 1)]

    def run(i, steps_before, steps_after, restore):
        model = torch.nn.Linear(5, 6, bias=False)
        with torch.no_grad():
            model.weight.copy_(torch.from_numpy(start[i]))
        peer = rumor.Peer(topology=topo, node_id=i, key=keys[i], **opts)
        path = str(tmp_path / f"ckpt-{i}.pt")
        if restore:
            rumor.checkpoint.load(path, peer, model)
        for _ in range(steps_before):
            peer.gossip(model.parameters())
        if steps_before:
            rumor.checkpoint.save(path, peer, model)
        for _ in range(steps_after):
            peer.gossip(model.parameters())
        peer.close()
        return model.weight.detach().clone()

    straight = run_nodes([lambda: run(0, 3, 2, False),
                          lambda: run(1, 3, 2, False)])
    resumed = run_nodes([lambda: run(0, 0, 2, True),
                         lambda: run(1, 0, 2, True)])
    for a, b in zip(straight, resumed):
        assert torch.equal(a, b)


def test_codec__encode_decode__round_trips_numpy_and_torch():
    x = np.linspace(-3, 3, 1000, dtype=np.float32)
    c = rumor.Codec("fp32")
    np.testing.assert_array_equal(c.decode(c.encode(x), like=x), x)
    t = torch.from_numpy(x.copy())
    h = rumor.Codec("fp16")
    y = h.decode(h.encode(t), like=t)
    assert isinstance(y, torch.Tensor)
    assert torch.equal(y, t.half().float())
    q = rumor.Codec("qsgd:bits=4")
    assert q.encode(x, seed=3) == q.encode(x, seed=3)
    size, exact = q.encoded_size(x.size)
    assert len(q.encode(x, seed=3)) <= size
    out = np.empty_like(x)
    assert q.decode(q.encode(x, seed=3), out=out) is out


def test_codec__bad_spec_or_payload__raises_c_message():
    with pytest.raises(rumor.RumorError, match="nosuchcodec"):
        rumor.Codec("nosuchcodec")
    c = rumor.Codec("fp16")
    x = np.ones(10, dtype=np.float32)
    with pytest.raises(rumor.RumorError) as e:
        c.decode(c.encode(x)[:-3], like=x)
    assert e.value.errname == "RUMOR_EPROTO"
    with pytest.raises(TypeError, match="float32"):
        c.encode(np.ones(3, dtype=np.float64))


def test_topology__generate_check_and_file_round_trip(tmp_path):
    t = rumor.topology.generate("ring", 8)
    assert t.nodes == 8 and t.edges() == 8 and t.doubly_stochastic()
    w = t.matrix()
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    # ring of 8 with weights 1/3: eigenvalues (1 + 2 cos(2 pi k / 8)) / 3
    lam = (1 + 2 * np.cos(2 * np.pi * np.arange(8) / 8)) / 3
    expected = 1 - np.sort(np.abs(lam))[-2]
    assert abs(t.spectral_gap() - expected) < 1e-9
    again = rumor.topology.parse(t.text())
    np.testing.assert_array_equal(again.matrix(), w)
    assert [j for j, _ in t.neighbors(0)] == [1, 7]
    with pytest.raises(rumor.RumorError):
        rumor.topology.generate("ring", "x")


def test_topology_local__keys_match_the_file(tmp_path):
    path = rumor.topology.local("complete:3", str(tmp_path))
    t = rumor.topology.load(path)
    for i in range(3):
        base = str(tmp_path / "keys" / f"node-{i}")
        assert rumor.public_key(base) == t.key(i)
        assert t.endpoint(i).startswith("tcp://127.0.0.1:")
        assert oct(os.stat(base + ".key").st_mode & 0o777) == "0o600"
    with pytest.raises(rumor.RumorError):
        rumor.keygen(str(tmp_path / "keys" / "node-0"))  # exists


def test_topology_local__many_nodes__every_endpoint_distinct(tmp_path):
    """Each port stays bound until all are picked: one released at once
    could come back from the kernel for a later node (a 2-node CI run got
    the same port twice), and load() refuses a repeated endpoint."""
    nodes = 256
    path = rumor.topology.local(f"ring:{nodes}", str(tmp_path),
                                insecure=True)
    t = rumor.topology.load(path)
    assert len({t.endpoint(i) for i in range(nodes)}) == nodes


def test_keys__signing_identity__curve_keys_from_before_refused(tmp_path):
    """A node's key is an Ed25519 identity listed as ed25519:Z85 (48
    characters); a 40-character CURVE key from before signing is refused,
    as a key file and in a topology, saying how to replace it."""
    pub = rumor.keygen(str(tmp_path / "new"))
    assert pub.startswith("ed25519:") and len(pub) == 48
    assert (tmp_path / "new.key").read_text().startswith("ed25519:")
    old = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"  # zmq_curve_keypair's
    key = tmp_path / "old.key"
    key.write_text(old + "\n")
    key.chmod(0o600)
    with pytest.raises(rumor.RumorError):
        rumor.public_key(str(tmp_path / "old"))
    with pytest.raises(rumor.RumorError, match="rumor keygen --out BASE"):
        rumor.topology.parse(f"node 0 tcp://a:1 key={old}\n"
                             "node 1 tcp://a:2\nedge 0 1\n")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gossip__half_precision__rounds_like_torch(local2, dtype):
    """The C conversions against PyTorch's: the average of two halves is
    exact in float32, so the result must be torch's rounding of it
    (normals, subnormals, ties, and values near the largest half)."""
    topo, keys = local2
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4096, generator=g) * 1000
    b = torch.randn(4096, generator=g) * 1000
    a[:8] = torch.tensor([6.0e-8, 1e-5, 65504, -65504, 0.0, -0.0, 3e-6, 1])
    b[:8] = torch.tensor([1.2e-7, 3e-5, 65472, -65000, 1e-7, 0.0, 1e-7, 1])
    a, b = a.to(dtype), b.to(dtype)
    expected = ((a.float() + b.float()) / 2).to(dtype)
    out = _pair(topo, keys, lambda i: [(a, b)[i].clone()])
    for tensors, _ in out:
        assert torch.equal(tensors[0], expected)


@pytest.mark.skipif(not (torch.cuda.is_available() and rumor.cuda_built()),
                    reason="needs a GPU and a CUDA build of librumor")
def test_gossip__cuda_tensors__averaged_on_the_device(local2):
    topo, keys = local2
    out = _pair(topo, keys,
                lambda i: [torch.full((64, 8), float(2 * i), device="cuda"),
                           torch.full((9,), float(2 * i), device="cuda",
                                      dtype=torch.float16)])
    for tensors, _ in out:
        assert tensors[0].is_cuda
        assert torch.equal(tensors[0].cpu(), torch.ones(64, 8))
        assert torch.equal(tensors[1].cpu(),
                           torch.ones(9, dtype=torch.float16))


def test_report__metrics_dir__writes_rumor_node_lines(local2, tmp_path):
    import json
    topo, keys = local2
    mdir = tmp_path / "metrics"

    def node(i):
        w = [torch.full((3, 3), float(i))]
        with rumor.Peer(topology=topo, node_id=i, key=keys[i], algo="dpsgd",
                        metrics_dir=str(mdir)) as peer:
            for step in range(3):
                peer.gossip(w)
                peer.report(loss=1.0 / (step + 1))
            peer.report(loss=0.25, test_loss=0.5, accuracy=0.75)
            return peer.metrics()
    ms = run_nodes([lambda: node(0), lambda: node(1)])
    for i in range(2):
        rows = [json.loads(line) for line in open(mdir / f"node-{i}.jsonl")]
        assert [r["step"] for r in rows] == [1, 2, 3, 3]
        assert [r["loss"] for r in rows] == [1.0, 0.5, 1.0 / 3, 0.25]
        assert "accuracy" not in rows[0] and "test_loss" not in rows[0]
        assert rows[3]["accuracy"] == 0.75 and rows[3]["test_loss"] == 0.5
        assert rows[-1]["gossip_bytes_sent"] == ms[i]["gossip_bytes_sent"]
        assert rows[-1]["pcie_h2d_bytes"] == ms[i]["pcie_h2d_bytes"] == 0
        assert rows[-1]["pcie_d2h_bytes"] == ms[i]["pcie_d2h_bytes"] == 0
        assert ms[i]["gossip_bytes_sent"] > 3 * 9 * 4


@pytest.mark.parametrize("algo", ["allreduce", "powersgd"])
def test_gossip__gradients__every_node_keeps_the_same_model(local2, algo):
    """Data-parallel use: gradients gossiped between backward() and
    step(), kept in place by zero_grad(set_to_none=False)."""
    import copy
    topo, keys = local2
    base = torch.nn.Linear(8, 4)

    def node(i):
        model = copy.deepcopy(base)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(i)  # different data per node
        with rumor.Peer(topology=topo, node_id=i, key=keys[i],
                        algo=algo) as peer:
            for _ in range(4):
                loss = model(torch.randn(16, 8, generator=g)).pow(2).mean()
                opt.zero_grad(set_to_none=False)
                loss.backward()
                peer.gossip([p.grad for p in model.parameters()])
                opt.step()
        return [p.detach().clone() for p in model.parameters()]
    a, b = run_nodes([lambda: node(0), lambda: node(1)])
    for x, y, p0 in zip(a, b, base.parameters()):
        assert torch.equal(x, y)
        assert not torch.equal(x, p0.detach())


def test_gossip__every_finite_half__survives_the_staging_copy(local2):
    """Both nodes hold every finite float16 (and every bfloat16 whose double
    is finite in float32): the average is the value itself, so the
    conversions in and out must give back every bit pattern."""
    topo, keys = local2
    bits = np.arange(1 << 16, dtype=np.uint16)
    half = bits.view(np.float16)
    half = half[np.isfinite(half)].copy()
    bf = torch.from_numpy(bits.astype(np.int32) << 16).view(torch.float32)
    bf = bf[bf.abs() < 1e38].to(torch.bfloat16)  # the float32 sum is finite
    out = _pair(topo, keys, lambda i: [half.copy(), bf.clone()])
    for (h, b), _ in out:
        np.testing.assert_array_equal(h.view(np.uint16),
                                      half.view(np.uint16))
        assert torch.equal(b.view(torch.int16), bf.view(torch.int16))


def test_peer__config_file__read_as_by_rumor_node(local2, tmp_path):
    topo, keys = local2
    ini = tmp_path / "node.ini"
    ini.write_text("[node]\nalgo = choco\ncodec = sign\ngamma = 0.3\n")
    rumor.Peer(topology=topo, node_id=0, key=keys[0], config=str(ini))
    ini.write_text("[node]\nalgo = dpsgd\nrank = 2\n")
    with pytest.raises(rumor.RumorError, match="rank"):
        rumor.Peer(topology=topo, node_id=0, key=keys[0], config=str(ini))
    ini.write_text("[node]\nlr = fast\n")
    with pytest.raises(rumor.RumorError, match="node.ini:2"):
        rumor.Peer(topology=topo, node_id=0, key=keys[0], config=str(ini))
