#!/usr/bin/python3
"""`make bench`: every benchmark tier, one report (issue 11).

Runs each `rumor bench PART` several times, parses its text output (every
figure there is printed next to a reference measured in the same process,
seconds earlier), and keeps per figure the median over the runs, the
spread (max - min over the median) and the median of the per-run ratios
to the reference. Then the scaling tier (`rumor sim consensus` timed over
two step counts, `rumor launch` processes on loopback), the end-to-end
tier (bench/torch_compare.py over shaped links) and the GPU note. Writes
docs/benchmarks.md, docs/benchmarks.json and docs/bench-e2e-*.png.

Usage (from the repository root, as root for the end-to-end tier):
  /usr/bin/python3 bench/run_bench.py [--rumor build/bin/rumor] [--quick]
      [--only core,compress,lowrank,net,gossip,scaling,e2e,torch,wan]
      [--out docs] [--torch-json PATH,...]
--only measures the parts named and keeps the others' figures from the
existing docs/benchmarks.json; the report lists what was measured again.
--torch-json records runs of bench/torch_e2e.py made by hand (its --json
files, e.g. one rate at a time on a quiet host) as the same-loop tier;
rates measured before and not again are kept.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM = r"([-+]?\d+(?:\.\d+)?)"


def sh(cmd, env=None, timeout=None):
    """Runs cmd (list); returns (stdout, seconds). Raises on failure."""
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, cwd=REPO, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), p.returncode,
                                                 p.stderr.strip()[-2000:]))
    return p.stdout, time.time() - t0


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# ------------------------------------------------------------------- machine


def machine(rumor):
    info = {"date_utc": datetime.datetime.utcnow().strftime(
        "%Y-%m-%d %H:%M UTC")}
    lscpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE,
                           text=True).stdout
    for key, name in (("Model name", "cpu"), ("CPU(s)", "cores"),
                      ("Hypervisor vendor", "hypervisor"),
                      ("L3 cache", "l3")):
        m = re.search(r"^%s:\s+(.*)$" % re.escape(key), lscpu, re.M)
        if m:
            info[name] = m.group(1).strip()
    flags = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                break
    wanted = ["sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f",
              "avx512bw", "avx512_bf16", "aes", "sha_ni"]
    info["flags"] = [f for f in wanted if f in flags]
    with open("/proc/meminfo") as f:
        info["memory_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    info["kernel"] = os.uname().release
    info["load_start"] = os.getloadavg()
    versions = {}
    for pkg in ("libzmq5", "libsodium23", "libzstd1", "libopenblas0-pthread",
                "python3-torch", "gcc", "libcjson1"):
        p = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True)
        if p.returncode == 0:
            versions[pkg] = p.stdout
    if shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"):
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        out = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE,
                             text=True).stdout
        m = re.search(r"release ([\d.]+)", out)
        if m:
            versions["nvcc"] = m.group(1)
    out = subprocess.run([rumor, "version"], stdout=subprocess.PIPE,
                         text=True).stdout.strip()
    versions["rumor"] = " ".join(out.split()).removeprefix("rumor ")
    info["versions"] = versions
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, cwd=REPO).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "-uno"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, cwd=REPO).stdout.strip()
    info["commit"] = git + (" (with uncommitted changes)" if dirty else "")
    return info


# ------------------------------------------------------------------ parsers
# Each returns a list of figures: dict(name, value, unit, ref, ref_value,
# ratio, ratio_unit). `ratio` is against a reference of the same run.


def fig(name, value, unit, ref=None, ref_value=None, ratio=None,
        ratio_unit="x"):
    return {"name": name, "value": value, "unit": unit, "ref": ref,
            "ref_value": ref_value, "ratio": ratio, "ratio_unit": ratio_unit}


def parse_core(out):
    mem = float(re.search(r"memory read \(1 core\)\s+" + NUM, out).group(1))
    fma = float(re.search(r"fp32 FMA \(1 core, AVX2\)\s+" + NUM,
                          out).group(1))
    figs = [fig("memory read, 1 core", mem, "GB/s"),
            fig("fp32 FMA, 1 core", fma, "GFLOP/s")]
    for key, name in (("crc32c", "crc32c"),
                      ("philox uniform floats", "Philox4x32-10 (scalar)")):
        v = float(re.search(re.escape(key) + r"\s+" + NUM, out).group(1))
        figs.append(fig(name, v, "GB/s", "memory read", mem, v / mem))
    return figs


# Codecs measured again as error feedback calls them (encode also writes
# C(x)).
EF_SPECS = ["sign", "qsgd:bits=4", "qsgd:bits=8", "terngrad", "natural",
            "fp16", "topk:ratio=0.01"]


def parse_compress(out):
    mem = float(re.search(r"memory read \(1 core\)\s+" + NUM, out).group(1))
    figs = [fig("memory read, 1 core", mem, "GB/s")]
    row = re.compile(r"^(\S+)\s+" + NUM + r"\s+" + NUM + r"\s+" + NUM +
                     r"x\s+" + NUM + r"\s+" + NUM + r"x$", re.M)
    for m in row.finditer(out):
        codec, bits = m.group(1), float(m.group(2))
        enc, dec = float(m.group(3)), float(m.group(5))
        figs.append(fig("encode %s (%.3f bits/value)" % (codec, bits), enc,
                        "GB/s", "memory read", mem, enc / mem))
        figs.append(fig("decode %s" % codec, dec, "GB/s", "memory read", mem,
                        dec / mem))
    q = re.search(r"quickselect \(nth_element\)\s+" + NUM, out)
    r = re.search(r"radix select \(topk codec\)\s+" + NUM, out)
    if q and r:
        qv, rv = float(q.group(1)), float(r.group(1))
        figs.append(fig("top-k 1 %, radix select (codec)", rv, "GB/s",
                        "quickselect (nth_element)", qv, rv / qv))
    ent = re.search(r"empirical entropy " + NUM + r" bits/symbol \((\d+) "
                    r"bytes\)", out)
    huf = re.search(r"Huffman stage alone\s+(\d+) bytes.*?enc\s+" + NUM +
                    r" GB/s\s+dec\s+" + NUM, out)
    zst = re.search(r"zstd -1 \(libzstd ([\d.]+)\)\s+(\d+) bytes.*?enc\s+" +
                    NUM + r" GB/s\s+dec\s+" + NUM, out)
    if ent and huf and zst:
        e = float(ent.group(2))
        figs.append(fig("fp8 symbols, Huffman size", float(huf.group(1)),
                        "bytes", "empirical entropy", e,
                        100 * (float(huf.group(1)) / e - 1), "% over"))
        figs.append(fig("fp8 symbols, zstd -1 size", float(zst.group(2)),
                        "bytes", "empirical entropy", e,
                        100 * (float(zst.group(2)) / e - 1), "% over"))
        he, ze = float(huf.group(2)), float(zst.group(3))
        figs.append(fig("fp8 symbols, Huffman encode", he, "GB/s",
                        "zstd -1 encode", ze, he / ze))
        hd, zd = float(huf.group(3)), float(zst.group(4))
        figs.append(fig("fp8 symbols, Huffman decode", hd, "GB/s",
                        "zstd -1 decode", zd, hd / zd))
    return figs


def parse_lowrank(out, blas_out=None):
    mem = float(re.search(r"memory read \(1 core\)\s+" + NUM, out).group(1))
    figs = [fig("memory read, 1 core", mem, "GB/s")]
    blas = {}
    if blas_out:
        for label, rank, secs in _lowrank_rows(blas_out):
            blas[(label, rank)] = secs
    for label, rank, secs, floor_s, torch_s in _lowrank_rows(out,
                                                             full=True):
        name = "PowerSGD step, %s, rank %s" % (label, rank)
        figs.append(fig(name, secs, "s", "memory floor (16 B/element)",
                        floor_s, secs / floor_s))
        if torch_s is not None:
            figs.append(fig(name + " vs PyTorch hook", secs, "s",
                            "PyTorch powerSGD_hook (CPU, 1 thread)", torch_s,
                            torch_s / secs, "x faster"))
        if (label, rank) in blas:
            figs.append(fig(name + " vs OpenBLAS path", secs, "s",
                            "same step with cblas_sgemm (OpenBLAS, 1 "
                            "thread)", blas[(label, rank)],
                            blas[(label, rank)] / secs, "x faster"))
    return figs


def _lowrank_rows(out, full=False):
    label = None
    rows = []
    for line in out.splitlines():
        m = re.match(r"^(.+): \d+ tensors, \d+ parameters$", line)
        if m:
            label = m.group(1)
            continue
        m = re.match(r"^\s*(\S+)\s+" + NUM + r"\s+" + NUM + r"\s+" + NUM +
                     r"x(?:\s+" + NUM + r"\s+" + NUM + r"x)?", line)
        if m and label:
            if full:
                rows.append((label, m.group(1), float(m.group(2)),
                             float(m.group(3)),
                             float(m.group(5)) if m.group(5) else None))
            else:
                rows.append((label, m.group(1), float(m.group(2))))
    return rows


def parse_net(out):
    figs = []
    row = re.compile(r"^(\d+(?:KiB|MiB))" + (r"\s+" + NUM) * 8 +
                     (r"\s+" + NUM + "%") * 5, re.M)
    for m in row.finditer(out):
        size = m.group(1)
        v = [float(m.group(i)) for i in range(2, 10)]
        tcp, zmq, curve, net, ncurve, boxm, boxc, pipe = v
        figs.append(fig("raw TCP, %s messages" % size, tcp, "GB/s"))
        figs.append(fig("ZeroMQ plain, %s" % size, zmq, "GB/s", "raw TCP",
                        tcp, zmq / tcp))
        figs.append(fig("rumor_net plain, %s" % size, net, "GB/s", "raw TCP",
                        tcp, net / tcp))
        figs.append(fig("ZeroMQ CURVE, %s" % size, curve, "GB/s",
                        "cipher ceiling (1 core, box of the message)", boxm,
                        curve / boxm))
        figs.append(fig("ZeroMQ CURVE vs pipe, %s" % size, curve, "GB/s",
                        "box/unbox pipe on 2 threads", pipe, curve / pipe))
        figs.append(fig("rumor_net CURVE, %s" % size, ncurve, "GB/s",
                        "cipher ceiling (1 core, box of the chunk)", boxc,
                        ncurve / boxc))
    m = re.search(r"tcp " + NUM + r" us, zmq " + NUM + r" us, curve " + NUM +
                  r" us, rumor_net curve " + NUM + " us", out)
    if m:
        tcp = float(m.group(1))
        for i, name in ((2, "ZeroMQ plain"), (3, "ZeroMQ CURVE"),
                        (4, "rumor_net CURVE")):
            v = float(m.group(i))
            figs.append(fig("round trip 64 B, %s" % name, v, "us",
                            "raw TCP round trip", tcp, v / tcp))
    for m in re.finditer(r"rate\s+" + NUM + r" Mbit/s: achieved\s+" + NUM,
                         out):
        want, got = float(m.group(1)), float(m.group(2))
        figs.append(fig("link shaping at %g Mbit/s" % want, got, "Mbit/s",
                        "configured rate", want, got / want))
    for m in re.finditer(r"delay\s+(\d+) ms: one-way time of 64 bytes " +
                         NUM, out):
        want, got = float(m.group(1)), float(m.group(2))
        figs.append(fig("link delay %d ms" % want, got, "ms",
                        "configured delay", want, got / want))
    return figs


def parse_gossip(out):
    mem = float(re.search(r"memory read " + NUM, out).group(1))
    figs = [fig("memory read, 1 core", mem, "GB/s")]
    row = re.compile(r"^(.+?)\s+(100x100|resnet18)\s+" + NUM + r"\s+(\d+)\s+" +
                     NUM + r"x$", re.M)
    for m in row.finditer(out):
        secs, xs = float(m.group(3)), float(m.group(5))
        figs.append(fig("%s, %s, s/step" % (m.group(1).strip(), m.group(2)),
                        secs, "s", "stream 8 models at memory read",
                        secs / xs, xs))
        figs.append(fig("%s, %s, bytes/node/step" % (m.group(1).strip(),
                                                     m.group(2)),
                        float(m.group(4)), "bytes"))
    return figs


# --------------------------------------------------------------- aggregation


def aggregate(runs):
    """runs: list (one per repetition) of figure lists -> figure list with
    median, min, max, spread and the median of the per-run ratios."""
    by_name = {}
    order = []
    for figs in runs:
        for f in figs:
            if f["name"] not in by_name:
                by_name[f["name"]] = []
                order.append(f["name"])
            by_name[f["name"]].append(f)
    result = []
    for name in order:
        fs = by_name[name]
        vals = [f["value"] for f in fs]
        med = statistics.median(vals)
        agg = dict(fs[0])
        agg.update({
            "runs": len(vals), "values": vals, "value": med,
            "min": min(vals), "max": max(vals),
            "spread": (max(vals) - min(vals)) / med if med else 0.0})
        if fs[0]["ref_value"] is not None:
            agg["ref_value"] = statistics.median(f["ref_value"] for f in fs)
        if fs[0]["ratio"] is not None:
            ratios = [f["ratio"] for f in fs]
            agg["ratio"] = statistics.median(ratios)
            agg["ratios"] = ratios
        result.append(agg)
    return result


# Parts that run another part's command with other arguments.
SUBCOMMAND = {"compress_ef": "compress"}


def run_part(rumor, part, args, reps, parser, extra=None):
    part = SUBCOMMAND.get(part, part)
    cmd = [rumor, "bench", part] + args
    runs, outs, secs = [], [], []
    for r in range(reps):
        log("rumor bench %s %s (run %d of %d)" % (part, " ".join(args), r + 1,
                                                  reps))
        out, s = sh(cmd)
        extra_out = None
        if extra:
            extra_out, s2 = sh(extra[0], env=extra[1])
            s += s2
        runs.append(parser(out, extra_out) if extra else parser(out))
        outs.append(out)
        secs.append(s)
    return {"command": " ".join(["./" + os.path.relpath(rumor, REPO), "bench",
                                 part] + args),
            "extra_command": (" ".join("%s=%s" % kv for kv in
                                       extra[1].items()) + " " +
                              " ".join(["./" + os.path.relpath(rumor, REPO)] +
                                       extra[0][1:])) if extra else None,
            "reps": reps, "seconds": secs, "figures": aggregate(runs),
            "last_output": outs[-1]}


# -------------------------------------------------------------------- scaling


def parse_scaling(out):
    figs = []
    row = re.compile(r"^(.+?)\s+(\d+)\s+(\d+)\s+" + NUM + r"\s+" + NUM +
                     r"\s+(\d+)\s+" + NUM + r"x$")
    sweep = "nodes"
    for line in out.splitlines():
        if line.startswith("model size:"):
            sweep = "size"
        m = row.match(line)
        if not m:
            continue
        algo, nodes, params = m.group(1).strip(), m.group(2), m.group(3)
        secs, xs = float(m.group(4)), float(m.group(7))
        name = "%s sweep: %s, %s nodes, %s parameters" % (sweep, algo, nodes,
                                                          params)
        figs.append(fig(name + ", s/step", secs, "s",
                        "stream every node's model at memory read",
                        secs / xs, xs))
        figs.append(fig(name + ", bytes/node/step", float(m.group(6)),
                        "bytes"))
    return figs


def process_scaling(rumor, quick):
    """N `rumor node` processes on loopback (as far as 2 cores allow)."""
    res = []
    for n in ([4, 8] if quick else [4, 8, 16, 32]):
        for label, args in (("powergossip r1", ["--algo", "powergossip",
                                                "--rank", "1"]),
                            ("allreduce", ["--algo", "allreduce"])):
            log("scaling: %d rumor node processes, %s" % (n, label))
            res.append(launch_cost(rumor, n, label, args))
    return res


def launch_cost(rumor, n, label, args):
    steps = 40
    with tempfile.TemporaryDirectory(prefix="rumor-bench-") as d:
        topo = os.path.join(d, "ring.topo")
        sh([rumor, "topo", "gen", "ring", str(n), "--local", "--out", topo])
        try:
            sh([rumor, "launch", "--topology", topo, "--metrics-dir",
                os.path.join(d, "m"), "--insecure", "--hidden", "512,512",
                "--steps", str(steps), "--eval-every", str(steps),
                "--progress", "off"] + args,
               env={"OPENBLAS_NUM_THREADS": "1"}, timeout=600)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return {"nodes": n, "algo": label, "error": str(e)[-300:]}
        per_step, sent = [], []
        for i in range(n):
            lines = [json.loads(l) for l in
                     open(os.path.join(d, "m", "node-%d.jsonl" % i))]
            # From step 10 on: links are up and the first touches done.
            a, b = lines[9], lines[-1]
            per_step.append((b["seconds"] - a["seconds"]) /
                            (b["step"] - a["step"]))
            sent.append(b["gossip_bytes_sent"] / b["step"])
    return {"nodes": n, "algo": label, "params": 301066, "steps": steps,
            "s_per_step": statistics.median(per_step),
            "bytes_per_node_step": statistics.median(sent)}


# ------------------------------------------------------------------------ e2e


def e2e(quick, out_dir, rumor):
    path = os.path.join(REPO, "build", "bench-e2e", "torch_compare.json")
    cmd = [sys.executable, os.path.join("bench", "torch_compare.py"),
           "--rumor", rumor, "--json", path]
    if quick:
        cmd += ["--rates", "100M", "--steps", "60", "--cap", "40"]
    else:
        cmd += ["--rates", "10M,100M,1G", "--steps", "150", "--cap", "60"]
    log("end-to-end: " + " ".join(cmd[1:]))
    t0 = time.time()
    p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    print(p.stdout, flush=True)
    if p.returncode == 3:
        return {"skipped": p.stdout.strip().splitlines()[-1],
                "command": " ".join(cmd[1:])}
    if p.returncode != 0:
        return {"error": "torch_compare.py exited %d" % p.returncode,
                "command": " ".join(cmd[1:])}
    with open(path) as f:
        rep = json.load(f)
    rep["wall_seconds"] = time.time() - t0
    rep["stdout"] = p.stdout
    rep["command"] = ("/usr/bin/python3 " + " ".join(cmd[1:])).replace(
        REPO + "/", "")
    for r in rep["rates"]:
        kept = []
        for png in r.get("plots", []):
            if os.path.exists(png):
                dst = os.path.join(out_dir, os.path.basename(png))
                shutil.copyfile(png, dst)
                kept.append(os.path.relpath(dst, REPO))
        r["plots"] = kept
    return rep


# ---------------------------------------------------------------- same loop


def torch_loop(quick, out_dir, imported, kept):
    """bench/torch_e2e.py: one PyTorch loop, DDP against rumor.torch.

    imported: torch_e2e.json files measured by hand (`bench/torch_e2e.py
    --json PATH`, e.g. one rate at a time on a quiet host), recorded
    instead of a run. kept: the tier's earlier record; its rates that
    were not measured again stay."""
    runs = [_torch_import(p, out_dir) for p in imported] if imported else [
        _torch_run(quick, out_dir)]
    for run in runs:
        if "results" not in run:
            return run
    rep = {"runs": [], "results": {}, "plots": []}
    if kept and "runs" in kept:
        rep = kept
    for run in runs:
        for old in rep["runs"]:
            old["rates"] = [r for r in old["rates"]
                            if r not in run["results"]]
        rep["runs"] = [r for r in rep["runs"] if r["rates"]] + [run]
        rep["results"].update(run.pop("results"))
        rep["plots"] = sorted(set(rep["plots"]) | set(run.pop("plots")))
    return rep


def _torch_command(args):
    return ("/usr/bin/python3 bench/torch_e2e.py --nodes %d --rates %s "
            "--steps %d --cap %g" % (args["nodes"], args["rates"],
                                     args["steps"], args["cap"]))


def _torch_plots(results, png_dir, out_dir):
    plots = []
    for rate in results:
        png = os.path.join(png_dir, "bench-torch-%s-seconds.png" % rate)
        if os.path.exists(png):
            os.makedirs(out_dir, exist_ok=True)
            dst = os.path.join(out_dir, os.path.basename(png))
            shutil.copyfile(png, dst)
            plots.append(os.path.relpath(dst, REPO))
    return plots


def _torch_import(path, out_dir):
    with open(path) as f:
        rep = json.load(f)
    a = rep["args"]
    log("same loop: recording %s (%s)" % (path, _torch_command(a)))
    return {"command": _torch_command(a), "args": a,
            "rates": sorted(rep["results"]), "results": rep["results"],
            "stdout": rep.get("stdout", ""),
            # the plots are in the run's --out (a JSON without it: beside)
            "plots": _torch_plots(rep["results"],
                                  a.get("out") or os.path.dirname(path),
                                  out_dir)}


def _torch_run(quick, out_dir):
    work = os.path.join(REPO, "build", "bench-torch")
    path = os.path.join(work, "torch_e2e.json")
    cmd = [sys.executable, os.path.join("bench", "torch_e2e.py"), "--json",
           path, "--out", work]
    if quick:
        cmd += ["--nodes", "4", "--rates", "100M", "--steps", "100",
                "--cap", "60"]
    else:
        cmd += ["--nodes", "8", "--rates", "10M,100M,1G", "--steps", "600",
                "--cap", "300"]
    log("same loop: " + " ".join(cmd[1:]))
    t0 = time.time()
    p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    print(p.stdout, flush=True)
    command = ("/usr/bin/python3 " + " ".join(cmd[1:])).replace(REPO + "/",
                                                                "")
    if p.returncode == 3:
        return {"skipped": p.stdout.strip().splitlines()[-1],
                "command": command}
    if p.returncode != 0:
        return {"error": "torch_e2e.py exited %d" % p.returncode,
                "command": command}
    with open(path) as f:
        rep = json.load(f)
    return {"command": command, "args": rep["args"],
            "rates": sorted(rep["results"]), "results": rep["results"],
            "wall_seconds": time.time() - t0, "stdout": p.stdout,
            "plots": _torch_plots(rep["results"], work, out_dir)}


# -------------------------------------------------------------------- report
def wan_quick(rumor):
    """bench/wan/wan.py --quick: the WAN tier's smoke run (4 nodes,
    100 Mbit/s with 25 ms, 20 steps); the full matrix is make bench-wan."""
    out = os.path.join(REPO, "build", "bench-wan-quick")
    cmd = [sys.executable, os.path.join("bench", "wan", "wan.py"), "--quick",
           "--rumor", rumor, "--out", out]
    log(" ".join(cmd))
    p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    path = os.path.join(out, "wan.json")
    if p.returncode != 0 or not os.path.exists(path):
        return {"command": "bench/wan/wan.py --quick",
                "error": "exited %d: %s" % (p.returncode,
                                            p.stdout.strip()[-500:])}
    with open(path) as f:
        return json.load(f)


# Lives in bench/report.py so the Markdown can be regenerated from the JSON.


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rumor", default=os.path.join(REPO, "build", "bin",
                                                    "rumor"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default=os.path.join(REPO, "docs"))
    ap.add_argument("--torch-json", default="",
                    help="record these torch_e2e.json files (comma-"
                    "separated) as the same-loop tier instead of running it")
    a = ap.parse_args()
    rumor = os.path.abspath(a.rumor)
    only = set(x for x in a.only.split(",") if x)

    def want(part):
        return not only or part in only or SUBCOMMAND.get(part) in only

    t_start = time.time()
    reps = 1 if a.quick else 3
    jpath = os.path.join(a.out, "benchmarks.json")
    data = {"quick": a.quick, "machine": machine(rumor), "parts": {}}
    if only and os.path.exists(jpath):
        # A partial run keeps the other parts' figures and says which
        # parts were measured again, when and under what load.
        with open(jpath) as f:
            data = json.load(f)
        rerun = {"parts": sorted(only), "machine": machine(rumor),
                 "date": datetime.datetime.now(datetime.timezone.utc)
                 .strftime("%Y-%m-%d %H:%M UTC")}
        data.setdefault("reruns", []).append(rerun)
    blas_env = {"RUMOR_LOWRANK_NO_AVX2": "1", "OPENBLAS_NUM_THREADS": "1"}
    plan = [
        ("core", [], reps, parse_core, None),
        # Best of 5 encodes per run: one encode of 64 MB takes a few ms,
        # and on a shared host one slow moment should not set a row.
        ("compress", ["--reps", "5"], reps, parse_compress, None),
        ("compress_ef", ["--reps", "5", "--approx"] + EF_SPECS, reps,
         parse_compress, None),
        ("lowrank", ["--steps", "5"] if not a.quick else ["--steps", "3"],
         reps, parse_lowrank,
         ([rumor, "bench", "lowrank", "--steps", "3", "--no-torch"],
          blas_env)),
        ("net", [], 1 if a.quick else 2, parse_net, None),
        ("gossip", [], 1, parse_gossip, None),
        ("scaling", ["--max-params", "1e7" if a.quick else "1e8"], 1,
         parse_scaling, None),
    ]
    if a.quick:
        plan[1] = ("compress", ["--reps", "1", "--n", "4194304"], 1,
                   parse_compress, None)
        plan[2] = ("compress_ef", ["--reps", "1", "--n", "4194304",
                                   "--approx"] + EF_SPECS, 1, parse_compress,
                   None)
    for part, args, r, parser, extra in plan:
        if not want(part):
            continue
        try:
            data["parts"][part] = run_part(rumor, part, args, r, parser,
                                           extra)
        except RuntimeError as e:
            data["parts"][part] = {"error": str(e)}
            log("part %s failed: %s" % (part, e))
    if want("scaling"):
        data["scaling"] = {"nodes_proc": process_scaling(rumor, a.quick)}
    if want("e2e"):
        data["e2e"] = e2e(a.quick, a.out, rumor)
    if want("torch"):
        data["torch"] = torch_loop(a.quick, a.out,
                                   [p for p in a.torch_json.split(",") if p],
                                   data.get("torch"))
    if want("wan"):
        data["wan_quick"] = wan_quick(rumor)
    wan_full = os.path.join(a.out, "bench-wan.json")
    if os.path.exists(wan_full):
        # The full matrix (`make bench-wan`, about 25 minutes) is kept
        # from its own file; `make bench` runs only its smoke run.
        with open(wan_full) as f:
            data["wan"] = json.load(f)
    if "reruns" in data and only:
        data["reruns"][-1]["machine"]["load_end"] = os.getloadavg()
        data["reruns"][-1]["wall_seconds"] = time.time() - t_start
    else:
        data["machine"]["load_end"] = os.getloadavg()
        data["wall_seconds"] = time.time() - t_start
    os.makedirs(a.out, exist_ok=True)
    with open(jpath, "w") as f:
        json.dump(data, f, indent=1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import report
    mpath = os.path.join(a.out, "benchmarks.md")
    with open(mpath, "w") as f:
        f.write(report.render(data))
    log("wrote %s and %s in %.0f s" % (os.path.relpath(mpath, REPO),
                                       os.path.relpath(jpath, REPO),
                                       time.time() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
