"""CUDA tensors under the peer API and rumor.torch (node/peer_cuda.cu):
the PCIe counters against the model's bytes, the caller's stream ordering
the copies with events (the caller queues its writes and reads on its
stream and never synchronises it), and GossipModel on CUDA parameters
giving the numbers of the same run on the CPU. Nodes are threads of this
process on loopback. Skipped without a GPU or a CUDA build of librumor
(nothing here has run on a GPU yet)."""
import copy

import pytest

torch = pytest.importorskip("torch")

import rumor  # noqa: E402
import rumor.torch  # noqa: E402
from conftest import run_nodes  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and rumor.cuda_built()),
    reason="needs a GPU and a CUDA build of librumor")

STEPS = 4


def _values(i, s, dtype):
    """Node i's tensor before step s; the mean of nodes 0 and 1 is
    arange + 1 + 8 s, exact in float16."""
    return (torch.arange(1000, dtype=torch.float32) + 2 * i + 8 * s).to(dtype)


@pytest.mark.parametrize("with_stream", [False, True],
                         ids=["default", "stream"])
def test_peer__cuda_tensors__averaged_counted_and_ordered(local2,
                                                          with_stream):
    topo, keys = local2
    dtypes = (torch.float32, torch.float16)
    model_bytes = 1000 * (4 + 2)

    def node(i):
        stream = torch.cuda.Stream() if with_stream else None
        ts = [torch.zeros(1000, dtype=d, device="cuda") for d in dtypes]
        wrong = 0
        with torch.cuda.stream(stream or torch.cuda.current_stream()):
            for t, d in zip(ts, dtypes):
                t.copy_(_values(i, 0, d), non_blocking=True)
            with rumor.Peer(topology=topo, node_id=i, key=keys[i],
                            algo="allreduce", stream=stream) as peer:
                for s in range(STEPS):
                    if s > 0:  # queued, not waited for: the event orders
                        for t, d in zip(ts, dtypes):
                            t.copy_(_values(i, s, d).pin_memory(),
                                    non_blocking=True)
                    peer.gossip(ts)
                    for t, d in zip(ts, dtypes):
                        want = (_values(0, s, torch.float32) + 1).to(d)
                        wrong += int((t.cpu() != want).sum())
                return wrong, peer.metrics()

    for wrong, m in run_nodes([lambda: node(0), lambda: node(1)]):
        assert wrong == 0
        # the model each way per step, and down once at registration
        assert m["pcie_h2d_bytes"] == STEPS * model_bytes
        assert m["pcie_d2h_bytes"] == (STEPS + 1) * model_bytes


def _template():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3)).double()


TEMPLATE = _template()


def _train(topo, keys, i, algo, device, **options):
    module = copy.deepcopy(TEMPLATE).to(device)
    model = rumor.torch.GossipModel(module, topology=topo, node_id=i,
                                    key=keys[i], algo=algo, seed=1,
                                    **options)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for t in range(10):
        g = torch.Generator().manual_seed(1000 * i + t)
        x = (torch.randn(16, 6, generator=g, dtype=torch.float64) + i)
        y = torch.randint(0, 3, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x.to(device)),
                                                 y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.finish()
    out = torch.cat([p.detach().reshape(-1).cpu()
                     for p in model.module.parameters()])
    pcie = model.peer.metrics()["pcie_h2d_bytes"]
    model.close()
    return out, pcie


@pytest.mark.parametrize("algo,options", [
    ("dpsgd", {}),                          # model exchange on a thread
    ("allreduce", {"bucket_cap_mb": 1e-4}),  # gradients in buckets
    ("allreduce", {"overlap": False}),       # gradients at backward's end
], ids=["dpsgd", "allreduce-buckets", "allreduce-whole"])
def test_gossip_model__cuda_parameters__numbers_of_the_cpu_run(local2, algo,
                                                               options):
    topo, keys = local2
    runs = {dev: run_nodes([lambda i=i: _train(topo, keys, i, algo, dev,
                                               **options)
                            for i in range(2)])
            for dev in ("cpu", "cuda")}
    for (g, pcie_gpu), (w, pcie_cpu) in zip(runs["cuda"], runs["cpu"]):
        # float64 kernels on the GPU round otherwise than the CPU's
        assert torch.allclose(g, w, rtol=0, atol=1e-9), (g - w).abs().max()
        assert pcie_cpu == 0 and pcie_gpu > 0
