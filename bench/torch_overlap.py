#!/usr/bin/python3
"""What the buckets of rumor.torch's gradient exchange save (issue 21): one
training loop's step time with overlap=True (buckets exchanged by a
background thread during backward) and overlap=False (one exchange when
backward ends), N processes on loopback.

Every process trains three copies of the same MLP (--layers Linear(--width,
--width) with ReLU, batch --batch of random data, one torch thread) with
torch.optim.SGD: one under rumor.torch.GossipModel(overlap=True,
bucket_cap_mb=--bucket-mb), one under GossipModel(overlap=False) (each
with its own peer and ports), and one with no exchange at all ("none":
the compute the buckets can hide an exchange behind). The three take
their steps in turn, A B C A B C ..., so that a change of the machine's
load hits each alike; the step time is forward, backward (with the
exchange) and the optimizer step, from the process's own clock, after
--warmup steps. Prints per algorithm and mode the median step time over
steps (the slowest node's) and the 1-minute load average before and after;
the saving can only show on a machine with a core free for the exchange
thread.

Usage (repository root, after `make`):
  /usr/bin/python3 bench/torch_overlap.py [--nodes 2] [--steps 30]
      [--algos allreduce,powersgd,topk] [--width 1024] [--layers 6]
      [--bucket-mb 4]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

ALGOS = {"allreduce": {"algo": "allreduce"},
         "powersgd": {"algo": "powersgd", "rank": 4},
         "topk": {"algo": "allreduce", "codec": "topk:ratio=0.01",
                  "ef": "ef"}}
MODES = ("True", "False", "none")


def worker(a):
    import torch
    sys.path.insert(0, os.path.join(REPO, "python"))
    import rumor.torch
    torch.set_num_threads(1)
    topologies = a.topology.split(",")
    runs = []
    for mode, topo in zip(MODES, topologies + [None]):
        torch.manual_seed(0)
        layers = []
        for _ in range(a.layers):
            layers += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(a.width, 10))
        if topo is not None:
            model = rumor.torch.GossipModel(
                model, topology=topo, node_id=a.rank, overlap=mode == "True",
                bucket_cap_mb=a.bucket_mb, seed=1, insecure=True,
                log_level="error", **json.loads(a.opts))
        runs.append((mode, model, torch.optim.SGD(model.parameters(),
                                                  lr=1e-3)))
    g = torch.Generator().manual_seed(a.rank)
    x = torch.randn(a.batch, a.width, generator=g)
    y = torch.randint(0, 10, (a.batch,), generator=g)
    times = {mode: [] for mode in MODES}
    for step in range(a.warmup + a.steps):
        for mode, model, opt in runs:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step >= a.warmup:
                times[mode].append(time.perf_counter() - t0)
    print(json.dumps({
        "rank": a.rank, "buckets": runs[0][1].peer.buckets,
        "median_ms": {m: 1e3 * statistics.median(t)
                      for m, t in times.items()}}))
    for _, model, _ in runs[:2]:
        model.close()


def run(a, name):
    import rumor.topology
    with tempfile.TemporaryDirectory(prefix="rumor-overlap-") as d:
        topos = [rumor.topology.local(f"ring:{a.nodes}",
                                      os.path.join(d, mode), insecure=True)
                 for mode in MODES[:2]]
        procs = [subprocess.Popen(
            [sys.executable, __file__, "--worker", "--rank", str(i),
             "--topology", ",".join(topos),
             "--opts", json.dumps(ALGOS[name]), "--width", str(a.width),
             "--layers", str(a.layers), "--batch", str(a.batch),
             "--steps", str(a.steps), "--warmup", str(a.warmup),
             "--bucket-mb", str(a.bucket_mb)],
            stdout=subprocess.PIPE, text=True) for i in range(a.nodes)]
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=900)
            if p.returncode != 0:
                raise SystemExit(f"a worker failed ({name}): exit "
                                 f"{p.returncode}")
            outs.append(json.loads(out.strip().splitlines()[-1]))
    return ({m: max(o["median_ms"][m] for o in outs) for m in MODES},
            outs[0]["buckets"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--topology")
    ap.add_argument("--opts", default="{}")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--bucket-mb", type=float, default=4)
    ap.add_argument("--algos", default="allreduce,powersgd,topk")
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    sys.path.insert(0, os.path.join(REPO, "python"))
    params = a.layers * (a.width * a.width + a.width) + 10 * a.width + 10
    print(f"{a.nodes} processes on loopback, MLP {a.layers} x {a.width}^2 "
          f"({params * 4 / 2**20:.1f} MB of float32 gradients), batch "
          f"{a.batch}, bucket_cap_mb {a.bucket_mb}, {a.steps} steps of "
          f"each mode in turn after {a.warmup}, {os.cpu_count()} cores")
    print(f"{'algorithm':<10} {'buckets':>7} {'overlap ms':>10} "
          f"{'whole ms':>8} {'none ms':>7} {'saved':>6} "
          f"{'load before':>11} {'load after':>10}")
    for name in a.algos.split(","):
        before = os.getloadavg()[0]
        ms, buckets = run(a, name)
        after = os.getloadavg()[0]
        saved = 1 - ms["True"] / ms["False"]
        print(f"{name:<10} {buckets:>7} {ms['True']:>10.1f} "
              f"{ms['False']:>8.1f} {ms['none']:>7.1f} {saved:>6.0%} "
              f"{before:>11.2f} {after:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
