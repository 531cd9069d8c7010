#!/usr/bin/env python3
"""A ResNet-20 on CIFAR-10, trained decentrally with rumor.torch.

    build/bin/rumor launch --nodes 4 -- python3 examples/cifar10_resnet.py \\
        --data ~/cifar-10-batches-bin

--data is the directory of CIFAR-10's binary version (cifar-10-binary.tar.gz
from https://www.cs.toronto.edu/~kriz/cifar.html, unpacked): data_batch_1.bin
to data_batch_5.bin (the batches present are used) and test_batch.bin, each
record one label byte and 3072 pixel bytes (32 x 32, red then green then
blue planes). Each worker trains on its shard with random crops and flips;
BatchNorm's running statistics are averaged with the parameters
(GossipModel's buffers="average"). Node 0 prints its loss every
--log-every steps; every node prints its final held-out accuracy (not
during the run: a node that evaluates for long makes its neighbours wait
past their deadline).
"""
import argparse
import glob
import os
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import rumor.torch
except ImportError:  # from the source tree, without pip install
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
    import rumor.torch

RECORD = 1 + 3 * 32 * 32
MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)


def read_batches(paths):
    """(images uint8 [n, 3, 32, 32], labels int64 [n]) of binary batches."""
    if not paths:
        raise SystemExit("cifar10_resnet.py: no CIFAR-10 binary batch "
                         "found: give --data DIR with data_batch_N.bin and "
                         "test_batch.bin")
    raw = b"".join(open(p, "rb").read() for p in paths)
    if len(raw) % RECORD != 0:
        raise SystemExit(f"cifar10_resnet.py: {paths}: not whole records "
                         f"of {RECORD} bytes (the binary version?)")
    rec = np.frombuffer(raw, np.uint8).reshape(-1, RECORD)
    labels = rec[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise SystemExit(f"cifar10_resnet.py: label {labels.max()} > 9")
    return (torch.from_numpy(rec[:, 1:].reshape(-1, 3, 32, 32).copy()),
            torch.from_numpy(labels))


def normalize(x):
    return (x.float() / 255.0 - MEAN.to(x.device)) / STD.to(x.device)


def augment(x, rng):
    """Random 4-pixel-padded 32 x 32 crops and horizontal flips."""
    pad = F.pad(x, (4, 4, 4, 4), mode="reflect")
    out = torch.empty_like(x)
    for k in range(len(x)):
        i, j = rng.integers(0, 9, 2)
        img = pad[k, :, i:i + 32, j:j + 32]
        out[k] = img.flip(2) if rng.random() < 0.5 else img
    return out


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False),
                nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.short(x))


def resnet20(seed):
    torch.manual_seed(seed)  # the same initial model on every node
    layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
              nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for k in range(3):
            layers.append(Block(cin, cout, stride if k == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        right = sum((model(normalize(x[k:k + 500])).argmax(1) ==
                     y[k:k + 500]).sum().item()
                    for k in range(0, len(y), 500))
    model.train()
    return right / len(y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available()
                    else "cpu")
    a = ap.parse_args()
    local = int(os.environ.get("RUMOR_LOCAL_ID", "0"))
    device = torch.device(f"cuda:{local % torch.cuda.device_count()}"
                          if a.device == "cuda" else a.device)
    xtr, ytr = read_batches(sorted(glob.glob(
        os.path.join(a.data, "data_batch_*.bin"))))
    xte, yte = read_batches(glob.glob(os.path.join(a.data, "test_batch.bin")))
    model = rumor.torch.GossipModel(resnet20(a.seed).to(device), seed=a.seed)
    me = model.peer.node_id
    nodes = int(os.environ.get("RUMOR_NODES", "1"))
    shard = np.array_split(np.random.default_rng(a.seed).permutation(
        len(ytr)), nodes)[me]
    xs, ys = xtr[shard], ytr[shard]
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9,
                          weight_decay=5e-4, nesterov=True)
    model.optimizer = opt  # a worker that joins a ring takes its state too
    # by the run's step, which a joiner takes from the ring
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda _: 0.5 * (1 + np.cos(np.pi * min(model.step / a.steps,
                                                     1.0))))
    rng = np.random.default_rng(1000 + me)
    start = time.perf_counter()
    while model.step < a.steps and not model.stopped:
        idx = torch.from_numpy(rng.integers(0, len(ys), a.batch))
        x = augment(normalize(xs[idx]), rng).to(device)
        loss = F.cross_entropy(model(x), ys[idx].to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if me == 0 and model.step % a.log_every == 0:
            print(f"step {model.step}: loss {loss.item():.4f}", flush=True)
    model.finish()
    seconds = time.perf_counter() - start
    sent = model.peer.metrics()["gossip_bytes_sent"]
    acc = accuracy(model.module, xte.to(device), yte.to(device))
    print(f"node {me}: held-out accuracy {acc:.4f} after {model.step} steps, "
          f"{seconds:.0f} s, {sent / 1e6:.2f} MB sent", flush=True)
    model.close()


if __name__ == "__main__":
    main()
