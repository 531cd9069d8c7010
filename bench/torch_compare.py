#!/usr/bin/python3
"""Side by side with PyTorch DDP over shaped links (issues 9 and 11).

Every contender trains the same model (ReLU MLP 64-H1-H2-10 on the embedded
digits, nn.Linear initialisation bounds, softmax cross-entropy, plain SGD),
on the same data (data/digits.csv scaled by 1/16, 20 % held out, the rest
cut into one iid shard per node, minibatches of B drawn with replacement
from the node's shard), with the same seed value, learning rate and number
of steps, as N processes, each in its own network namespace. The
namespaces hang off one bridge (in a namespace of its own) by veth pairs;
`tc tbf` shapes both directions of every veth to the chosen rate, so each
node has an access link of that rate, as a machine on a switch does. The
kernel here has no netem: no contender gets added latency (Rumor's own
--delay-ms is not used either, so all see the same links).

What is not identical: Rumor's split, shards and batches come from its
Philox streams, PyTorch's from torch.Generator with the same seed; the
sizes are the same, the samples are not (there is no Python binding to
Rumor's sampler yet).

Bytes per node are counted the same way for every contender: the tx_bytes
counter of the node's veth (/proc/PID/net/dev of a process in the
namespace, equal to /sys/class/net/IF/statistics/tx_bytes there), i.e.
Ethernet frames with IP and TCP headers, retransmissions and connection
set-up included. Rumor's own payload count (gossip_bytes_sent) is reported
next to it.

Contenders: PyTorch DDP on gloo with no hook (fp32 all-reduce), the fp16
hook and the PowerSGD hook at ranks 1, 2 and 4; `rumor node` processes with
PowerGossip (rank 1), CHOCO (top-k 1 %, gamma 0.1), PowerSGD (rank 1,
gradient exchange) and the all-reduce (gradient exchange), all --insecure
(plain TCP, as gloo; CURVE's cost is in the transport tier).

Usage (root, from the repository root):
  /usr/bin/python3 bench/torch_compare.py [--rates 10M,100M,1G]
      [--steps 150] [--target 0.90] [--cap 90] [--out DIR] [--json PATH]
It prints a table per rate and writes DIR/torch_compare.json and PNG plots
(gnuplot) DIR/bench-e2e-RATE-seconds.png and -bytes.png. Exit status 0 on
success, 3 when network namespaces are not allowed here (it says so).
"""

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "rb"  # namespace and veth prefix of the benchmark engineer
SUBNET = "10.77.0"
RUMOR_PORT = 29600
GLOO_PORT = 29500


