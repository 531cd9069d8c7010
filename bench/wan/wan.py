#!/usr/bin/python3
"""The WAN benchmark of issue 32: compute share over slow links.

Runs `rumor launch` rings of N nodes (N = 4, 8) over Rumor's own link
shaping (--rate, --delay-ms: 10 Mbit/s with 50 ms one-way delay, 100 Mbit/s
with 25 ms, 1 Gbit/s with 5 ms) on one workload, the MLP --hidden
1024,1024 on Fashion-MNIST with --batch 256 for 200 steps, for each
synchronization scheme of CONFIGS, and reports per run

- every time from runs that do not evaluate: evaluating the held-out
  split every 20 steps costs as many FLOPs as the training steps between
  two evaluations, and is the benchmark's instrument, not the training.
  Each scheme runs once at the fastest link with evaluations (accuracy
  curve, bytes, final accuracy) and once per link with --eval-every 0
  (times; the last step's evaluation, seconds_eval, is subtracted). The
  runs compute the same bits at any link and with or without evaluations.
- compute share, two ways, both over the training phase (the metrics'
  first step to their last, so start-up and the links' handshakes are
  left out): (a) from the metrics JSONL, (seconds_compute[last] -
  seconds_compute[first]) / (seconds[last] - seconds[first]), the mean over
  the nodes; (b) the training-phase wall time of the compute-only run
  (local SGD with --period STEPS, same links and nodes: its one
  synchronization is at its first step, which the training phase leaves
  out, so that phase is the nodes' computation alone) over the run's own;
- seconds and MB sent per node (gossip_bytes_sent) to a target accuracy:
  the first evaluation step whose held-out accuracy (the mean over the
  nodes of each node's own model) reaches TARGET = the all-reduce run's
  final accuracy (average model, same N) minus 0.5 points;
- the final accuracy at equal steps (the launcher's average model).

Rounds (--rounds K; `make bench-wan` runs 3). One timing run of a scheme
and one of the compute-only run, minutes apart, differ by the host's
other work as much as by the scheme (run-to-run spread of a few per
cent on a shared 2-core host). So after each node count's matrix the
runs of the share targets (SHARE_TARGETS) are timed K - 1 more times at
their links, the compute-only run first and then each scheme, in turn;
their shares are the medians of the K rounds' ratios (wall) and shares
(metrics), and the targets list every round's.

Projections. A run whose numbers do not depend on timing (every node
computes the same bits at any link speed: exact all-reduce, exact local
SGD / DiLoCo, D-PSGD without skipped steps, and the stale modes, whose
landing step is fixed) is timed in full at the fastest link only; at the
slower links a prefix of a few steps is timed and its seconds per step
give the run's time. Those figures are labelled "projected from K measured
steps" everywhere; accuracy and bytes are the full run's. The deadline is
raised (--deadline-ms 600000, fixed) so that no step is skipped and the
runs stay deterministic; every run's skipped counter is recorded.

New options (--stale, --fragments) are probed first, by their effect: two
8-step least-squares runs, without and with the option, must end with
different models. A config that needs one runs only then; otherwise its
rows say "not run: option missing" (unknown to this build), "not run:
option not implemented" (accepted, no effect) or "refused: REASON".

Usage (from the repository root):
  /usr/bin/python3 bench/wan/wan.py [--rumor build/bin/rumor] [--quick]
      [--nodes 4,8] [--links 10M/50,100M/25,1G/5] [--steps 200]
      [--configs allreduce,diloco,...,compute_only] [--rounds K]
      [--out DIR] [--doc] [--add] [--render] [--note TEXT]
--quick: a smoke run (20 steps, period 10, 4 nodes, 100M/25ms, no
projection). --out: where wan.json, wan.md and the PNGs go (default
build/bench-wan). --doc: write docs/bench-wan.json and the PNGs in docs/
and refresh the "Slow links (WAN)" section of docs/benchmarks.md. --add:
keep what the existing record has and this session does not measure.
--render: run nothing, only the plots and the report from the record.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
WORKLOAD = ["--workload", "mlp", "--hidden", "1024,1024", "--dataset",
            "fashion-mnist", "--batch", "256", "--seed", "1"]
COMMON = ["--insecure", "--progress", "off", "--deadline-ms", "600000",
          "--deadline-factor", "0"]
LINKS = ["10M/50", "100M/25", "1G/5"]
# DiLoCo's outer step as its paper sets it (Douillard et al. 2023: outer
# Nesterov, lr 0.7, momentum 0.9); Rumor's own defaults (1, 0) are plain
# local SGD.
DILOCO = ["--algo", "localsgd", "--period", "{H}", "--outer-lr", "0.7",
          "--outer-momentum", "0.9"]
# key, label, node options, features needed, exact (same bits at any link,
# so timed on a prefix at the slower links), family ("local": syncs every H
# steps; "step": exchanges every step). The overlapped modes are exact too,
# but their share is what issue 32 targets: they run in full everywhere;
# stale D-PSGD, bandwidth-bound at 10 Mbit/s (200 x 12 s), does not.
CONFIGS = [
    ("allreduce", "all-reduce", ["--algo", "allreduce"], [], True, "step"),
    ("diloco", "DiLoCo (H={H})", DILOCO, [], True, "local"),
    ("diloco_overlap", "overlapped DiLoCo (H={H}, stale {H})",
     DILOCO + ["--stale", "{H}"], ["stale_local"], False, "local"),
    # twice the period: at 10 Mbit/s a sync of the whole model in fp4
    # takes about 2 s, 40 steps of compute; a fragment lands within half
    # of it
    ("diloco_stream_fp4",
     "streaming DiLoCo fp4 (H=40, 4 fragments, stale 20)",
     ["--algo", "localsgd", "--period", "40", "--outer-lr", "0.7",
      "--outer-momentum", "0.9", "--fragments", "4", "--delta-codec", "fp4",
      "--stale", "20"],
     ["stale_local", "fragments"], False, "local"),
    ("powergossip", "PowerGossip rank 1", ["--algo", "powergossip",
                                           "--rank", "1"], [], False, "step"),
    ("powergossip_stale", "stale PowerGossip rank 1 (stale 1)",
     ["--algo", "powergossip", "--rank", "1", "--stale", "1"],
     ["stale_powergossip"], False, "step"),
    ("dpsgd", "D-PSGD", ["--algo", "dpsgd"], [], True, "step"),
    ("dpsgd_stale", "stale D-PSGD (stale 1)", ["--algo", "dpsgd", "--stale",
                                               "1"], ["stale_dpsgd"], True,
     "step"),
]
# Each new option is probed by its effect: two short least-squares runs,
# without and with the option, must end with different models. The same
# held-out loss to the last digit means this build parses the option but
# does not act on it.
PROBES = {
    "stale_local": (["--algo", "localsgd", "--period", "4"],
                    ["--stale", "2"]),
    "stale_dpsgd": (["--algo", "dpsgd"], ["--stale", "2"]),
    "stale_powergossip": (["--algo", "powergossip"], ["--stale", "2"]),
    "fragments": (["--algo", "localsgd", "--period", "4"],
                  ["--fragments", "2"]),
}


def log(msg):
    print("[wan %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def parse_link(text):
    rate, delay = text.split("/")
    return {"name": "%s/%sms" % (rate, delay), "rate": rate,
            "delay_ms": int(delay), "bits": rate_bits(rate)}


def rate_bits(rate):
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}.get(rate[-1], 1)
    return float(rate.rstrip("kMG")) * mult


def fill(args, period):
    return [a.replace("{H}", str(period)) for a in args]


# ------------------------------------------------------------------- probing


def probe(rumor, work, feature):
    """'ok', 'missing' (unknown option), 'not implemented' (no effect) or
    'refused: REASON'."""
    base, extra = PROBES[feature]
    losses = []
    for args in (base, base + extra):
        d = os.path.join(work, "probe-" + feature)
        shutil.rmtree(d, ignore_errors=True)
        p = subprocess.run([rumor, "launch", "--nodes", "2", "--steps", "8",
                            "--metrics-dir", d, "--workload", "lsq"] +
                           COMMON + args, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        if p.returncode != 0:
            shutil.rmtree(d, ignore_errors=True)
            if "unknown option " + extra[0] in p.stdout:
                return "missing"
            why = [x for x in p.stdout.splitlines() if "rumor node:" in x]
            return "refused: " + (why[0].split("rumor node:", 1)[1].strip()
                                  if why else "exit %d" % p.returncode)
        with open(os.path.join(d, "average.json")) as f:
            losses.append(json.load(f)["test_loss"])
        shutil.rmtree(d, ignore_errors=True)
    return "not implemented" if losses[0] == losses[1] else "ok"


# ---------------------------------------------------------------------- runs


def launch(rumor, work, tag, nodes, steps, link, args, eval_every, timeout,
           marks=None):
    """One run; eval_every 0 evaluates the last step only, and then marks
    (the accuracy run's evaluation period) names the steps whose seconds
    are kept ("times")."""
    d = os.path.join(work, tag)
    shutil.rmtree(d, ignore_errors=True)
    cmd = [rumor, "launch", "--nodes", str(nodes), "--steps", str(steps),
           "--metrics-dir", d, "--rate", link["rate"], "--delay-ms",
           str(link["delay_ms"]), "--eval-every", str(eval_every)] + \
        WORKLOAD + COMMON + args
    shown = " ".join(["rumor"] + cmd[1:6] + cmd[8:])
    log("%s: %s" % (tag, shown))
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, cwd=work)
    try:
        out = p.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        # Ctrl-C: the launcher forwards it and waits for its nodes.
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        return {"error": "timed out after %d s" % timeout, "command": shown}
    wall = time.time() - t0
    if p.returncode != 0:
        tail = out.strip().splitlines()[-3:]
        return {"error": "exit %d: %s" % (p.returncode, " / ".join(tail)),
                "command": shown}
    r = metrics(d, nodes, steps, shown, wall, marks)
    # Other work on the host slows compute and wire alike: each run says
    # how busy the host was (1-minute load average at its end).
    r["load"] = os.getloadavg()[0]
    r["cpu"] = machine_cpu()
    return r


def metrics(d, nodes, steps, shown, wall, marks=None):
    per = []
    for i in range(nodes):
        with open(os.path.join(d, "node-%d.jsonl" % i)) as f:
            per.append([json.loads(x) for x in f if x.strip()])
    if any(len(lines) != steps for lines in per):
        return {"error": "a node wrote fewer than %d metrics lines" % steps,
                "command": shown}
    if "seconds_eval" not in per[0][0]:
        return {"error": "this build's metrics have no seconds_eval",
                "command": shown}

    def mean(xs):
        return sum(xs) / len(xs)

    def secs(line):
        return line["seconds"] - line["seconds_eval"]

    def compute(line):
        return line["seconds_compute"] - line["seconds_eval"]

    first = [lines[0] for lines in per]
    last = [lines[-1] for lines in per]
    train = mean([secs(b) - secs(a) for a, b in zip(first, last)])
    comp = mean([(compute(b) - compute(a)) / (secs(b) - secs(a))
                 for a, b in zip(first, last)])
    curve = []
    for k in range(steps):
        if "accuracy" in per[0][k]:
            curve.append({"step": k + 1,
                          "accuracy": mean([n[k]["accuracy"] for n in per]),
                          "seconds": max(secs(n[k]) for n in per),
                          "mb": mean([n[k]["gossip_bytes_sent"]
                                      for n in per]) / 1e6})
    times = {}
    for k in range(steps):
        if marks and ((k + 1) % marks == 0 or k + 1 == steps):
            times[str(k + 1)] = max(secs(n[k]) for n in per)
    avg = None
    path = os.path.join(d, "average.json")
    if os.path.exists(path):
        with open(path) as f:
            avg = json.load(f).get("accuracy")
    return {"command": shown, "steps": steps, "wall_s": wall,
            "first_step_s": mean([secs(a) for a in first]),
            "train_s": train, "s_per_step": train / (steps - 1),
            "share_metrics": comp, "curve": curve, "times": times,
            "final_accuracy": avg,
            "final_node_accuracy": mean([x.get("accuracy", 0) for x in last]),
            "mb_per_node": mean([x["gossip_bytes_sent"] for x in last]) / 1e6,
            "mb_phase": mean([b["gossip_bytes_sent"] - a["gossip_bytes_sent"]
                              for a, b in zip(first, last)]) / 1e6,
            "skipped": sum(x.get("skipped", 0) for x in last)}


def prefix_steps(family, period, link, quick):
    if quick:
        return None
    if family == "local":
        return 3 * period
    return 10 if link["bits"] >= 1e8 else 4


# ------------------------------------------------------------------ analysis


def to_target(curve, target):
    for c in curve:
        if c["accuracy"] >= target:
            return c
    return None


def run_cpu(rec, n, key, r):
    """The CPU model a run was measured on: its own record, or that of the
    last session that measured the scheme at that node count."""
    if "cpu" in r:
        return r["cpu"]
    for p in reversed(rec.get("parts") or []):
        if n in p["nodes"] and key in p["configs"]:
            return p["machine"]["cpu"]
    return rec.get("machine", {}).get("cpu", "?")


def analyse(rec):
    """Fills each row's derived figures: shares, target, sooner factor.
    Seconds of two runs are compared only when one CPU model ran both (the
    record gathers sessions, and the machine under them can change)."""
    for n in rec["nodes"]:
        runs = rec["runs"][str(n)]
        ar_full = next((r for r in runs.get("allreduce", {}).values()
                        if r.get("final_accuracy") is not None
                        and not r.get("projected")), None)
        target = (ar_full["final_accuracy"] - 0.005 if ar_full else None)
        rec["targets"][str(n)] = target
        for key, by_link in runs.items():
            if key == "compute_only":
                continue
            for lname, r in by_link.items():
                if "error" in r or "not_run" in r:
                    continue
                ref = runs.get("compute_only", {}).get(lname, {})
                r.pop("share_wall", None)
                r.pop("share_wall_rounds", None)
                r.pop("share_ceiling", None)
                r.pop("other_cpu", None)
                r.pop("other_cpu_sooner", None)
                cpu = run_cpu(rec, n, key, r)
                if "train_s" in ref and cpu != run_cpu(rec, n,
                                                       "compute_only", ref):
                    r["other_cpu"] = True
                elif "train_s" in ref:
                    r.update(wall_share(ref, r))
                    r.update(share_ceiling(ref, r, lname))
                if target is None:
                    continue
                hit = to_target(r["curve"], target)
                if hit is None:
                    r["to_target"] = None
                    continue
                secs = hit["seconds"]
                if r.get("projected"):
                    secs = r["first_step_s"] + (hit["step"] - 1) * \
                        r["s_per_step"]
                r["to_target"] = {"step": hit["step"], "seconds": secs,
                                  "mb": hit["mb"]}
        for lname in [lk["name"] for lk in rec["links"]]:
            ar = runs.get("allreduce", {}).get(lname, {})
            base = ar.get("to_target")
            co = runs.get("compute_only", {}).get(lname, {})
            ar.pop("sooner_ceiling", None)
            if base and co and run_cpu(rec, n, "compute_only", co) == \
                    run_cpu(rec, n, "allreduce", ar):
                ar.update(sooner_ceiling(base, co))
            for key, by_link in runs.items():
                r = by_link.get(lname, {})
                r.pop("sooner_than_allreduce", None)
                if base and r.get("to_target") and run_cpu(
                        rec, n, key, r) != run_cpu(rec, n, "allreduce", ar):
                    r["other_cpu_sooner"] = True
                elif base and r.get("to_target"):
                    r["sooner_than_allreduce"] = (base["seconds"] /
                                                  r["to_target"]["seconds"])


def wall_share(ref, r):
    """The compute-only training phase over the run's. With rounds
    (--rounds), the median of the rounds' ratios: after the matrix's own
    runs (round 1), each round ran the compute-only run and then the
    schemes, so a ratio compares runs made a minute or two apart, and the
    median drops a round that the host's other work slowed. A row without
    rounds takes the compute-only rounds' median phase."""
    ratios = [c["train_s"] / x["train_s"]
              for c, x in zip(ref.get("rounds", []), r.get("rounds", []))
              if "train_s" in c and "train_s" in x]
    if len(ratios) > 1:
        return {"share_wall": statistics.median(ratios),
                "share_wall_rounds": ratios}
    co = [c["train_s"] for c in ref.get("rounds", []) if "train_s" in c]
    return {"share_wall": statistics.median(co or [ref["train_s"]]) /
            r["train_s"]}


def metrics_share(r):
    """The metrics share: the median of the rounds' where there are
    rounds."""
    got = [x["share_metrics"] for x in r.get("rounds", [])
           if "share_metrics" in x]
    return statistics.median(got) if len(got) > 1 else r["share_metrics"]


def share_ceiling(ref, r, lname):
    """The most wall share the link allows: the training phase cannot end
    before the link has carried the bytes sent in it, so the share is at
    most the compute-only phase over (those bytes / the link's rate)."""
    if not r.get("mb_phase"):
        return {}
    wire_s = r["mb_phase"] * 1e6 * 8 / rate_bits(lname.split("/")[0])
    return {"share_ceiling": min(1.0, ref["train_s"] / wire_s)}


def sooner_ceiling(base, co):
    """How much sooner than all-reduce a run that never waits for the
    network, and needs as many steps to the target, can be on this host:
    the compute-only run's seconds at all-reduce's step to the target."""
    hit = next((c for c in co.get("curve", [])
                if c["step"] == base["step"]), None)
    if hit is None or hit["seconds"] <= 0:
        return {}
    return {"sooner_ceiling": base["seconds"] / hit["seconds"],
            "sooner_ceiling_step": base["step"]}


def timed(acc, timing):
    """The accuracy run's curve, final accuracy and bytes with the timing
    run's seconds (a run without evaluations, the same bits: the final
    average models must agree, else the row says so)."""
    if "error" in timing:
        return timing
    r = dict(acc)
    r["curve"] = [dict(c, seconds=timing["times"][str(c["step"])])
                  for c in acc["curve"]]
    for k in ("command", "wall_s", "first_step_s", "train_s", "s_per_step",
              "share_metrics", "load", "cpu"):
        r[k] = timing[k]
    r["skipped"] = acc["skipped"] + timing["skipped"]
    r["accuracy_command"] = acc["command"]
    r.pop("times", None)
    if timing["final_accuracy"] != acc["final_accuracy"]:
        r["timing_final_accuracy"] = timing["final_accuracy"]
    return r


def project(full, prefix, steps):
    """A full run's accuracy and bytes with a prefix run's timing."""
    r = dict(full)
    r["curve"] = [dict(c) for c in full["curve"]]
    r.pop("times", None)
    r.update({"projected": prefix["steps"], "prefix_command":
              prefix["command"], "first_step_s": prefix["first_step_s"],
              "s_per_step": prefix["s_per_step"],
              "share_metrics": prefix["share_metrics"],
              "skipped": full["skipped"] + prefix["skipped"],
              "load": prefix.get("load")})
    r["train_s"] = prefix["s_per_step"] * (steps - 1)
    for c in r["curve"]:
        c["seconds"] = prefix["first_step_s"] + (c["step"] - 1) * \
            prefix["s_per_step"]
    return r


# -------------------------------------------------------------------- output


def pct(v):
    return "-" if v is None else "%.1f %%" % (100 * v)


def table(rec):
    out = []
    for n in rec["nodes"]:
        target = rec["targets"].get(str(n))
        out.append("\n**%d nodes** (target accuracy %s = the all-reduce "
                   "run's final accuracy minus 0.5 points)\n" %
                   (n, pct(target)))
        out.append("| scheme | link | share (metrics) | share (wall vs "
                   "compute-only) | s to target | MB/node to target | "
                   "x sooner than all-reduce | final accuracy (avg model) | "
                   "MB/node total | note |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
        runs = rec["runs"][str(n)]
        for key, label, *_ in CONFIGS + [("compute_only", None)]:
            label = rec["labels"].get(key, key)
            for lk in rec["links"]:
                r = runs.get(key, {}).get(lk["name"])
                if r is None:
                    continue
                if "not_run" in r or "error" in r:
                    out.append("| %s | %s | | | | | | | | %s |" % (
                        label, lk["name"], r.get("not_run") or
                        "failed: " + r["error"]))
                    continue
                tt = r.get("to_target")
                note = ("time projected from %d measured steps" %
                        r["projected"] if r.get("projected") else "measured")
                if r.get("skipped"):
                    note += ", %d skipped" % r["skipped"]
                if "timing_final_accuracy" in r:
                    note += (", its timing run ended at %s: not the same "
                             "bits" % pct(r["timing_final_accuracy"]))
                if r.get("load") is not None:
                    note += ", load %.1f" % r["load"]
                if r.get("share_wall_rounds"):
                    note += (", shares: medians of %d rounds beside the "
                             "compute-only run" % len(r["share_wall_rounds"]))
                if r.get("other_cpu") or r.get("other_cpu_sooner"):
                    note += ("; measured on %s, its compute-only or "
                             "all-reduce reference on another CPU: not "
                             "compared" % run_cpu(rec, n, key, r))
                out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %.1f "
                           "| %s |" % (
                               label, lk["name"], pct(metrics_share(r)),
                               pct(r.get("share_wall")),
                               "%.1f" % tt["seconds"] if tt else "not reached",
                               "%.1f" % tt["mb"] if tt else "-",
                               "%.1fx" % r["sooner_than_allreduce"]
                               if r.get("sooner_than_allreduce") else "-",
                               pct(r["final_accuracy"]), r["mb_per_node"],
                               note))
    return "\n".join(out) + "\n"


# Issue 32's targets: (configs, link, minimum compute share).
SHARE_TARGETS = [
    (("diloco_overlap", "diloco_stream_fp4"), "100M/25ms", 0.95),
    (("diloco_overlap", "diloco_stream_fp4"), "10M/50ms", 0.90),
    (("powergossip_stale",), "100M/25ms", 0.85),
]


def targets(rec):
    """Issue 32's targets against this record, both shares."""
    out = []
    for n in rec["nodes"]:
        runs = rec["runs"][str(n)]
        ar = runs.get("allreduce", {})
        for keys, lname, want in SHARE_TARGETS:
            for key in keys:
                r = runs.get(key, {}).get(lname)
                if not r or "share_metrics" not in r:
                    continue
                sm, sw = metrics_share(r), r.get("share_wall")
                cap = r.get("share_ceiling")
                out.append("- %d nodes, %s at %s: compute share >= %.0f %%: "
                           "%s (metrics), %s (wall)%s%s%s" % (
                               n, rec["labels"][key], lname, 100 * want,
                               met(sm >= want, pct(sm)),
                               "not compared (another CPU)"
                               if sw is None and r.get("other_cpu") else
                               met(sw is not None and sw >= want, pct(sw)),
                               " (projected)" if r.get("projected") else "",
                               rounds_note(r),
                               "; the link's bandwidth allows at most %s "
                               "wall share (%.1f MB a node in the training "
                               "phase)" % (pct(cap), r["mb_phase"])
                               if cap is not None and cap < 1 else ""))
        ref = next((r for r in ar.values() if not r.get("projected")
                    and r.get("final_accuracy") is not None), None)
        for key in ("diloco_overlap", "diloco_stream_fp4"):
            r = next((x for x in runs.get(key, {}).values()
                      if x.get("final_accuracy") is not None), None)
            if ref and r:
                d = 100 * (r["final_accuracy"] - ref["final_accuracy"])
                out.append("- %d nodes, %s: final accuracy within 0.5 "
                           "points of all-reduce: %s" % (
                               n, rec["labels"][key],
                               met(d >= -0.5, "%+.2f points" % d)))
            r = runs.get(key, {}).get("100M/25ms", {})
            if "to_target" in r:
                f = r.get("sooner_than_allreduce")
                out.append("- %d nodes, %s: >= 10x sooner to the target "
                           "than all-reduce at 100M/25ms: %s" % (
                               n, rec["labels"][key],
                               "not compared (another CPU)"
                               if f is None and r.get("other_cpu_sooner") else
                               met(f is not None and f >= 10,
                                   "%.1fx" % f if f else "not reached")))
        out += stale_accuracy(rec, n)
        cap = ar.get("100M/25ms", {}).get("sooner_ceiling")
        if cap is not None:
            out.append("- %d nodes, this host's ceiling at 100M/25ms: "
                       "all-reduce reaches the target at step %d; the "
                       "compute-only run, which never waits for the "
                       "network, is there %.1fx sooner: what a scheme that "
                       "needs as many steps can reach here, within "
                       "run-to-run noise" % (
                           n, ar["100M/25ms"]["sooner_ceiling_step"], cap))
    return out


def stale_accuracy(rec, n):
    """Stale PowerGossip's final accuracy against its non-stale run's, at
    equal steps (the accuracy runs: the fastest link, evaluations on)."""
    runs = rec["runs"][str(n)]

    def final(key):
        return next((x["final_accuracy"] for x in runs.get(key, {}).values()
                     if x.get("final_accuracy") is not None), None)
    stale, plain = final("powergossip_stale"), final("powergossip")
    if stale is None or plain is None:
        return []
    d = 100 * (stale - plain)
    return ["- %d nodes, %s: final accuracy within 0.5 points of %s: %s" % (
        n, rec["labels"]["powergossip_stale"], rec["labels"]["powergossip"],
        met(d >= -0.5, "%+.2f points" % d))]


def rounds_note(r):
    """The rounds behind a target's medians, when it has them."""
    walls = r.get("share_wall_rounds")
    if not walls:
        return ""
    return "; medians of %d rounds, wall %s, metrics %s" % (
        len(walls), " / ".join(pct(w) for w in walls),
        " / ".join(pct(x.get("share_metrics")) for x in r["rounds"]))


def met(ok, text):
    return "%s (%s)" % (text, "met" if ok else "not met")


def section(rec):
    """The "Slow links (WAN)" section of docs/benchmarks.md."""
    out = ["## Slow links (WAN)", "",
           "Issue 32's benchmark (`bench/wan/wan.py`; the full matrix is "
           "`make bench-wan`, `make bench` runs its `--quick` smoke run): "
           "rings of N `rumor node`s on loopback over Rumor's own link "
           "shaping (`--rate`, `--delay-ms`; `--insecure`), the MLP "
           "`--hidden 1024,1024` on Fashion-MNIST, `--batch 256`, %d steps, "
           "evaluation every %d steps; DiLoCo's outer step is its paper's "
           "(Nesterov, `--outer-lr 0.7 --outer-momentum 0.9`)." % (
               rec["steps"], rec["eval_every"]), ""]
    for p in rec.get("parts") or [part_note(rec)]:
        m = p["machine"]
        out.append("- %s nodes, %s: measured %s on %s (%s cores, shared "
                   "with other work: load average %.2f at the start, %.2f "
                   "at the end), commit %s, in %.0f s: `%s`" % (
                       ", ".join(str(n) for n in p["nodes"]),
                       ", ".join(rec["labels"].get(k, k)
                                 for k in p["configs"]), p["date"],
                       m["cpu"], m["cores"], m["load_start"], m["load_end"],
                       m["commit"], p["wall_s"], p["command"]) +
                   (" %s" % p["note"] if p.get("note") else ""))
    busy = max([max(p["machine"]["load_start"], p["machine"]["load_end"])
                for p in rec.get("parts") or [part_note(rec)]] +
               [r.get("load") or 0 for n in rec["runs"].values()
                for by in n.values() for r in by.values()])
    if busy > rec["machine"]["cores"]:
        out += ["", "**A busy host.** These runs shared %s cores with "
                "other work (load average up to %.1f): compute slowed by "
                "the contention counts as compute in the metrics share, and "
                "the wall share divides the times of two runs made minutes "
                "apart under different load, so it can exceed 100 %%; read "
                "both as rough, and measure again on a quiet host." % (
                    rec["machine"]["cores"], busy)]
    out += ["",
           "Times come from runs that do not evaluate. Evaluating the "
           "10,000 held-out rows every %d steps costs as many FLOPs as the "
           "training steps between two evaluations, so each scheme runs "
           "once at the fastest link with evaluations (its accuracy curve, "
           "bytes and final accuracy) and once per link with "
           "`--eval-every 0` (its times: only the last step evaluates, and "
           "the node's `seconds_eval` is subtracted from its `seconds` and "
           "`seconds_compute`). Both compute the same bits; a timing run "
           "whose final average model disagrees says so in its row." %
           rec["eval_every"], "",
           "Compute share (metrics) = (seconds_compute at the last step - at "
           "the first) / (seconds at the last step - at the first), mean "
           "over the nodes; share (wall) = the compute-only run's (`--algo "
           "localsgd --period %d`: local SGD syncs at the steps t with t "
           "%% period = 0, so its one sync is at the first step, outside "
           "the training phase) training-phase wall time over the run's; "
           "it and \"x sooner\" "
           "compare two runs' seconds, so only runs measured on the same "
           "CPU model are compared. Where a row says \"medians of K "
           "rounds\" (`--rounds K`), its shares are the medians over K "
           "timing runs, each after a compute-only run at the same link "
           "(the first: the matrix's own), of each round's wall ratio and "
           "metrics share, as one pair of runs minutes apart on a shared "
           "host differs by a few per cent. Seconds to target: "
           "`seconds` of the slowest node of the timing run at the step of "
           "the first evaluation where "
           "the mean over the nodes of their own models' held-out "
           "accuracy reaches the target (nodes that still disagree, as "
           "PowerGossip's do, can stay below it while their average model, "
           "the final accuracy column, is above). \"Time projected "
           "from K measured steps\": that run computes the same bits at "
           "any link speed, so it ran in full at the fastest link "
           "(accuracy, bytes) and only K steps at this one (seconds per "
           "step); its seconds and shares are projections, not "
           "measurements." % rec["steps"], ""]
    missing = sorted(set(k for k, v in rec["features"].items()
                         if v != "ok"))
    if missing:
        out.append("Not measured yet: the rows marked \"not run\" need "
                   "%s, which this build does not implement; they will be "
                   "measured when the options land (`make bench-wan`)." %
                   ", ".join(PROBES[k][1][0] + " (" + k + ")"
                             for k in missing))
        out.append("")
    out.append(table(rec))
    tl = targets(rec)
    if tl:
        out += ["Issue 32's targets (all-reduce's seconds to the target "
                "are projected where its row says so). Two ceilings come "
                "from the same record: a run's wall share cannot exceed "
                "the compute-only training phase over the time its link "
                "needs for the bytes the run sends in that phase; and at "
                "all-reduce's step to the target the compute-only run "
                "shows how much sooner a scheme that never waits, and "
                "needs as many steps, can be on this host:", ""] + tl + [""]
    for png in rec.get("plots", []):
        out.append("![%s](%s)" % (os.path.basename(png),
                                  os.path.basename(png)))
    return "\n".join(out) + "\n"


def plots(rec, out_dir):
    if shutil.which("gnuplot") is None:
        log("gnuplot not found: no plots")
        return []
    pngs = []
    dat = os.path.join(out_dir, "wan-share.dat")
    series = []
    with open(dat, "w") as f:
        for n in rec["nodes"]:
            for key, *_ in CONFIGS:
                pts = [(i, lk["name"], rec["runs"][str(n)].get(key, {})
                        .get(lk["name"], {}).get("share_metrics"))
                       for i, lk in enumerate(rec["links"])]
                pts = [p for p in pts if p[2] is not None]
                if not pts:
                    continue
                series.append("%s, %d nodes" % (rec["labels"][key], n))
                f.write("# %s\n" % series[-1])
                for i, name, v in pts:
                    f.write("%d %.2f \"%s\"\n" % (i, 100 * v, name))
                f.write("\n\n")
    png = os.path.join(out_dir, "bench-wan-share.png")
    xt = ", ".join("'%s' %d" % (lk["name"], i)
                   for i, lk in enumerate(rec["links"]))
    plot = ", ".join("'%s' index %d using 1:2 with linespoints lc %d dt %d "
                     "title '%s'" %
                     style(dat, k, s) for k, s in enumerate(series))
    gp("set title 'compute share over the training phase (metrics)'\n"
       "set xlabel 'link (rate / one-way delay)'\nset ylabel 'compute %%'\n"
       "set xtics (%s)\nset xrange [-0.3:%g]\nset yrange [0:100]\n"
       "set key outside right\nplot %s\n" % (xt, len(rec["links"]) - 0.7,
                                               plot), png)
    pngs.append(png)
    lname = "100M/25ms" if any(lk["name"] == "100M/25ms"
                               for lk in rec["links"]) else \
        rec["links"][0]["name"]
    dat2 = os.path.join(out_dir, "wan-acc.dat")
    series = []
    with open(dat2, "w") as f:
        for n in rec["nodes"]:
            for key, *_ in CONFIGS:
                r = rec["runs"][str(n)].get(key, {}).get(lname, {})
                if not r.get("curve"):
                    continue
                series.append("%s, %d nodes%s" % (
                    rec["labels"][key], n,
                    " (time projected)" if r.get("projected") else ""))
                f.write("# %s\n" % series[-1])
                for c in r["curve"]:
                    f.write("%.3f %.2f\n" % (c["seconds"],
                                             100 * c["accuracy"]))
                f.write("\n\n")
    png = os.path.join(out_dir, "bench-wan-accuracy.png")
    plot = ", ".join("'%s' index %d using 1:2 with linespoints lc %d dt %d "
                     "title '%s'" %
                     style(dat2, k, s) for k, s in enumerate(series))
    gp("set title 'held-out accuracy (mean of the nodes), %s links'\n"
       "set xlabel 'seconds'\nset ylabel 'accuracy %%'\nset logscale x\n"
       "set yrange [50:90]\n"
       "set key outside right\nplot %s\n" % (lname, plot), png)
    pngs.append(png)
    os.remove(dat)
    os.remove(dat2)
    return pngs


def style(dat, k, title):
    """One colour per scheme, dashed for the larger node count."""
    scheme = next(i for i, c in enumerate(CONFIGS)
                  if title.startswith(c[1].split(" (")[0] + " ") or
                  title.startswith(c[1].split(" (")[0] + ","))
    return (dat, k, scheme + 1, 2 if " 8 nodes" in title else 1, title)


def gp(script, png):
    subprocess.run(["gnuplot"], input="set terminal pngcairo size 1300,640\n"
                   "set output '%s'\nset grid\n%s" % (png, script),
                   text=True, check=False)


def machine_cpu():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def machine(rumor):
    info = {"load_start": os.getloadavg()[0], "cores": os.cpu_count(),
            "cpu": machine_cpu()}
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, cwd=REPO).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "-uno"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, cwd=REPO).stdout.strip()
    info["commit"] = git + (" (with uncommitted changes)" if dirty else "")
    return info


