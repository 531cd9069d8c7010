#!/usr/bin/python3
"""Published claims re-measured at small scale (docs/papers.md).

usage: nice -n 10 /usr/bin/python3 scripts/papers.py PART... [--bin BIN]
       [--out DIR] [--work DIR]
parts:
  p001       paper 001 (top-k / DGC / QSGD): compressed data-parallel SGD
             (`rumor sim train --algo allreduce --codec ...`), the MLP on
             Fashion-MNIST, 4 nodes, every method at 4 learning rates x
             3 seeds; prints the tables, draws DIR/papers-001-loss.png
  p001-time  paper 001's compute time: `rumor bench compress` of top-k and
             DGC's sampled threshold as the model grows, next to PyTorch's
             torch.sort / torch.topk (the paper's implementation) on the
             same sizes
  p003       paper 003 (CO3): fp4 [1,2,1] and fp8 [1,5,2] with Huffman
             coding (per message, and the paper's GenNorm code) and
             decayed error feedback, gamma 0, 0.7, 0.9, 1; prints the
             table, draws DIR/papers-003-fp4.png, -fp8.png and the
             -gennorm twins
  ratio      the PowerSGD paper's compression ratios (`rumor lowrank ratio`)
Each training run's CSV is kept in WORK (default build/papers), so a part
interrupted resumes where it stopped. STEPS and SEEDS (environment)
override the scale (1500 steps; seeds "1 2 3"). Plots need gnuplot
(Debian gnuplot-nox).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

STEPS = int(os.environ.get("STEPS", "1500"))
SEEDS = [int(s) for s in os.environ.get("SEEDS", "1 2 3").split()]
EVERY = 50
TAIL = 6  # the loss column is one minibatch: average the last TAIL prints
NODES = 4
HIDDEN = 64
# the MLP on Fashion-MNIST: 784 -> HIDDEN -> 10, weights and biases
PARAMS = 784 * HIDDEN + HIDDEN + HIDDEN * 10 + 10
TASK = (
    f"--topology ring:{NODES} --workload mlp --dataset fashion-mnist "
    f"--hidden {HIDDEN} --optim sgd --algo allreduce"
)

# label | options | learning rates; paper 001's methods (section V-A):
# sparsifiers at 1 %, 0.1 %, 0.01 % (its 50x, 500x, 5000x), QSGD at s = 64,
# 16, 4 (its 7, 5, 3 bits), random-k with and without error feedback
# (Fig. 1). DGC's momentum correction is the momentum (0.9): its step is
# 10x plain SGD's at the same rate, so its rates are a tenth.
LRS = [0.05, 0.1, 0.2, 0.4]
DGC_LRS = [0.005, 0.01, 0.02, 0.05]
# QSGD is unbiased: the baseline's fixed and best rates only (time)
QSGD_LRS = [0.1, 0.4]
P001 = [
    ("none (fp32 all-reduce)", "", LRS),
    ("random-k 1 %, EF", "--codec randk:ratio=0.01 --ef ef", LRS),
    ("random-k 1 %, no EF", "--codec randk:ratio=0.01", LRS),
    ("top-k 1 %, EF", "--codec topk:ratio=0.01 --ef ef", LRS),
    ("top-k 0.1 %, EF", "--codec topk:ratio=0.001 --ef ef", LRS),
    ("top-k 0.01 %, EF", "--codec topk:ratio=0.0001 --ef ef", LRS),
    ("DGC 1 %", "--codec dgc:ratio=0.01 --ef dgc:0.9", DGC_LRS),
    ("DGC 0.1 %", "--codec dgc:ratio=0.001 --ef dgc:0.9", DGC_LRS),
    ("DGC 0.01 %", "--codec dgc:ratio=0.0001 --ef dgc:0.9", DGC_LRS),
    ("QSGD s=64", "--codec qsgd:levels=64", QSGD_LRS),
    ("QSGD s=16", "--codec qsgd:levels=16", QSGD_LRS),
    ("QSGD s=4", "--codec qsgd:levels=4", QSGD_LRS),
]
# the baseline's usual rate, kept for every method (DGC: its tenth)
P001_BASE_LR = 0.1

# paper 003: SGD at a constant rate, no momentum (its Table I); the fp
# formats with the real exponent bias of eq. 12
# each format with the per-message Huffman code and with the paper's
# per-layer code from the GenNorm model (code=gennorm)
P003_CODECS = [("fp4 [1,2,1]", "fp4:bias=real"),
               ("fp4 [1,2,1], GenNorm code", "fp4:bias=real,code=gennorm"),
               ("fp8 [1,5,2]", "fp8:bias=real"),
               ("fp8 [1,5,2], GenNorm code", "fp8:bias=real,code=gennorm")]
P003_GAMMAS = [0, 0.7, 0.9, 1]
P003_LR = 0.1


def run_train(args, opts, lr, seed):
    """Runs one `rumor sim train`; returns its rows or None if it diverged."""
    name = f"{opts} lr {lr} seed {seed} steps {STEPS}".replace(" ", "_")
    name = name.replace("/", "-").replace("|", "+").replace(":", "=")
    path = os.path.join(args.work, name + ".csv")
    div = os.path.join(args.work, name + ".diverged")
    if os.path.exists(div):
        return None
    if not os.path.exists(path):
        cmd = (
            [args.bin, "sim", "train"]
            + TASK.split()
            + opts.split()
            + ["--lr", str(lr), "--seed", str(seed)]
            + ["--steps", str(STEPS), "--every", str(EVERY)]
        )
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            with open(div, "w") as f:
                f.write(res.stderr)
            return None
        with open(path, "w") as f:
            f.write(res.stdout)
    with open(path) as f:
        lines = f.read().split()[1:]
    return [tuple(float(v) for v in line.split(",")) for line in lines]


def summary(rows):
    """(smoothed final loss, final accuracy, bits per node) of one run."""
    loss = statistics.mean(r[2] for r in rows[-TAIL:])
    return loss, rows[-1][3], rows[-1][1]


def method_stats(args, opts, lr):
    """Mean and sd over the seeds, or None if any seed diverged."""
    runs = [run_train(args, opts, lr, s) for s in SEEDS]
    if any(r is None for r in runs):
        return None
    sums = [summary(r) for r in runs]
    out = {}
    for k, key in enumerate(("loss", "acc", "bits")):
        vals = [s[k] for s in sums]
        out[key] = statistics.mean(vals)
        out[key + "_sd"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
    out["runs"] = runs
    return out


def compression(bits):
    """fp32 bits of the gradients the all-gather carries, over bits sent."""
    return 32.0 * PARAMS * (NODES - 1) * STEPS / bits


def fmt(mean, sd, digits=3):
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def fixed_lr(lrs):
    return P001_BASE_LR / 10 if lrs is DGC_LRS else P001_BASE_LR


def part_p001(args):
    print(f"## paper 001: {STEPS} steps, seeds {SEEDS}, lr grid {LRS} "
          f"(DGC: {DGC_LRS}, QSGD: {QSGD_LRS})\n")
    print(f"`rumor sim train {TASK} --steps {STEPS} --every {EVERY} "
          "--lr LR --seed S [method options]`\n")
    best = {}
    grid_rows = []
    for label, opts, lrs in P001:
        per_lr = {lr: method_stats(args, opts, lr) for lr in lrs}
        ok = {lr: s for lr, s in per_lr.items() if s is not None}
        lr = min(ok, key=lambda x: ok[x]["loss"])
        best[label] = (lr, ok[lr], per_lr.get(fixed_lr(lrs)))
        grid_rows.append((label, per_lr))
    base_lr, base, base_fixed = best[P001[0][0]]
    print("| method | compression | best lr | loss (best lr) | vs none | "
          f"test acc (best lr) | loss at lr {P001_BASE_LR} | vs none |")
    print("|---|---|---|---|---|---|---|---|")
    for label, _, _ in P001:
        lr, s, fixed = best[label]
        comp = compression(s["bits"]) if label != P001[0][0] else 1.0
        rel = 100 * (s["loss"] / base["loss"] - 1)
        if fixed is None:
            fixed_cols = "diverged | -"
        else:
            frel = 100 * (fixed["loss"] / base_fixed["loss"] - 1)
            fixed_cols = f"{fmt(fixed['loss'], fixed['loss_sd'])} | {frel:+.0f} %"
        print(f"| {label} | {comp:.1f}x | {lr} | {fmt(s['loss'], s['loss_sd'])} "
              f"| {rel:+.0f} % | {fmt(s['acc'], s['acc_sd'])} | {fixed_cols} |")
    print("\nloss: mean minibatch training loss of the last "
          f"{TAIL * EVERY} steps ({TAIL} prints), mean ± sd over the seeds; "
          "compression: fp32 gradient bits over bits sent, headers included; "
          f"DGC's fixed rate is {P001_BASE_LR / 10}\n")
    print("| method | lr: loss (mean ± sd over the seeds) |")
    print("|---|---|")
    for label, per_lr in grid_rows:
        cells = [f"{lr}: " + (fmt(s["loss"], s["loss_sd"]) if s else "diverged")
                 for lr, s in per_lr.items()]
        print(f"| {label} | " + "; ".join(cells) + " |")
    plot_p001(args, best)


def plot_p001(args, best):
    data = os.path.join(args.work, "p001-loss.dat")
    groups = [("top-k", "top-k"), ("DGC", "DGC"), ("QSGD", "QSGD"),
              ("random-k", "random-k")]
    with open(data, "w") as f:
        for prefix, _ in groups:
            for label, (lr, s, _) in best.items():
                if label.startswith(prefix):
                    f.write(f"{compression(s['bits'])} {s['loss']} "
                            f"{s['loss_sd']} \"{label}\"\n")
            f.write("\n\n")
    base = best[P001[0][0]][1]
    # random-k's two points (with and without EF) share one compression
    plots = ", ".join(
        f"'{data}' index {k} using 1:2:3 with "
        f"{'yerrorbars' if title == 'random-k' else 'yerrorlines'} "
        f"title '{title}'"
        for k, (_, title) in enumerate(groups))
    gnuplot(f"""set terminal pngcairo size 900,560