def run(cmd, check=True):
    """Runs a command (list); returns its stdout; raises on failure."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), p.stderr.strip()))
    return p.stdout


def parse_rate(text):
    """'100M' -> 100e6 bits/s."""
    mult = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
    if text[-1] in mult:
        return float(text[:-1]) * mult[text[-1]]
    return float(text)


def rate_label(bits):
    if bits >= 1e9:
        return "%gGbit" % (bits / 1e9)
    return "%gMbit" % (bits / 1e6)


class Netns:
    """N namespaces joined by a bridge namespace, links shaped by tbf.

    Names carry our prefix and the PID so concurrent runs do not collide;
    everything is removed by close() (also at exit and on SIGINT/SIGTERM).
    """

    def __init__(self, nodes, rate_bits):
        pid = os.getpid()
        self.nodes = nodes
        self.bridge_ns = "%s-%d-br" % (PREFIX, pid)
        self.ns = ["%s-%d-n%d" % (PREFIX, pid, i) for i in range(nodes)]
        self.ifname = ["%s%dn%d" % (PREFIX, pid, i) for i in range(nodes)]
        self.brname = ["%s%db%d" % (PREFIX, pid, i) for i in range(nodes)]
        self.addr = ["%s.%d" % (SUBNET, i + 1) for i in range(nodes)]
        self.rate = rate_bits
        self.created = []
        try:
            self._create()
        except Exception:
            self.close()
            raise

    def _shape(self, ns, dev):
        rate_bytes = self.rate / 8
        # Burst: 4 ms of line rate, at least 32 KiB; queue: 400 ms at the
        # rate (a switch port's buffer; shorter queues drop bursts of
        # 8-way traffic at 10 Mbit/s and stall TCP in retransmission
        # timeouts). GSO is capped at one MTU so tbf meters real frames.
        burst = max(int(rate_bytes * 0.004), 32768)
        run(["ip", "-n", ns, "link", "set", dev, "gso_max_size", "1514"])
        run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev,
             "root", "tbf", "rate", "%dbit" % int(self.rate),
             "burst", str(burst), "latency", "400ms"])

    def _create(self):
        run(["ip", "netns", "add", self.bridge_ns])
        self.created.append(self.bridge_ns)
        b = self.bridge_ns
        run(["ip", "-n", b, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", b, "link", "set", "br0", "up"])
        run(["ip", "-n", b, "link", "set", "lo", "up"])
        for i in range(self.nodes):
            ns, ifn, brn = self.ns[i], self.ifname[i], self.brname[i]
            run(["ip", "netns", "add", ns])
            self.created.append(ns)
            run(["ip", "-n", ns, "link", "add", ifn, "type", "veth",
                 "peer", "name", brn, "netns", b])
            run(["ip", "-n", b, "link", "set", brn, "master", "br0"])
            run(["ip", "-n", b, "link", "set", brn, "up"])
            run(["ip", "-n", ns, "addr", "add", self.addr[i] + "/24",
                 "dev", ifn])
            run(["ip", "-n", ns, "link", "set", ifn, "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            self._shape(ns, ifn)  # the node's upload
            self._shape(b, brn)   # the node's download

    def tx_bytes(self, i):
        out = run(["ip", "-n", self.ns[i], "-s", "-j", "link", "show",
                   self.ifname[i]])
        return json.loads(out)[0]["stats64"]["tx"]["bytes"]

    def close(self):
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns],
                           stderr=subprocess.DEVNULL)
        self.created = []


def namespaces_allowed():
    """(True, '') or (False, reason)."""
    if os.geteuid() != 0:
        return False, "not root: network namespaces need CAP_SYS_ADMIN"
    name = "%s-%d-probe" % (PREFIX, os.getpid())
    p = subprocess.run(["ip", "netns", "add", name], stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        return False, "ip netns add failed: " + p.stderr.strip()
    ok = subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add",
                         "dev", "lo", "root", "tbf", "rate", "1mbit",
                         "burst", "32k", "latency", "50ms"],
                        stderr=subprocess.PIPE, text=True)
    subprocess.run(["ip", "netns", "del", name])
    if ok.returncode != 0:
        return False, "tc tbf refused: " + ok.stderr.strip()
    return True, ""


class Sampler(threading.Thread):
    """Samples each node process's veth tx counter (/proc/PID/net/dev)."""

    def __init__(self, pids, ifnames, period=0.1):
        super().__init__(daemon=True)
        self.pids, self.ifnames, self.period = pids, ifnames, period
        self.samples = [[] for _ in pids]  # per node: (time, tx_bytes)
        self.stop = threading.Event()

    def _read(self, pid, ifname):
        try:
            with open("/proc/%d/net/dev" % pid) as f:
                for line in f:
                    name, _, rest = line.partition(":")
                    if name.strip() == ifname:
                        return int(rest.split()[8])
        except OSError:
            return None
        return None

    def run(self):
        while not self.stop.is_set():
            now = time.time()
            for i, pid in enumerate(self.pids):
                v = self._read(pid, self.ifnames[i])
                if v is not None:
                    self.samples[i].append((now, v))
            self.stop.wait(self.period)

    def at(self, i, t):
        """tx bytes of node i at time t, linear between samples."""
        s = self.samples[i]
        if not s:
            return 0
        if t <= s[0][0]:
            return s[0][1]
        for (t0, v0), (t1, v1) in zip(s, s[1:]):
            if t0 <= t <= t1:
                return v0 + (v1 - v0) * (t - t0) / max(t1 - t0, 1e-9)
        return s[-1][1]


# ----------------------------------------------------------------- DDP worker


