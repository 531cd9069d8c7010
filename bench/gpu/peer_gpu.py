#!/usr/bin/python3
"""The device check's Peer runs (issue 31, step 2 of bench/gpu/run.sh):
four processes, each a rumor.Peer, train the same synthetic problem with
each algorithm once with CUDA tensors, once with CPU tensors and once as a
mixed ring (nodes 0 and 1 on the GPU, 2 and 3 on the CPU), and the runs
are compared: the bytes each node sent must be equal (the payloads'
sizes do not depend on where they were computed), the final models
within the algorithm's stated tolerance of the CPU run's, and the PCIe
bytes per step are set against the payload bytes per step.

The problem: node i pulls a small MLP's tensors towards its own target
t_i (the gradient of |w - t_i|^2 / 2 is w - t_i); each operation is one
IEEE float32 operation on either device, so the local steps are the same
bits on both and what differs is the exchange's arithmetic alone.
Gradient-exchange algorithms (powersgd, allreduce with a codec) average
w - t_i, the others exchange the model after the local step.

usage: python3 bench/gpu/peer_gpu.py [--steps 30] [--layouts cpu,cuda,mixed]
       [--configs NAME,...] [--dir DIR]
Without a GPU, `--layouts cpu,cpu2` checks the script itself: two CPU runs
must agree bit for bit. Prints one line per config and layout, then
'peer_gpu: N failed'; exits 1 on a failure.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import rumor  # noqa: E402

NODES = 4
SHAPES = [(256, 128), (128,), (128, 64), (64,), (64, 10), (10,)]
LR = 0.1

# name: (algo options, gradient exchange?, tolerance of the final model
# against the CPU run's, relative to its norm; 0 = bit-equal)
CONFIGS = {
    # the low-rank products are cuBLAS's against OpenBLAS's sums
    "powergossip": ({"algo": "powergossip", "rank": 1}, False, 1e-4),
    "powersgd": ({"algo": "powersgd", "rank": 2,
                  "start_powersgd_iter": 2}, True, 1e-4),
    # top-k is exact (ties by index); the mixing is the same bits
    "choco-topk": ({"algo": "choco", "codec": "topk:ratio=0.05",
                    "gamma": 0.5}, False, 0.0),
    # QSGD's scale is a norm summed in another order on the GPU: a level
    # rounded the other way here and there, carried by the error memory
    "allreduce-qsgd": ({"algo": "allreduce", "codec": "qsgd:bits=4",
                        "ef": "ef"}, True, 1e-2),
    "diloco": ({"algo": "localsgd", "period": 5, "outer_lr": 0.7,
                "outer_momentum": 0.9}, False, 0.0),
}

LAYOUTS = {"cpu": ["cpu"] * 4, "cpu2": ["cpu"] * 4, "cuda": ["cuda"] * 4,
           "mixed": ["cuda", "cuda", "cpu", "cpu"]}


def tensors(seed, device):
    g = torch.Generator().manual_seed(seed)
    return [(0.1 * torch.randn(s, generator=g)).to(device) for s in SHAPES]


def node_main(a):
    """One node: a.steps local steps and exchanges; writes its model and
    counters to a.dir/node-ID.pt."""
    dev = a.device
    w = tensors(0, dev)
    target = tensors(100 + a.id, dev)
    opts, gradient, _ = CONFIGS[a.config]
    with rumor.Peer(topology=a.topology, node_id=a.id, key=a.key,
                    seed=1, log_level="warn", **opts) as peer:
        g = [torch.empty_like(x) for x in w]  # a peer's tensors are fixed
        for _ in range(a.steps):
            for d, x, t in zip(g, w, target):
                torch.sub(x, t, out=d)
            if gradient:
                peer.gossip(g)
                for x, d in zip(w, g):
                    x.sub_(d.mul(LR))
            else:
                for x, d in zip(w, g):
                    x.sub_(d.mul_(LR))
                peer.gossip(w)
        if dev == "cuda":
            torch.cuda.synchronize()
        m = peer.metrics()
    torch.save({"model": [x.cpu() for x in w], "metrics": m},
               os.path.join(a.dir, f"node-{a.id}.pt"))


def run(config, layout, topo, keydir, steps, work):
    d = os.path.join(work, f"{config}-{layout}")
    os.makedirs(d, exist_ok=True)
    procs = [subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--node", str(i),
         "--config", config, "--device", dev, "--topology", topo,
         "--key", os.path.join(keydir, f"node-{i}"), "--dir", d,
         "--steps", str(steps)])
        for i, dev in enumerate(LAYOUTS[layout])]
    try:
        rcs = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(rcs):
        return None
    return [torch.load(os.path.join(d, f"node-{i}.pt"))
            for i in range(NODES)]


def distance(a, b):
    x = torch.cat([t.reshape(-1).double() for t in a])
    y = torch.cat([t.reshape(-1).double() for t in b])
    return float((x - y).norm() / max(float(y.norm()), 1e-30))


def compare(config, layout, got, ref, steps):
    """(ok, line) for one run against the reference layout's."""
    if got is None:
        return False, f"{config:15} {layout:6} FAILED: a node exited non-zero"
    tol = CONFIGS[config][2]
    worst = max(distance(g["model"], r["model"]) for g, r in zip(got, ref))
    sent = [g["metrics"]["gossip_bytes_sent"] for g in got]
    sent_ref = [r["metrics"]["gossip_bytes_sent"] for r in ref]
    pcie = sum(g["metrics"]["pcie_h2d_bytes"] + g["metrics"]["pcie_d2h_bytes"]
               for g in got) / NODES / steps
    payload = sum(sent) / NODES / steps
    ok = sent == sent_ref and worst <= tol
    return ok, (f"{config:15} {layout:6} model distance {worst:.2e} "
                f"(tolerance {tol:.0e})  bytes sent {'equal' if sent == sent_ref else f'{sent} != {sent_ref}'}  "
                f"PCIe {pcie:.0f} B/step, payload {payload:.0f} B/step, "
                f"ratio {pcie / payload if payload else 0:.2f}"
                f"  {'ok' if ok else 'FAILED'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--layouts", default="cpu,cuda,mixed")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--dir")
    ap.add_argument("--node", type=int)  # the worker's arguments
    ap.add_argument("--id", type=int)
    ap.add_argument("--config")
    ap.add_argument("--device")
    ap.add_argument("--topology")
    ap.add_argument("--key")
    a = ap.parse_args()
    if a.node is not None:
        a.id = a.node
        return node_main(a)
    work = a.dir or tempfile.mkdtemp(prefix="rumor-peer-gpu-")
    topo = rumor.topology.local(f"ring:{NODES}", work)
    keydir = os.path.join(work, "keys")
    layouts = a.layouts.split(",")
    failed = 0
    for config in a.configs.split(","):
        runs = {lay: run(config, lay, topo, keydir, a.steps, work)
                for lay in layouts}
        ref = runs[layouts[0]]
        if ref is None:
            print(f"{config:15} {layouts[0]:6} FAILED: a node exited non-zero")
            failed += 1
            continue
        for lay in layouts[1:]:
            ok, line = compare(config, lay, runs[lay], ref, a.steps)
            print(line, flush=True)
            failed += not ok
    print(f"peer_gpu: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