# ---------------------------------------------------------------------- main


def run_matrix(a, rumor, work):
    period = 10 if a.quick else 20
    links = [parse_link(x) for x in a.links.split(",")]
    want = [c for c in CONFIGS if c[0] in a.configs.split(",")]
    rec = {"quick": a.quick, "steps": a.steps, "period": period,
           "eval_every": a.eval_every, "nodes": a.nodes, "links": links,
           "labels": {c[0]: c[1].replace("{H}", str(period))
                      for c in CONFIGS}, "runs": {}, "targets": {},
           "machine": machine(rumor), "command": "/usr/bin/python3 " +
           " ".join([os.path.relpath(__file__, REPO)] + sys.argv[1:])}
    rec["labels"]["compute_only"] = ("compute-only (localsgd --period %d)" %
                                     a.steps)
    rec["features"] = {f: probe(rumor, work, f) for f in PROBES}
    log("options: %s" % rec["features"])
    for n in a.nodes:
        runs = rec["runs"].setdefault(str(n), {})
        for key, _, args, needs, exact, family in want:
            runs[key] = {}
            bad = [f for f in needs if rec["features"][f] != "ok"]
            if bad:
                for lk in links:
                    runs[key][lk["name"]] = {"not_run": "not run: option %s" %
                                             ", ".join(
                                                 "%s %s" % (PROBES[f][1][0],
                                                            rec["features"]
                                                            [f])
                                                 for f in bad)}
                continue
            runs[key] = run_config(a, rumor, work, n, key, fill(args, period),
                                   exact, family, period, links)
        if "compute_only" not in a.configs.split(","):
            continue
        runs["compute_only"] = run_config(
            a, rumor, work, n, "compute-only", compute_only_args(a.steps), False,
            "local", period, links)
        share_rounds(a, rumor, work, n, runs, period, links)
    return rec