def ddp_worker(a):
    """One DDP rank (runs inside its namespace). Writes JSON lines."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    dist.init_process_group("gloo", init_method="tcp://%s" % a.master,
                            rank=a.rank, world_size=a.world)
    # The stop flag gets its own group: on the default group it would
    # interleave with the PowerSGD hook's asynchronous all-reduces.
    flag_group = dist.new_group(backend="gloo")
    x, y = load_digits()
    g = torch.Generator().manual_seed(a.seed)
    perm = torch.randperm(len(y), generator=g)
    n_test = round(0.2 * len(y))
    test, train = perm[:n_test], perm[n_test:]
    shard = train[a.rank::a.world]
    torch.manual_seed(a.seed)  # same initial model on every rank
    hidden = [int(h) for h in a.hidden.split(",")]
    model = make_mlp(64, hidden, 10)
    ddp = wrap_ddp(model, a.hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    bg = torch.Generator().manual_seed(a.seed * 1000 + a.rank)
    out = open(a.log, "w")
    dist.barrier()
    t0 = time.time()
    stop = torch.zeros(1)
    for step in range(1, a.steps + 1):
        idx = shard[torch.randint(len(shard), (a.batch,), generator=bg)]
        opt.zero_grad()
        loss = loss_fn(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if step % a.eval_every == 0 or step == a.steps:
            with torch.no_grad():
                pred = model(x[test]).argmax(1)
                acc = (pred == y[test]).float().mean().item()
            now = time.time()
            out.write(json.dumps({"step": step, "time": now,
                                  "seconds": now - t0, "accuracy": acc,
                                  "loss": loss.item()}) + "\n")
            out.flush()
            stop[0] = 1.0 if now - t0 > a.cap else 0.0
            dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=flag_group)
            if stop[0] > 0:
                break
    out.close()
    dist.barrier()
    dist.destroy_process_group()


def wrap_ddp(model, hook):
    """DistributedDataParallel with hook "none", "fp16" or "powersgdR"."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    # One gradient bucket: with several, gloo runs the PowerSGD hook's
    # per-bucket callbacks in concurrent threads whose collectives then
    # pair up differently on different ranks (a gloo size mismatch abort).
    # The same for every hook; at this model size nothing is lost.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
    ddp = DDP(model, bucket_cap_mb=1024)
    if hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import \
            default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook.startswith("powersgd"):
        from torch.distributed.algorithms.ddp_comm_hooks import \
            powerSGD_hook as ps
        state = ps.PowerSGDState(process_group=None,
                                 matrix_approximation_rank=int(hook[8:]),
                                 start_powerSGD_iter=2)
        ddp.register_comm_hook(state, ps.powerSGD_hook)
    return ddp


def load_digits():
    import torch
    rows = [line.split(",") for line in
            open(os.path.join(REPO, "data", "digits.csv"))]
    y = torch.tensor([int(r[0]) for r in rows])
    x = torch.tensor([[float(v) / 16.0 for v in r[1:]] for r in rows])
    return x, y


def make_mlp(inputs, hidden, outputs):
    import torch
    layers, width = [], inputs
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, outputs))
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():  # biases zero, as Rumor's workload
        for m in model:
            if isinstance(m, torch.nn.Linear):
                m.bias.zero_()
    return model


# --------------------------------------------------------------- the contenders


CONTENDERS = [
    ("ddp fp32", "ddp", "none"),
    ("ddp fp16", "ddp", "fp16"),
    ("ddp powersgd r1", "ddp", "powersgd1"),
    ("ddp powersgd r2", "ddp", "powersgd2"),
    ("ddp powersgd r4", "ddp", "powersgd4"),
    ("rumor powergossip r1", "rumor", ["--algo", "powergossip", "--rank",
                                       "1"]),
    ("rumor choco topk1%", "rumor", ["--algo", "choco", "--codec",
                                     "topk:ratio=0.01", "--gamma", "0.1"]),
    ("rumor powersgd r1", "rumor", ["--algo", "powersgd", "--rank", "1"]),
    ("rumor allreduce", "rumor", ["--algo", "allreduce"]),
]


def ring_topology(path, net):
    with open(path, "w") as f:
        f.write("nodes %d\n" % net.nodes)
        for i in range(net.nodes):
            f.write("node %d tcp://%s:%d\n" % (i, net.addr[i], RUMOR_PORT))
        for i in range(net.nodes):
            f.write("edge %d %d\n" % (i, (i + 1) % net.nodes))


