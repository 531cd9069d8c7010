#!/usr/bin/python3
"""One PyTorch training loop, DDP against rumor.torch, over shaped links
(issue 21).

Every contender runs the same script (this file, --worker): the CNN of
examples/fashion_mnist_cnn.py on Fashion-MNIST (Debian's
dataset-fashion-mnist), the same shards (a seeded permutation of the 60000
training images cut into one per node), the same minibatch indices per
node and step, the same initial model, torch.optim.SGD with the same
learning rate and momentum, one thread per process. Only the line that
makes the model distributed differs:

  DDP:   DistributedDataParallel(model) on gloo, with no hook (fp32
         all-reduce), the fp16 hook, or the PowerSGD hook at ranks 1, 2, 4
  Rumor: rumor.torch.GossipModel(model, algo=...): PowerGossip ranks 1
         and 2 and CHOCO with top-k 1 % (gossip of the parameters in a
         background thread; PowerGossip rank 2 also with overlap=False, to
         measure what the overlap saves), PowerSGD rank 1, compressed data-parallel
         SGD (top-k 1 % with DGC's memory; SGD without momentum, which
         DGC's memory carries) and the plain all-reduce (gradients averaged
         in buckets during backward, bucket_cap_mb=0.1: the CNN's 0.3 MB of
         gradients in two buckets, the fully connected layers' travelling
         while backward computes the convolutions' (DDP's 1 MB first bucket
         holds them all); each also with overlap=False, one exchange at
         the end of backward, to measure what the buckets save), and
         streaming DiLoCo (localsgd, period 8 in 4 fragments, outer
         Nesterov step 0.7 with momentum 0.5, each synchronization
         landing 4 steps after it starts: the exchanges run on the
         peer's thread and the training never waits for them unless one
         is 4 steps late; DiLoCo's outer momentum 0.9 diverges at so
         short a period, with stale 0 too)

N processes, each in its own network namespace on a bridge, every veth
shaped both ways by tc tbf to the rate (bench/torch_compare.py's Netns;
no netem here, so no added latency). Each node evaluates its own model on
the first --test-images held-out images every --eval-every steps (that
time is not counted); curves are the mean over nodes. Bytes per node are
the veth tx counters (Ethernet frames, TCP/IP headers and retransmissions
in). Rumor runs --insecure (plain TCP, as gloo).

Usage (root, repository root, after `make`):
  /usr/bin/python3 bench/torch_e2e.py [--nodes 8] [--rates 10M,100M,1G]
      [--steps 600] [--target 0.80] [--cap 300] [--only LABEL,...]
      [--out DIR] [--json PATH]
Prints a table per rate (time to the target accuracy, final accuracy,
MB per node, and each ratio to DDP fp32), writes DIR/torch_e2e.json and
gnuplot PNGs DIR/bench-torch-RATE-seconds.png. Exit 3 when network
namespaces are not allowed here.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import torch_compare as tc  # noqa: E402  (its Netns, Sampler, helpers)

RUMOR_PORT = 29610
GLOO_PORT = 29510

DDP = [("DDP fp32", "none"), ("DDP fp16", "fp16"),
       ("DDP PowerSGD r1", "powersgd1"), ("DDP PowerSGD r2", "powersgd2"),
       ("DDP PowerSGD r4", "powersgd4")]
RUMOR = [("Rumor PowerGossip r1", "algo=powergossip;rank=1", 0.9),
         ("Rumor PowerGossip r2", "algo=powergossip;rank=2", 0.9),
         ("Rumor PowerGossip r2 no overlap",
          "algo=powergossip;rank=2;overlap=0", 0.9),
         ("Rumor CHOCO top-k 1%", "algo=choco;codec=topk:ratio=0.01", 0.9),
         ("Rumor PowerSGD r1", "algo=powersgd;rank=1;bucket_cap_mb=0.1",
          0.9),
         ("Rumor PowerSGD r1 no overlap", "algo=powersgd;rank=1;overlap=0",
          0.9),
         ("Rumor top-k 1% + DGC",
          "algo=allreduce;codec=topk:ratio=0.01;ef=dgc:0.9;bucket_cap_mb=0.1",
          0.0),
         ("Rumor top-k 1% + DGC no overlap",
          "algo=allreduce;codec=topk:ratio=0.01;ef=dgc:0.9;overlap=0",
          0.0),
         ("Rumor streaming DiLoCo",
          "algo=localsgd;period=8;fragments=4;stale=4;outer_lr=0.7;"
          "outer_momentum=0.5", 0.9),
         ("Rumor all-reduce", "algo=allreduce;bucket_cap_mb=0.1", 0.9),
         ("Rumor all-reduce no overlap", "algo=allreduce;overlap=0", 0.9)]


# --------------------------------------------------------------- the worker

def worker(a):
    import numpy as np
    import torch
    from torch import nn
    sys.path.insert(0, os.path.join(REPO, "examples"))
    sys.path.insert(0, os.path.join(REPO, "python"))
    import fashion_mnist_cnn as ex

    torch.set_num_threads(1)
    xtr, ytr = ex.load(a.data, "train")
    xte, yte = ex.load(a.data, "t10k")
    xte, yte = xte[:a.test_images], yte[:a.test_images]
    shard = np.array_split(np.random.default_rng(a.seed).permutation(
        len(ytr)), a.world)[a.rank]
    xs, ys = xtr[shard], ytr[shard]
    model = ex.make_model(a.seed)
    if a.mode == "ddp":
        model, stopper = _ddp(a, model)
        net = model.module
    else:
        model, stopper = _rumor(a, model)
        net = model.module
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    rng = np.random.default_rng(1000 + a.rank)
    out = open(a.log, "w")
    t0, t_eval = time.time(), 0.0
    for step in range(1, a.steps + 1):
        idx = torch.from_numpy(rng.integers(0, len(ys), a.batch))
        loss = nn.functional.cross_entropy(model(xs[idx]), ys[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % a.eval_every and step != a.steps:
            continue
        e0 = time.time()
        acc = ex.accuracy(net, xte, yte)
        now = time.time()
        t_eval += now - e0
        seconds = now - t0 - t_eval
        out.write(json.dumps({"step": step, "time": e0, "seconds": seconds,
                              "accuracy": acc, "loss": loss.item()}) + "\n")
        out.flush()
        if stopper(seconds > a.cap):
            break
    out.close()
    if a.mode == "rumor":
        model.close()


def _ddp(a, model):
    import torch
    import torch.distributed as dist
    os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    dist.init_process_group("gloo", init_method="tcp://%s" % a.master,
                            rank=a.rank, world_size=a.world)
    flags = dist.new_group(backend="gloo")
    ddp = tc.wrap_ddp(model, a.hook)
    stop = torch.zeros(1)

    def stopper(over_cap):
        stop[0] = 1.0 if over_cap else 0.0
        dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=flags)
        return stop[0] > 0

    return ddp, stopper


def _rumor(a, model):
    import rumor.torch
    opts = dict(kv.split("=", 1) for kv in a.opts.split(";") if kv)
    overlap = opts.pop("overlap", "1") != "0"
    if "bucket_cap_mb" in opts:
        opts["bucket_cap_mb"] = float(opts["bucket_cap_mb"])
    gm = rumor.torch.GossipModel(model, topology=a.topology, node_id=a.rank,
                                 overlap=overlap,
                                 insecure=True, seed=a.seed,
                                 deadline_ms=120000,
                                 connect_timeout_ms=120000, **opts)

    def stopper(over_cap):
        if over_cap:
            gm.peer.stop()
        return gm.stopped

    return gm, stopper


# --------------------------------------------------------------- the runs

def _start(a, net, work, label, mode, arg, momentum):
    base = [net.tx_bytes(i) for i in range(net.nodes)]
    topo = os.path.join(work, "ring.topo")
    with open(topo, "w") as f:
        f.write("nodes %d\n" % net.nodes)
        for i in range(net.nodes):
            f.write("node %d tcp://%s:%d\n" % (i, net.addr[i], RUMOR_PORT))
        for i in range(net.nodes if net.nodes > 2 else 1):
            f.write("edge %d %d\n" % (i, (i + 1) % net.nodes))
    procs, logs = [], []
    for i in range(net.nodes):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker",
               "--mode", mode, "--rank", str(i), "--world", str(net.nodes),
               "--log", os.path.join(work, "node-%d.jsonl" % i),
               "--steps", str(a.steps), "--batch", str(a.batch),
               "--lr", str(a.lr), "--momentum", str(momentum),
               "--seed", str(a.seed), "--eval-every", str(a.eval_every),
               "--test-images", str(a.test_images), "--cap", str(a.cap),
               "--data", a.data]
        if mode == "ddp":
            cmd += ["--hook", arg, "--ifname", net.ifname[i], "--master",
                    "%s:%d" % (net.addr[0], GLOO_PORT)]
        else:
            cmd += ["--opts", arg, "--topology", topo]
        logs.append(open(os.path.join(work, "node-%d.out" % i), "w"))
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        if env.get("RUMOR_LIB"):
            env["RUMOR_LIB"] = os.path.abspath(env["RUMOR_LIB"])
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", net.ns[i]] + cmd, stdout=logs[i],
            stderr=subprocess.STDOUT, env=env, cwd=REPO))
    sampler = tc.Sampler([p.pid for p in procs], net.ifname)
    sampler.start()
    codes = tc.wait_all(procs, time.time() + a.cap + 600)
    sampler.stop.set()
    sampler.join()
    for log in logs:
        log.close()
    final = [net.tx_bytes(i) - base[i] for i in range(net.nodes)]
    result = tc.lockstep_result(
        [os.path.join(work, "node-%d.jsonl" % i) for i in range(net.nodes)],
        sampler, base, final, codes)
    # what else ran on the host: the contenders share its cores
    result["load"] = os.getloadavg()[0]
    return result


def _table(rate, results, a):
    print("\n%s per node link (tbf both ways), %d nodes, %d steps, target "
          "%.2f held-out accuracy (first %d test images)"
          % (tc.rate_label(rate), a.nodes, a.steps, a.target,
             a.test_images))
    print("%-32s %8s %8s %9s %9s %8s %10s %6s" % (
        "contender", "to tgt s", "steps", "final acc", "MB/node",
        "ms/step", "x DDP fp32", "exit"))
    ref = results.get("DDP fp32")
    ref_t = tc.to_target(ref["curve"], a.target) if ref else None
    for label, r in results.items():
        hit = tc.to_target(r["curve"], a.target)
        final = r["curve"][-1]["accuracy"] if r["curve"] else float("nan")
        speed = ("%.1fx" % (ref_t["seconds"] / hit["seconds"])
                 if hit and ref_t else "-")
        print("%-32s %8s %8s %9.4f %9.2f %8.0f %10s %6s" % (
            label, "%.1f" % hit["seconds"] if hit else "-",
            hit["step"] if hit else "-", final, r["bytes_per_node"] / 1e6,
            1000 * r["seconds"] / max(r["steps"], 1), speed,
            ",".join(str(c) for c in set(r["codes"]))))


def _plot(rate, results, out):
    data = os.path.join(out, "bench-torch-%s.dat" % tc.rate_label(rate))
    with open(data, "w") as f:
        for label, r in results.items():
            f.write('"%s"\n' % label)
            for c in r["curve"]:
                f.write("%g %g %g\n" % (c["seconds"], c["accuracy"],
                                        c["bytes"] / 1e6))
            f.write("\n\n")
    png = os.path.join(out, "bench-torch-%s-seconds.png" % tc.rate_label(rate))
    script = ('set terminal png size 900,560; set output "%s"; '
              'set title "Same loop, %s links: held-out accuracy"; '
              'set xlabel "seconds of training"; set ylabel "accuracy"; '
              'set key bottom right; set yrange [0.5:0.95]; '
              'plot for [i=0:%d] "%s" index i using 1:2 with linespoints '
              'title columnheader(1)'
              % (png, tc.rate_label(rate), len(results) - 1, data))
    subprocess.run(["gnuplot", "-e", script], check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--mode", choices=("ddp", "rumor"))
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--log")
    ap.add_argument("--hook", default="none")
    ap.add_argument("--ifname")
    ap.add_argument("--master")
    ap.add_argument("--opts", default="")
    ap.add_argument("--topology")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--rates", default="10M,100M,1G")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--test-images", type=int, default=2000)
    ap.add_argument("--target", type=float, default=0.80)
    ap.add_argument("--cap", type=float, default=300)
    ap.add_argument("--only", default="")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--out", default=os.path.join(REPO, "build",
                                                  "bench-torch"))
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    ok, why = tc.namespaces_allowed()
    if not ok:
        print("torch_e2e: skipped: " + why)
        return 3
    os.makedirs(a.out, exist_ok=True)
    only = set(a.only.split(",")) if a.only else None
    report = {}
    for rate_text in a.rates.split(","):
        rate = tc.parse_rate(rate_text)
        net = tc.Netns(a.nodes, rate)
        results = {}
        try:
            runs = [(lbl, "ddp", hook, a.momentum) for lbl, hook in DDP] + \
                [(lbl, "rumor", o, m) for lbl, o, m in RUMOR]
            for label, mode, arg, momentum in runs:
                if only and label not in only:
                    continue
                work = os.path.join(a.out, tc.rate_label(rate),
                                    label.replace(" ", "_").replace("%", ""))
                os.makedirs(work, exist_ok=True)
                t = time.time()
                results[label] = _start(a, net, work, label, mode, arg,
                                        momentum)
                print("[%s] %s: %.0f s" % (tc.rate_label(rate), label,
                                           time.time() - t), flush=True)
        finally:
            net.close()
        _table(rate, results, a)
        _plot(rate, results, a.out)
        report[tc.rate_label(rate)] = results
    path = a.json or os.path.join(a.out, "torch_e2e.json")
    with open(path, "w") as f:
        json.dump({"args": vars(a), "results": report}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