def compute_only_args(steps):
    return ["--algo", "localsgd", "--period", str(steps)]


def share_rounds(a, rumor, work, n, runs, period, links):
    """Rounds 2 .. a.rounds of the share targets' timing runs (round 1 is
    the matrix's): at each target's link, the compute-only run and then
    each targeted scheme measured there in full, in turn, so that each
    scheme's wall share is a median of ratios of runs made one after the
    other (wall_share). A projected row is not repeated: its seconds are
    a prefix's."""
    args = {c[0]: fill(c[2], period) for c in CONFIGS}
    args["compute_only"] = compute_only_args(a.steps)
    for lk in links:
        keys = [k for keys, lname, _ in SHARE_TARGETS if lname == lk["name"]
                for k in keys if full_run(runs.get(k, {}).get(lname))]
        if a.rounds < 2 or not keys or \
                not full_run(runs.get("compute_only", {}).get(lk["name"])):
            continue
        rows = {k: runs[k][lk["name"]] for k in ["compute_only"] + keys}
        for r in rows.values():
            r["rounds"] = [{"train_s": r["train_s"],
                            "share_metrics": r["share_metrics"],
                            "load": r.get("load")}]
        for k in range(2, a.rounds + 1):
            for key, r in rows.items():
                t = launch(rumor, work, "n%d-%s-%s-round%d" % (
                    n, key, lk["rate"], k), n, a.steps, lk, args[key], 0,
                    a.timeout)
                r["rounds"].append({"error": t["error"]} if "error" in t
                                   else {"train_s": t["train_s"],
                                         "share_metrics": t["share_metrics"],
                                         "load": t.get("load")})