def wait_all(procs, deadline, on_tick=None, on_cap=None, cap_at=None):
    """Waits for every process; calls on_cap once past cap_at; kills all at
    the hard deadline. Returns the exit codes."""
    capped = False
    while any(p.poll() is None for p in procs):
        now = time.time()
        if on_tick:
            on_tick(now)
        if cap_at is not None and now > cap_at and not capped:
            capped = True
            if on_cap:
                on_cap()
        if now > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.05)
    if on_tick:
        on_tick(time.time())
    return [p.wait() for p in procs]


def start_in_ns(net, i, cmd, log):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return subprocess.Popen(["ip", "netns", "exec", net.ns[i]] + cmd,
                            stdout=log, stderr=subprocess.STDOUT, env=env,
                            cwd=REPO)


def run_rumor(a, net, label, extra, work):
    rumor = a.rumor
    topo = os.path.join(work, "ring.topo")
    ring_topology(topo, net)
    mdir = os.path.join(work, "metrics")
    os.makedirs(mdir, exist_ok=True)
    common = [rumor, "node", "--topology", topo, "--insecure",
              "--workload", "mlp", "--hidden", a.hidden, "--batch",
              str(a.batch), "--lr", str(a.lr), "--seed", str(a.seed),
              "--optimizer", "momentum", "--momentum", str(a.momentum),
              "--steps", str(a.steps), "--eval-every", str(a.eval_every),
              "--metrics-dir", mdir, "--deadline-ms", "120000",
              "--connect-timeout-ms", "60000", "--progress", "off"] + extra
    base = [net.tx_bytes(i) for i in range(net.nodes)]
    logs = [open(os.path.join(work, "node-%d.log" % i), "w")
            for i in range(net.nodes)]
    procs = [start_in_ns(net, i, common + ["--id", str(i)], logs[i])
             for i in range(net.nodes)]
    sampler = Sampler([p.pid for p in procs], net.ifname)
    sampler.start()
    # Map each node's `seconds` to wall time: the smallest (time seen -
    # seconds) over the lines read while it runs (reading lags writing).
    offset = [None] * net.nodes
    seen = [0] * net.nodes

    def tick(now):
        for i in range(net.nodes):
            path = os.path.join(mdir, "node-%d.jsonl" % i)
            try:
                with open(path) as f:
                    lines = f.readlines()
            except OSError:
                continue
            for line in lines[seen[i]:]:
                if not line.endswith("\n"):
                    break
                d = json.loads(line)
                off = now - d["seconds"]
                if offset[i] is None or off < offset[i]:
                    offset[i] = off
                seen[i] += 1

    def cap():
        for p in procs:
            p.send_signal(signal.SIGTERM)

    t_start = time.time()
    codes = wait_all(procs, t_start + a.cap + 180, tick, cap,
                     t_start + a.cap)
    sampler.stop.set()
    sampler.join()
    for log in logs:
        log.close()
    final = [net.tx_bytes(i) - base[i] for i in range(net.nodes)]
    per_node = []
    for i in range(net.nodes):
        path = os.path.join(mdir, "node-%d.jsonl" % i)
        per_node.append([json.loads(l) for l in open(path)]
                        if os.path.exists(path) else [])
    evals = {}
    for i, lines in enumerate(per_node):
        for d in lines:
            if "accuracy" in d and offset[i] is not None:
                t = d["seconds"] + offset[i]
                evals.setdefault(d["step"], []).append(
                    (d["seconds"], sampler.at(i, t) - base[i],
                     d["accuracy"]))
    curve = []
    for step in sorted(evals):
        v = evals[step]
        if len(v) == net.nodes:
            curve.append({"step": step,
                          "seconds": sum(x[0] for x in v) / len(v),
                          "bytes": sum(x[1] for x in v) / len(v),
                          "accuracy": sum(x[2] for x in v) / len(v)})
    gossip = [lines[-1].get("gossip_bytes_sent", 0) if lines else 0
              for lines in per_node]
    steps_done = min((lines[-1]["step"] if lines else 0)
                     for lines in per_node)
    return {"codes": codes, "curve": curve, "steps": steps_done,
            "bytes_per_node": sum(final) / len(final),
            "payload_bytes_per_node": sum(gossip) / len(gossip),
            "seconds": max((lines[-1]["seconds"] if lines else 0)
                           for lines in per_node)}


