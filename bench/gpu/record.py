#!/usr/bin/python3
"""Records a bench/gpu/run.sh run in docs/benchmarks.json (key "gpu") and
regenerates docs/benchmarks.md from it.

The device tool brings run.sh's logs back into one folder (its files_at);
this parses them: the GPU and toolchain (gpu.log), the CUDA tests' counts
(cuda_tests.log), the PowerSGD step on the cuda backend with its check
against the cpu backend and its floor (lowrank_gpu.log), PyTorch's hook on
the same GPU (hook_gpu.log), the 4-node launch with and without --cuda
(launch.log) and the transport benchmark on the GPU host's 16 cores
(host.log). Nothing is typed in by hand.

usage: /usr/bin/python3 bench/gpu/record.py LOG_DIR DATE [--out docs]
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import report  # noqa: E402


def read(d, name):
    with open(os.path.join(d, name)) as f:
        return f.read()


def sections(text):
    """(command, body) per '== name: command' block of a step log."""
    out = []
    for block in re.split(r"^== ", text, flags=re.M)[1:]:
        head, _, body = block.partition("\n")
        out.append((head.split(": ", 1)[1], body))
    return out


def parse_tests(text):
    rows = []
    for cmd, body in sections(text):
        name = cmd.split()[-1] if "pytest" not in cmd else "pytest " + cmd.split()[-1]
        passed = re.search(r"\[  PASSED  \] (\d+)", body) or \
            re.search(r"(\d+) passed", body)
        failed = re.search(r"\[  FAILED  \] (\d+)", body) or \
            re.search(r"(\d+) failed", body)
        skipped = re.search(r"\[  SKIPPED \] (\d+)", body) or \
            re.search(r"(\d+) skipped", body)
        rows.append({"test": os.path.basename(name),
                     "passed": int(passed.group(1)) if passed else 0,
                     "failed": int(failed.group(1)) if failed else 0,
                     "skipped": int(skipped.group(1)) if skipped else 0})
    return rows


def parse_lowrank(text):
    copy = float(re.search(r"copy ([\d.]+) GB/s", text).group(1))
    models, cur, checks = [], None, {}
    for line in text.splitlines():
        m = re.match(r"^(\S.*): (\d+) tensors, (\d+) parameters", line)
        if m:
            cur = {"model": os.path.basename(m.group(1)).replace(".shapes", ""),
                   "tensors": int(m.group(2)),
                   "parameters": int(m.group(3)), "ranks": []}
            models.append(cur)
            continue
        m = re.match(r"\s+check rank (\d+): cuda vs cpu relative distance (\S+)", line)
        if m:
            checks[int(m.group(1))] = float(m.group(2))
            continue
        m = re.match(r"\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x"
                     r"(?:\s+([\d.]+)\s+[\d.]+x)?", line)
        if m and cur is not None:
            r = int(m.group(1))
            row = {"rank": r, "seconds": float(m.group(2)),
                   "floor_seconds": float(m.group(3)),
                   "x_floor": float(m.group(4)),
                   "cpu_distance": checks.get(r)}
            if m.group(5):  # the per-shape-group path, timed alongside
                row["grouped_seconds"] = float(m.group(5))
            cur["ranks"].append(row)
    return copy, models


def parse_hook(text):
    out = {}
    for cmd, body in sections(text):
        model = os.path.basename(cmd.split()[2]).replace(".shapes", "")
        out[model] = {int(r): float(s) for r, s in
                      re.findall(r"^rank (\d+) seconds_per_step (\S+)", body, re.M)}
    return out


def parse_launch(text):
    rows = []
    for cmd, body in sections(text):
        m = re.search(r"accuracy ([\d.]+)%, loss ([\d.]+)", body)
        sent = re.findall(r"sent ([\d.]+) kB", body)
        rows.append({"cuda": "--cuda" in cmd, "command": cmd,
                     "average_accuracy": float(m.group(1)) if m else None,
                     "average_loss": float(m.group(2)) if m else None,
                     "kb_sent_last": sent[-1] if sent else None})
    return rows


def parse_net(text):
    rows = []
    for line in text.splitlines():
        m = re.match(r"^(64KiB|1MiB|16MiB)\s+(.*)$", line)
        if m:
            v = m.group(2).split()
            rows.append({"size": m.group(1), "netcurve_gbps": float(v[4]),
                         "box_chunk_gbps": float(v[6]),
                         "netcurve_over_box": float(v[11].rstrip("%")) / 100})
    return rows


def parse_peer(text):
    """bench/gpu/peer_gpu.py's lines: each config's GPU and mixed runs
    against its CPU run."""
    rows = []
    for m in re.finditer(
            r"^(\S+)\s+(\S+)\s+model distance (\S+) \(tolerance (\S+)\)\s+"
            r"bytes sent (equal|.*?)\s+PCIe (\d+) B/step, payload (\d+) "
            r"B/step, ratio (\S+)\s+(ok|FAILED)$", text, re.M):
        rows.append({"config": m.group(1), "layout": m.group(2),
                     "distance": float(m.group(3)),
                     "tolerance": float(m.group(4)),
                     "bytes_equal": m.group(5) == "equal",
                     "pcie_per_step": int(m.group(6)),
                     "payload_per_step": int(m.group(7)),
                     "ok": m.group(9) == "ok"})
    return rows


def parse_codecs(text):
    """bench/gpu/codec_gpu.py's table and its copy rate."""
    m = re.search(r"device-to-device copy ([\d.]+) GB/s", text)
    rows = []
    for r in re.finditer(
            r"^(\S+)\s+([\d.]+)\s+([\d.]+)x\s+([\d.]+)\s+(\d+)\s+(\S+)"
            r"\s+(\S+)\s+(equal|DIFFERENT)$", text, re.M):
        rows.append({"codec": r.group(1), "encode_gbps": float(r.group(2)),
                     "decode_gbps": float(r.group(4)),
                     "payload_bytes": int(r.group(5)),
                     "torch_gbps": None if r.group(6) == "-" else float(r.group(6)),
                     "cpu_equal": r.group(8) == "equal"})
    return {"copy_gbps": float(m.group(1)) if m else None, "codecs": rows}