def full_run(r):
    return bool(r) and "train_s" in r and not r.get("projected") and \
        "error" not in r and "not_run" not in r


def run_config(a, rumor, work, n, key, args, exact, family, period, links):
    """One scheme at every link: its accuracy curve from one run with
    evaluations at the fastest link, its times from runs without them (in
    full, or an exact scheme's prefix at the slower links)."""
    fastest = max(links, key=lambda lk: lk["bits"])
    tag = "n%d-%s-" % (n, key)
    acc = launch(rumor, work, tag + "accuracy", n, a.steps, fastest, args,
                 a.eval_every, a.timeout)
    if "error" in acc:
        return {lk["name"]: acc for lk in links}
    out = {}
    for lk in links:
        k = prefix_steps(family, period, lk, a.quick) if exact else None
        if lk is fastest or k is None or k >= a.steps:
            out[lk["name"]] = timed(acc, launch(
                rumor, work, tag + lk["rate"], n, a.steps, lk, args, 0,
                a.timeout, a.eval_every))
            continue
        pre = launch(rumor, work, tag + lk["rate"] + "-prefix", n, k, lk,
                     args, 0, a.timeout)
        out[lk["name"]] = pre if "error" in pre else project(acc, pre,
                                                             a.steps)
    return out


def add_record(rec, path):
    """rec plus every (node count, scheme) of the record at path that rec
    did not measure (same links, steps and period); "parts" keeps each
    session's notes (when, load, command)."""
    note = part_note(rec)
    with open(path) as f:
        old = json.load(f)
    same = all(old.get(k) == rec[k] for k in ("steps", "period", "links"))
    if not same:
        log("%s: other steps, period or links: not kept" % path)
        return rec
    for n, by_key in old["runs"].items():
        mine = rec["runs"].setdefault(n, {})
        for key, cells in by_key.items():
            mine.setdefault(key, cells)
    rec["nodes"] = sorted(set(rec["nodes"]) | set(old["nodes"]))
    rec["parts"] = (old.get("parts") or [part_note(old)]) + [note]
    return rec