def run_ddp(a, net, label, hook, work):
    base = [net.tx_bytes(i) for i in range(net.nodes)]
    logs = [open(os.path.join(work, "rank-%d.log" % i), "w")
            for i in range(net.nodes)]
    procs = []
    for i in range(net.nodes):
        cmd = [sys.executable, os.path.abspath(__file__), "--ddp-worker",
               "--rank", str(i), "--world", str(net.nodes),
               "--master", "%s:%d" % (net.addr[0], GLOO_PORT),
               "--ifname", net.ifname[i], "--hook", hook,
               "--log", os.path.join(work, "rank-%d.jsonl" % i),
               "--hidden", a.hidden, "--batch", str(a.batch),
               "--lr", str(a.lr), "--seed", str(a.seed),
               "--momentum", str(a.momentum), "--steps", str(a.steps),
               "--eval-every", str(a.eval_every),
               "--cap", str(a.cap)]
        procs.append(start_in_ns(net, i, cmd, logs[i]))
    sampler = Sampler([p.pid for p in procs], net.ifname)
    sampler.start()
    t_start = time.time()
    # The cap counts from the first step (in the workers); start-up (eight
    # `import torch` on a loaded machine) gets its own generous margin.
    codes = wait_all(procs, t_start + a.cap + 400)
    sampler.stop.set()
    sampler.join()
    for log in logs:
        log.close()
    final = [net.tx_bytes(i) - base[i] for i in range(net.nodes)]
    result = lockstep_result(
        [os.path.join(work, "rank-%d.jsonl" % i) for i in range(net.nodes)],
        sampler, base, final, codes)
    result["payload_bytes_per_node"] = None
    return result


def lockstep_result(paths, sampler, base, final, codes):
    """The result of workers that log their evaluations at the same steps
    (JSON lines with step, time, seconds, accuracy): the mean curve over
    nodes, bytes from the veth samples."""
    per = [[json.loads(line) for line in open(p)] if os.path.exists(p)
           else [] for p in paths]
    curve = []
    for k in range(min(len(r) for r in per)):
        v = [r[k] for r in per]
        curve.append({
            "step": v[0]["step"],
            "seconds": sum(d["seconds"] for d in v) / len(v),
            "bytes": sum(sampler.at(i, d["time"]) - base[i]
                         for i, d in enumerate(v)) / len(v),
            "accuracy": sum(d["accuracy"] for d in v) / len(v)})
    return {"codes": codes, "curve": curve,
            "steps": curve[-1]["step"] if curve else 0,
            "bytes_per_node": sum(final) / len(final),
            "seconds": curve[-1]["seconds"] if curve else 0}


def to_target(curve, target):
    for c in curve:
        if c["accuracy"] >= target:
            return c
    return None


# --------------------------------------------------------------------- output


def print_table(rate, results, target, steps):
    print("\n%s per node link (tbf both ways), %d nodes, %d steps, target "
          "%.0f %% mean held-out accuracy" % (rate_label(rate), 8, steps,
                                              target * 100))
    print("%-22s %6s %9s %12s %9s %11s %12s %7s" % (
        "contender", "steps", "accuracy", "bytes/node", "seconds",
        "s->target", "B->target", "exit"))
    for r in results:
        c = r["curve"][-1] if r["curve"] else {"accuracy": float("nan")}
        t = r["target"]
        print("%-22s %6d %8.2f%% %12.0f %9.1f %11s %12s %7s" % (
            r["label"], r["steps"], 100 * c["accuracy"], r["bytes_per_node"],
            r["seconds"],
            "%.1f" % t["seconds"] if t else "-",
            "%.0f" % t["bytes"] if t else "-",
            ",".join(str(x) for x in sorted(set(r["codes"])))))
    sys.stdout.flush()


