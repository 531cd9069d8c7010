#!/usr/bin/env python3
"""Decentralized training of a small PyTorch MLP with Rumor.

    python3 examples/pytorch_train.py --nodes 4 --steps 300

starts one process per node on this machine (a ring on 127.0.0.1 with a
CURVE key per node, written to a temporary directory), each training the
same MLP on its own shard of the embedded digits dataset (data/digits.csv:
1797 8x8 images, 10 classes) with its own torch.optim.SGD, and gossiping
the parameters with its neighbours through Rumor after every optimizer
step (or, for the gradient-exchange algorithms allreduce and powersgd,
averaging the gradients before it, as DDP does). Every node prints its held-out accuracy; the launcher prints the
mean. Runs on the CPU. To run one node by hand on a real cluster, see
--worker (and docs/python.md).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
try:
    import rumor
except ImportError:  # from the source tree, without pip install
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import rumor

import numpy as np
import torch
from torch import nn


GRADIENT_ALGOS = ("allreduce", "powersgd")


def load_digits(path, seed, test_fraction=0.2):
    """(x_train, y_train, x_test, y_test): features scaled to [0, 1], a
    held-out split by a seeded permutation (the same on every node)."""
    data = np.loadtxt(path, delimiter=",", dtype=np.float32)
    y, x = data[:, 0].astype(np.int64), data[:, 1:] / 16.0
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


def make_model(seed, hidden):
    torch.manual_seed(seed)  # the same initial model on every node
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def evaluate(model, x, y):
    """(held-out loss, accuracy)."""
    with torch.no_grad():
        out = model(x)
        return (nn.functional.cross_entropy(out, y).item(),
                (out.argmax(1) == y).float().mean().item())


def worker(a):
    torch.set_num_threads(1)
    xtr, ytr, xte, yte = load_digits(a.data, a.seed)
    # this node's shard: an equal part of a seeded permutation
    shard = np.array_split(np.random.default_rng(a.seed + 1).permutation(
        len(ytr)), a.nodes)[a.node_id]
    xs, ys = torch.from_numpy(xtr[shard]), torch.from_numpy(ytr[shard])
    xte, yte = torch.from_numpy(xte), torch.from_numpy(yte)
    model = make_model(a.seed, a.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    options = {"algo": a.algo}
    if a.rank is not None:  # else Rumor's default for the algorithm
        options["rank"] = a.rank
    # a ring's low-rank or exact average of the gradients, as DDP's; the
    # gossip algorithms average the models themselves
    gradients = a.algo in GRADIENT_ALGOS
    if a.metrics_dir:
        options["metrics_dir"] = a.metrics_dir
    peer = rumor.Peer(topology=a.topology, node_id=a.node_id, key=a.key,
                      seed=a.seed, **options)
    rng = np.random.default_rng(1000 + a.node_id)
    for step in range(a.steps):
        idx = torch.from_numpy(rng.integers(0, len(ys), a.batch))
        loss = nn.functional.cross_entropy(model(xs[idx]), ys[idx])
        opt.zero_grad()
        loss.backward()
        if gradients:
            peer.gossip([p.grad for p in model.parameters()])
        opt.step()
        if not gradients:
            peer.gossip(model.parameters())  # Rumor: average with neighbours
        if a.metrics_dir:  # held-out numbers every 50 steps and at the end
            last = step + 1 == a.steps
            ev = evaluate(model, xte, yte) if (step + 1) % 50 == 0 or last \
                else (None, None)
            peer.report(loss.item(), *ev)
    m = peer.metrics()
    peer.close()
    if a.save_dir:
        torch.save(model.state_dict(),
                   os.path.join(a.save_dir, f"node-{a.node_id}.pt"))
    print(f"node {a.node_id}: accuracy {evaluate(model, xte, yte)[1]:.4f} "
          f"loss {loss.item():.4f} sent {m['gossip_bytes_sent']} bytes "
          f"in {m['steps']} steps", flush=True)


def launch(a):
    directory = a.dir or tempfile.mkdtemp(prefix="rumor-example-")
    try:
        return run_nodes(a, directory)
    finally:
        if not a.dir:  # the keys and topology were for this run only
            shutil.rmtree(directory, ignore_errors=True)


def run_nodes(a, directory):
    topo = rumor.topology.local(f"{a.topology_kind}:{a.nodes}", directory)
    print(f"{a.nodes} nodes on {topo}, {a.algo}, {a.steps} steps",
          flush=True)
    procs = []
    for i in range(a.nodes):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker",
               "--node-id", str(i), "--topology", topo,
               "--key", os.path.join(directory, "keys", f"node-{i}")]
        for name in ("nodes", "steps", "algo", "lr", "batch",
                     "hidden", "seed", "data"):
            cmd += [f"--{name}", str(getattr(a, name))]
        if a.rank is not None:
            cmd += ["--rank", str(a.rank)]
        for name in ("metrics_dir", "save_dir"):
            if getattr(a, name):
                cmd += ["--" + name.replace("_", "-"), getattr(a, name)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                      text=True))
    accs, failed = [], False
    try:
        for i, p in enumerate(procs):
            out, _ = p.communicate(timeout=a.timeout)
            sys.stdout.write(out)
            failed |= p.returncode != 0
            accs += [float(line.split()[3]) for line in out.splitlines()
                     if line.startswith(f"node {i}: accuracy")]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if failed or len(accs) != a.nodes:
        print("some nodes failed", file=sys.stderr)
        return 1
    print(f"mean accuracy {np.mean(accs):.4f} over {a.nodes} nodes")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--algo", default="powergossip")
    ap.add_argument("--rank", type=int,
                    help="powergossip / powersgd rank (default: Rumor's)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--topology-kind", default="ring",
                    help="ring, complete, torus (RxC), ...")
    ap.add_argument("--dir", help="where the topology and keys go")
    ap.add_argument("--metrics-dir", help="JSON-lines metrics per node")
    ap.add_argument("--save-dir", help="each node's final state_dict, "
                    "DIR/node-N.pt")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--data", default=os.path.join(ROOT, "data",
                                                   "digits.csv"))
    ap.add_argument("--worker", action="store_true",
                    help="run one node (with --node-id, --topology, --key)")
    ap.add_argument("--node-id", type=int)
    ap.add_argument("--topology")
    ap.add_argument("--key")
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    return launch(a)


if __name__ == "__main__":
    sys.exit(main())