def part_note(rec):
    return {"nodes": list(rec["nodes"]), "date": rec["date"],
            "configs": sorted(set(k for n in rec["runs"].values()
                                  for k in n)),
            "machine": rec["machine"], "wall_s": rec["wall_s"],
            "command": rec["command"], "features": rec["features"],
            "note": rec.get("note", "")}


def write_doc(rec, out_dir):
    """docs/bench-wan.json and the section of docs/benchmarks.md."""
    with open(os.path.join(out_dir, "bench-wan.json"), "w") as f:
        json.dump(rec, f, indent=1)
    jpath = os.path.join(out_dir, "benchmarks.json")
    if not os.path.exists(jpath):
        return
    with open(jpath) as f:
        data = json.load(f)
    data["wan"] = rec
    with open(jpath, "w") as f:
        json.dump(data, f, indent=1)
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import report
    with open(os.path.join(out_dir, "benchmarks.md"), "w") as f:
        f.write(report.render(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rumor", default=os.path.join(REPO, "build", "bin",
                                                    "rumor"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nodes", default=None)
    ap.add_argument("--links", default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--eval-every", type=int, default=None)
    ap.add_argument("--configs", default=",".join(
        [c[0] for c in CONFIGS] + ["compute_only"]))
    ap.add_argument("--rounds", type=int, default=1,
                    help="timing runs of each share target's scheme and "
                    "of the compute-only run at its link, in turn; the "
                    "wall share is the median of the rounds' ratios")
    ap.add_argument("--timeout", type=int, default=900,
                    help="seconds one launch may take")
    ap.add_argument("--out", default=os.path.join(REPO, "build",
                                                  "bench-wan"))
    ap.add_argument("--doc", action="store_true")
    ap.add_argument("--note", default="",
                    help="what the report should say about this session "
                    "(e.g. what else ran on the host)")
    ap.add_argument("--render", action="store_true",
                    help="run nothing: the plots and the report again from "
                    "the existing record")
    ap.add_argument("--add", action="store_true",
                    help="keep the node counts of the existing record "
                    "(OUT/wan.json, or docs/bench-wan.json with --doc) "
                    "that this run does not measure")
    a = ap.parse_args()
    a.nodes = [int(x) for x in (a.nodes or ("4" if a.quick else "4,8"))
               .split(",")]
    a.links = a.links or ("100M/25" if a.quick else ",".join(LINKS))
    a.steps = a.steps or (20 if a.quick else 200)
    a.eval_every = a.eval_every or (10 if a.quick else 20)
    rumor = os.path.abspath(a.rumor)
    out_dir = os.path.join(REPO, "docs") if a.doc else a.out
    work = os.path.join(REPO, "build", "bench-wan", "runs")
    os.makedirs(work, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    old_path = os.path.join(out_dir, "bench-wan.json" if a.doc else
                            "wan.json")
    if a.render:
        with open(old_path) as f:
            rec = json.load(f)
    else:
        t0 = time.time()
        rec = run_matrix(a, rumor, work)
        rec["machine"]["load_end"] = os.getloadavg()[0]
        rec["wall_s"] = time.time() - t0
        rec["note"] = a.note
        rec["date"] = datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M UTC")
        if a.add and os.path.exists(old_path):
            rec = add_record(rec, old_path)
    analyse(rec)
    rec["plots"] = [os.path.relpath(p, REPO) for p in plots(rec, out_dir)]
    with open(os.path.join(a.out if not a.doc else work, "wan.json"),
              "w") as f:
        json.dump(rec, f, indent=1)
    md = section(rec)
    with open(os.path.join(a.out if not a.doc else work, "wan.md"),
              "w") as f:
        f.write(md)
    if a.doc:
        write_doc(rec, out_dir)
    print(md)
    bad = [r for n in rec["runs"].values() for by in n.values()
           for r in by.values() if "error" in r]
    log("%d failed runs" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