def plot(rate, results, out_dir):
    """Two PNGs per rate with gnuplot: accuracy against seconds, bytes."""
    if shutil.which("gnuplot") is None:
        print("gnuplot not found: no plots")
        return []
    lab = rate_label(rate)
    data = os.path.join(out_dir, "e2e-%s.dat" % lab)
    with open(data, "w") as f:
        for r in results:
            f.write("# %s\n" % r["label"])
            for c in r["curve"]:
                f.write("%g %g %g\n" % (c["seconds"], c["bytes"] / 1e6,
                                        100 * c["accuracy"]))
            f.write("\n\n")
    pngs = []
    for col, name, xl, logx in ((1, "seconds", "wall-clock seconds", False),
                                (2, "bytes", "MB sent per node (veth)",
                                 True)):
        png = os.path.join(out_dir, "bench-e2e-%s-%s.png" % (lab, name))
        plots = ", ".join(
            "'%s' index %d using %d:3 with linespoints title '%s'" %
            (data, k, col, r["label"]) for k, r in enumerate(results)
            if r["curve"])
        script = ("set terminal pngcairo size 900,560\nset output '%s'\n"
                  "set title 'digits MLP, 8 nodes, %s links'\n"
                  "set xlabel '%s'\nset ylabel 'mean held-out accuracy %%'\n"
                  "set key bottom right\nset grid\nset yrange [50:100]\n"
                  "%splot %s\n" % (png, lab, xl,
                                   "set logscale x\n" if logx else "",
                                   plots))
        subprocess.run(["gnuplot"], input=script, text=True, check=False)
        pngs.append(png)
    os.remove(data)
    return pngs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="10M,100M,1G")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--hidden", default="512,512")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--cap", type=float, default=90.0,
                    help="seconds after which a run is stopped")
    ap.add_argument("--only", default="",
                    help="comma-separated contender labels to run")
    ap.add_argument("--rumor", default=os.path.join(REPO, "build", "bin",
                                                    "rumor"))
    ap.add_argument("--out", default=os.path.join(REPO, "build", "bench-e2e"))
    ap.add_argument("--json", default="")
    # worker mode (internal)
    ap.add_argument("--ddp-worker", action="store_true")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--master")
    ap.add_argument("--ifname")
    ap.add_argument("--hook")
    ap.add_argument("--log")
    a = ap.parse_args()
    if a.ddp_worker:
        ddp_worker(a)
        return 0
    ok, why = namespaces_allowed()
    if not ok:
        print("torch_compare: network namespaces are not allowed here (%s); "
              "nothing measured" % why)
        return 3
    a.rumor = os.path.abspath(a.rumor)
    os.makedirs(a.out, exist_ok=True)
    only = [s.strip() for s in a.only.split(",") if s.strip()]
    report = {"nodes": a.nodes, "hidden": a.hidden, "batch": a.batch,
              "lr": a.lr, "momentum": a.momentum, "seed": a.seed,
              "steps": a.steps,
              "eval_every": a.eval_every, "target": a.target, "cap": a.cap,
              "command": " ".join(sys.argv), "rates": []}
    nets = []

    def cleanup(*_):
        for n in nets:
            n.close()

    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for rate in [parse_rate(r) for r in a.rates.split(",")]:
        net = Netns(a.nodes, rate)
        nets.append(net)
        results = []
        for label, kind, arg in CONTENDERS:
            if only and label not in only:
                continue
            work = os.path.join(a.out, rate_label(rate),
                                label.replace(" ", "_").replace("%", ""))
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            t0 = time.time()
            if kind == "ddp":
                r = run_ddp(a, net, label, arg, work)
            else:
                r = run_rumor(a, net, label, arg, work)
            r["label"] = label
            r["wall"] = time.time() - t0
            r["target"] = to_target(r["curve"], a.target)
            r["capped"] = r["steps"] < a.steps
            results.append(r)
            print("  %s at %s: %d steps, %.1f s" % (
                label, rate_label(rate), r["steps"], r["seconds"]),
                file=sys.stderr)
        net.close()
        nets.remove(net)
        print_table(rate, results, a.target, a.steps)
        pngs = plot(rate, results, a.out)
        report["rates"].append({"rate_bits": rate, "label": rate_label(rate),
                                "results": results, "plots": pngs})
    path = a.json or os.path.join(a.out, "torch_compare.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print("\nwrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
