"""Tables of the adaptive-compression experiment (scripts/adaptive-experiment.sh).

Reads the CSV files of `rumor sim train` (step,bits_per_node,loss,
test_accuracy,seconds) and the metrics of the real runs, and writes
OUT/adaptive-results.md: per task, method and link rate the mean and
standard deviation over seeds of the total bits sent (all nodes), the final
accuracy and the (modelled or measured) time to the target accuracy.
"""
import glob
import json
import os
import statistics
import sys

TARGET = {"digits": 0.90, "synth": 0.60, "real": 0.80}
RATES = ["10M", "100M", "1G"]
NODES = 8


def labels(work, task):
    out = []
    with open(os.path.join(work, task + ".labels")) as f:
        for line in f:
            k, label = line.rstrip("\n").split("|", 1)
            out.append((k, label))
    return out


def read_csv(path):
    rows = []
    with open(path) as f:
        next(f)
        for line in f:
            step, bits, _loss, acc, secs = line.strip().split(",")
            rows.append((int(step), float(bits), float(acc), float(secs)))
    return rows


def ms(values, fmt):
    vals = [v for v in values if v is not None]
    if not vals:
        return "not reached"
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    miss = len(values) - len(vals)
    text = (fmt + " ± " + fmt) % (statistics.mean(vals), sd)
    return text + (" (%d of %d seeds)" % (len(vals), len(values)) if miss else "")


def sim_table(work, task, out):
    target = TARGET[task]
    out.append("| method | link | total bits (8 nodes) | final accuracy | "
               "time to %.0f %% (s, modelled) |" % (100 * target))
    out.append("|---|---|---|---|---|")
    for k, label in labels(work, task):
        for rate in RATES:
            bits, acc, tta = [], [], []
            for path in sorted(glob.glob(os.path.join(
                    work, "%s-%s-%s-*.csv" % (task, k, rate)))):
                rows = read_csv(path)
                bits.append(rows[-1][1] * NODES)
                acc.append(rows[-1][2])
                hit = [r[3] for r in rows if r[2] >= target]
                tta.append(hit[0] if hit else None)
            out.append("| %s | %s | %s | %s | %s |" % (
                label, rate, ms([b / 1e6 for b in bits], "%.1f") + " Mbit",
                ms([100 * a for a in acc], "%.1f") + " %", ms(tta, "%.2f")))


def real_table(work, out):
    target = TARGET["real"]
    out.append("| method | total gossip bits (8 nodes) | final accuracy "
               "(mean of nodes) | time to %.0f %% (s, wall clock, mean of "
               "nodes) |" % (100 * target))
    out.append("|---|---|---|---|")
    for k, label in labels(work, "real"):
        files = sorted(glob.glob(os.path.join(work, "real-" + k, "node-*.jsonl")))
        if not files:
            out.append("| %s | run failed | | |" % label)
            continue
        bits, accs, ttas = 0.0, [], []
        for path in files:
            rows = [json.loads(line) for line in open(path)]
            bits += 8 * rows[-1]["gossip_bytes_sent"]
            evals = [r for r in rows if "accuracy" in r]
            accs.append(evals[-1]["accuracy"] if evals else 0.0)
            hit = [r["seconds"] for r in evals if r["accuracy"] >= target]
            ttas.append(hit[0] if hit else None)
        reached = [t for t in ttas if t is not None]
        tta = ("%.2f" % statistics.mean(reached)) if len(reached) == len(ttas) \
            else "not reached by %d of %d nodes" % (len(ttas) - len(reached), len(ttas))
        out.append("| %s | %.1f Mbit | %.1f %% | %s |" % (
            label, bits / 1e6, 100 * statistics.mean(accs), tta))


def main():
    work, out_dir = sys.argv[1], sys.argv[2]
    out = ["<!-- written by scripts/adaptive-experiment.sh -->", "",
           "### Simulator: MLP on the embedded digits", ""]
    sim_table(work, "digits", out)
    out += ["", "### Simulator: synthetic task (128 inputs, 10 classes, "
            "separation 0.2; MLP 128-128-10)", ""]
    sim_table(work, "synth", out)
    out += ["", "### Real processes: 8 nodes on loopback, Rumor shaping at "
            "100 Mbit/s (MLP 256-1024-10 on the synthetic task, one seed)", ""]
    real_table(work, out)
    with open(os.path.join(out_dir, "adaptive-results.md"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
