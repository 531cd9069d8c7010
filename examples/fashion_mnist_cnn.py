#!/usr/bin/env python3
"""A PyTorch CNN on Fashion-MNIST, trained decentrally with rumor.torch.

    build/bin/rumor launch --nodes 4 -- python3 examples/fashion_mnist_cnn.py
    build/bin/rumor launch --nodes 4 --algo choco --codec topk:ratio=0.01 \\
        -- python3 examples/fashion_mnist_cnn.py --steps 1500

`rumor launch` starts one worker per node with its identity in the
environment; rumor.torch.GossipModel (Peer options from the launch line:
PowerGossip rank 1 when none is given) gossips the parameters in a
background thread while the gradient is computed. Each worker trains on
its own shard of the 60000 training images (Debian package
dataset-fashion-mnist, or --data DIR with the four IDX .gz files) and
prints its held-out accuracy on the 10000 test images; node 0 also prints
the mean step time and the bytes it sent. --no-overlap runs the same
exchange after the gradient instead, to measure what the overlap saves.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import rumor.torch
except ImportError:  # from the source tree, without pip install
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
    import rumor.torch

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big")
             for k in range(dims)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(directory, split):
    x = read_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    return (x - 0.2860) / 0.3530, torch.from_numpy(y.astype(np.int64))


def make_model(seed):
    torch.manual_seed(seed)  # the same initial model on every node
    return nn.Sequential(
        nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        right = sum((model(x[k:k + 1000]).argmax(1) == y[k:k + 1000]).sum()
                    for k in range(0, len(y), 1000))
    model.train()
    return right.item() / len(y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--test-images", type=int, default=10000)
    ap.add_argument("--no-overlap", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = rumor.torch.GossipModel(make_model(a.seed), seed=a.seed,
                                    overlap=not a.no_overlap)
    me, nodes = model.peer.node_id, int(os.environ.get("RUMOR_NODES", "1"))
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "t10k")
    xte, yte = xte[:a.test_images], yte[:a.test_images]
    shard = np.array_split(np.random.default_rng(a.seed).permutation(
        len(ytr)), nodes)[me]
    xs, ys = xtr[shard], ytr[shard]
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    model.optimizer = opt  # a worker that joins a ring takes its state too
    rng = np.random.default_rng(1000 + me)
    start = time.perf_counter()
    while model.step < a.steps and not model.stopped:
        idx = torch.from_numpy(rng.integers(0, len(ys), a.batch))
        loss = nn.functional.cross_entropy(model(xs[idx]), ys[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.finish()
    seconds = time.perf_counter() - start
    sent = model.peer.metrics()["gossip_bytes_sent"]
    steps = model.step
    print(f"node {me}: held-out accuracy {accuracy(model.module, xte, yte):.4f}"
          f" loss {loss.item():.4f} after {steps} steps, "
          f"{1000 * seconds / max(steps, 1):.1f} ms/step, "
          f"{sent / 1e6:.2f} MB sent", flush=True)
    model.close()


if __name__ == "__main__":
    main()
