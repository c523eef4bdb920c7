#!/usr/bin/python3
"""Accuracy against wall-clock time for D-PSGD and ALLREDUCE on the cluster (matplotlib, PNG).

    /usr/bin/python3 scripts/plot_cluster.py build/cluster-bench --out docs/img/cluster_accuracy_100mbit.png
    /usr/bin/python3 scripts/plot_cluster.py build/cluster-bench --rounds --out docs/img/cluster_rounds.png

Reads the per-node metrics that scripts/cluster-bench.sh keeps for its accuracy runs
(points/mlp_100mbit_<topology>_curve/metrics-<i>.jsonl): every periodic `eval` line (iteration a
multiple of --every; the final evaluation on the whole test set is left out, so every point has
the same test examples) is one node's test accuracy of its own model, stamped with wall_ms. A series is the mean over the
nodes at each evaluated iteration, at the mean wall time the nodes reached it, counted from the
start of that run's first iteration. Also prints each series' accuracy at the wall time at which
the first of them finished (the same wall-clock budget for both). Exits non-zero with a message
when a run directory or its metrics are missing.

With --rounds: scripts/cluster-bench.sh --rounds's points, the averaged model's test accuracy
(gossip-sim's curve of the same job, which computes the daemons' bits) at the cluster's wall-clock
for each iteration, one panel per link, log time axis.
"""
import argparse
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {
    "one_peer_exponential": "D-PSGD, one-peer exponential",
    "ring": "D-PSGD, ring",
    "exponential": "D-PSGD, static exponential",
    "allreduce": "ALLREDUCE (Gloo ring allreduce)",
}


def load_run(directory, every):
    """[(seconds, mean accuracy)] of one run, in iteration order."""
    files = sorted(glob.glob(os.path.join(directory, "metrics-*.jsonl")))
    if not files:
        sys.exit(f"plot_cluster.py: no metrics-*.jsonl in {directory} (run scripts/cluster-bench.sh)")
    start = None
    evals = {}  # iteration -> [(wall_ms, accuracy)]
    for path in files:
        node_evals = {}
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"plot_cluster.py: {path}:{n}: not JSON: {e}")
                if r.get("type") == "iter":
                    begin = r["wall_ms"] - 1000.0 * r["iteration_s"] * r.get("iterations_in_line", 1)
                    start = begin if start is None else min(start, begin)
                elif r.get("type") == "eval":
                    # The periodic evaluation (eval_examples) only: the run's final one, on the
                    # whole test set, comes later at the same or the last iteration.
                    if r["iteration"] % every == 0 and r["iteration"] not in node_evals:
                        node_evals[r["iteration"]] = (r["wall_ms"], r["test_accuracy"])
        for it, v in node_evals.items():
            evals.setdefault(it, []).append(v)
    if start is None or not evals:
        sys.exit(f"plot_cluster.py: {directory}: no iter or eval lines")
    series = []
    for it in sorted(evals):
        v = evals[it]
        if len(v) != len(files):
            continue  # not every node evaluated there
        wall = sum(w for w, _ in v) / len(v)
        series.append(((wall - start) / 1000.0, sum(a for _, a in v) / len(v)))
    return series


def accuracy_at(series, seconds):
    best = None
    for s, a in series:
        if s <= seconds:
            best = a
    return best


def plot_rounds(bench_dir, out):
    """Accuracy of the averaged model against the cluster's wall-clock, one panel per link, from
    scripts/cluster-bench.sh --rounds (rounds.csv and rounds/<link>_<config>/)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import csv
    import rounds_point
    path = os.path.join(bench_dir, "rounds.csv")
    if not os.path.exists(path):
        sys.exit(f"plot_cluster.py: {path} missing (run scripts/cluster-bench.sh --rounds)")
    rows = list(csv.DictReader(open(path)))
    links = sorted({r["link"] for r in rows}, key=[r["link"] for r in rows].index)
    fig, axes = plt.subplots(1, len(links), figsize=(6 * len(links), 4.2), squeeze=False)
    for ax, link in zip(axes[0], links):
        for r in (r for r in rows if r["link"] == link):
            d = os.path.join(bench_dir, "rounds", f"{link.replace('/', '_')}_{r['config']}")
            series = "cpsgd-allreduce" if r["config"].startswith(("allreduce", "diloco")) else "dpsgd"
            warm = 2 if r["source"] == "s/it_x_sim" else None
            pts = rounds_point.curve(d, 8, os.path.join(d, "sim.csv"), series, warm)
            label = f"{r['config']} ({float(r['bytes_per_node']) / 1e6:.1f} MB/node to target)" \
                if r["bytes_per_node"] != "nan" else r["config"]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label)
        ax.axhline(float(rows[0]["target"]), color="grey", linestyle=":", label="target")
        ax.set_xscale("log")
        ax.set_ylim(0.8, 0.9)
        ax.set_xlabel("wall-clock on the cluster (s, log)")
        ax.set_ylabel("test accuracy of the averaged model")
        ax.set_title(f"8 hosts, {link}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_cluster.py: wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_dir", help="scripts/cluster-bench.sh's output directory")
    ap.add_argument("--bandwidth", default="100mbit")
    ap.add_argument("--out", default="docs/img/cluster_accuracy_100mbit.png")
    ap.add_argument("--every", type=int, default=25, help="the runs' eval_every")
    ap.add_argument("--rounds", action="store_true",
                    help="plot cluster-bench.sh --rounds (averaged model against wall-clock, per link)")
    a = ap.parse_args()
    if a.rounds:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        return plot_rounds(a.bench_dir, a.out)
    runs = sorted(glob.glob(os.path.join(a.bench_dir, "points", f"mlp_{a.bandwidth}_*_curve")))
    if not runs:
        sys.exit(f"plot_cluster.py: no accuracy runs (points/mlp_{a.bandwidth}_*_curve) in {a.bench_dir}")
    series = {}
    for d in runs:
        topo = os.path.basename(d)[len(f"mlp_{a.bandwidth}_"):-len("_curve")]
        series[topo] = load_run(d, a.every)
    plt.figure(figsize=(7, 4.2))
    for topo, s in series.items():
        plt.plot([x for x, _ in s], [y for _, y in s], marker=".", label=LABELS.get(topo, topo))
    plt.xlabel("wall-clock time (s)")
    plt.ylabel("test accuracy (mean of the nodes' models)")
    plt.title(f"8 netns hosts, {a.bandwidth} per host, Fashion-MNIST MLP (235k parameters)")
    plt.grid(alpha=0.3)
    plt.legend()
    plt.tight_layout()
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    plt.savefig(a.out, dpi=110)
    budget = min(s[-1][0] for s in series.values())
    for topo, s in series.items():
        print(f"{LABELS.get(topo, topo)}: {s[-1][1]:.4f} after {s[-1][0]:.1f} s; "
              f"{accuracy_at(s, budget):.4f} at {budget:.1f} s")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