def read_optional(d, name):
    return read(d, name) if os.path.exists(os.path.join(d, name)) else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs")
    ap.add_argument("date")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "..", "docs"))
    a = ap.parse_args()
    gpu = read(a.logs, "gpu.log").splitlines()
    copy, models = parse_lowrank(read(a.logs, "lowrank_gpu.log"))
    hook = parse_hook(read(a.logs, "hook_gpu.log"))
    for m in models:
        label = "4096x4096" if m["model"] == "4096 x 4096" else m["model"]
        for r in m["ranks"]:
            r["hook_seconds"] = hook.get(label, {}).get(r["rank"])
    record = {"date": a.date, "gpu": gpu[1], "cores": int(gpu[4]),
              "toolchain": gpu[2] + "; " + gpu[5].rsplit(" ", 1)[0],
              "command": "bench/gpu/run.sh (device tool), then "
                         "bench/gpu/record.py LOGS %s" % a.date,
              "copy_gbps": copy, "lowrank": models,
              "tests": parse_tests(read(a.logs, "cuda_tests.log")),
              "launch": parse_launch(read(a.logs, "launch.log")),
              "net": parse_net(read(a.logs, "host.log")),
              "peer": parse_peer(read_optional(a.logs, "peer_gpu.log")),
              "codecs": parse_codecs(read_optional(a.logs, "codec_gpu.log"))}
    jpath = os.path.join(a.out, "benchmarks.json")
    with open(jpath) as f:
        data = json.load(f)
    data["gpu"] = record
    with open(jpath, "w") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(a.out, "benchmarks.md"), "w") as f:
        f.write(report.render(data))


if __name__ == "__main__":
    main()