set output '{args.out}/papers-001-loss.png'
set logscale x
set xlabel 'compression (fp32 bits / bits sent)'
set ylabel 'training loss, last {TAIL * EVERY} steps (mean of 3 seeds, sd bars)'
set title 'Paper 001 at small scale: MLP, Fashion-MNIST, 4 nodes, each at its best lr'
set key top left
plot {plots}, {base['loss']} with lines dt 2 lc 'black' title 'none (fp32)'
""")


def part_p003(args):
    print(f"## paper 003: {STEPS} steps, seeds {SEEDS}, lr {P003_LR}\n")
    print(f"`rumor sim train {TASK} --steps {STEPS} --every {EVERY} "
          f"--lr {P003_LR} --seed S --codec CODEC --ef ef-decay:GAMMA`\n")
    base = method_stats(args, "", P003_LR)
    print("| codec | gamma | bits/value | test acc (final) | acc sd over seeds "
          f"| acc swing, last {STEPS // 3} steps | loss |")
    print("|---|---|---|---|---|---|---|")
    print(f"| none (fp32) | - | 32 | {base['acc']:.4f} | {base['acc_sd']:.4f} "
          f"| {swing(base['runs']):.4f} | {fmt(base['loss'], base['loss_sd'])} |")
    curves = {}
    for label, codec in P003_CODECS:
        for g in P003_GAMMAS:
            s = method_stats(args, f"--codec {codec} --ef ef-decay:{g}", P003_LR)
            if s is None:
                print(f"| {label} | {g} | - | diverged | | | |")
                continue
            bpv = 32.0 / compression(s["bits"])
            print(f"| {label} | {g} | {bpv:.2f} | {s['acc']:.4f} | "
                  f"{s['acc_sd']:.4f} | {swing(s['runs']):.4f} | "
                  f"{fmt(s['loss'], s['loss_sd'])} |")
            curves[(codec, g)] = s["runs"]
    print("\nbits/value: bits sent per gradient value, headers and Huffman "
          "tables included; acc swing: max - min test accuracy over the "
          f"prints of the last {STEPS // 3} steps, mean over the seeds\n")
    for label, codec in P003_CODECS:
        plot_p003(args, label, codec, curves, base["runs"])


def swing(runs):
    last = max(1, STEPS // 3 // EVERY)
    return statistics.mean(max(r[3] for r in rows[-last:]) -
                           min(r[3] for r in rows[-last:]) for rows in runs)


def mean_curve(runs):
    return [(rows[0][0], statistics.mean(r[k][3] for r in runs))
            for k, rows in enumerate(zip(*runs))]


def plot_p003(args, label, codec, curves, base_runs):
    name = codec.split(":")[0] + ("-gennorm" if "gennorm" in codec else "")
    data = os.path.join(args.work, f"p003-{name}.dat")
    titles = ["none (fp32)"]
    with open(data, "w") as f:
        for step, acc in mean_curve(base_runs):
            f.write(f"{step} {acc}\n")
        for g in P003_GAMMAS:
            if (codec, g) not in curves:
                continue
            f.write("\n\n")
            for step, acc in mean_curve(curves[(codec, g)]):
                f.write(f"{step} {acc}\n")
            titles.append(f"gamma {g}")
    plots = ", ".join(f"'{data}' index {k} using 1:2 with lines lw 2 title '{t}'"
                      for k, t in enumerate(titles))
    gnuplot(f"""set terminal pngcairo size 900,560
set output '{args.out}/papers-003-{name}.png'
set xlabel 'step'
set ylabel 'test accuracy (mean of 3 seeds)'
set yrange [0.6:0.9]
set title 'CO3 at small scale, {label}: MLP, Fashion-MNIST, 4 nodes, lr {P003_LR}'
set key bottom right
plot {plots}
""")


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


# the paper's three LSTM sizes (1.16 M to 9.0 M parameters), and around them
SIZES = [100000, 1161600, 4000000, 9008000, 36000000]
TIME_CODECS = ["topk:ratio=0.001", "dgc:ratio=0.001"]


def part_p001_time(args):
    import torch  # Debian python3-torch: the paper's own top-k calls

    torch.set_num_threads(1)
    print("## paper 001, compute time: encode ms per gradient, 1 thread, "
          "best of 5\n")
    print("| values | rumor topk 0.1 % | rumor dgc 0.1 % (sampled threshold) "
          "| torch.sort | torch.topk | torch sample 1 % + sort, then mask |")
    print("|---|---|---|---|---|---|")
    for n in SIZES:
        ms = rumor_encode_ms(args, n)
        x = torch.randn(n)
        k = max(1, n // 1000)
        t_sort = best_ms(lambda: torch.sort(x.abs(), descending=True))
        t_topk = best_ms(lambda: torch.topk(x.abs(), k))
        t_dgc = best_ms(lambda: dgc_torch(x, k))
        print(f"| {n} | {ms[0]:.2f} | {ms[1]:.2f} | {t_sort:.2f} | "
              f"{t_topk:.2f} | {t_dgc:.2f} |")
    print("\nrumor: `rumor bench compress --n N --reps 5 "
          + " ".join(TIME_CODECS) + "` (ms = 4 N bytes / encode GB/s)")


def dgc_torch(x, k):
    """DGC's selection as its reference code does it: the threshold from
    the top of a 1 % random sample, then a mask over the whole tensor."""
    import torch

    n = x.numel()
    m = max(1, n // 100)
    sample = x[torch.randint(0, n, (m,))].abs()
    thr = torch.topk(sample, max(1, m * k // n))[0][-1]
    return torch.nonzero(x.abs() >= thr)


def best_ms(fn, reps=5):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def rumor_encode_ms(args, n):
    res = subprocess.run(
        [args.bin, "bench", "compress", "--n", str(n), "--reps", "5"]
        + TIME_CODECS, capture_output=True, text=True, check=True)
    out = []
    for codec in TIME_CODECS:
        line = next(l for l in res.stdout.splitlines() if l.startswith(codec))
        gbs = float(line.split()[2])
        out.append(4.0 * n / (gbs * 1e9) * 1e3)
    return out


def part_ratio(args):
    print("## PowerSGD paper, compression ratios\n")
    for shapes in ("tests/data/resnet18_cifar10.shapes",
                   "tests/data/lstm_powersgd.shapes"):
        cmd = [args.bin, "lowrank", "ratio", "--model", shapes,
               "--rank", "1", "--rank", "2", "--rank", "4"]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        print("```\n$ rumor " + " ".join(cmd[1:]))
        print(res.stdout.rstrip() + "\n```\n")


PARTS = {"p001": part_p001, "p001-time": part_p001_time,
         "p003": part_p003, "ratio": part_ratio}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="+", choices=sorted(PARTS))
    ap.add_argument("--bin", default="build/bin/rumor")
    ap.add_argument("--out", default="docs")
    ap.add_argument("--work", default="build/papers")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    for p in args.parts:
        PARTS[p](args)
        print()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
