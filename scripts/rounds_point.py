#!/usr/bin/python3
"""One point of `scripts/cluster-bench.sh --rounds`: time to a target accuracy and bytes per node.

The cluster run is timed without periodic evaluations (they would stop every node for a pass
over the test set); the accuracy curve of the averaged model comes from gossip-sim's run of the
same config, topology and settings, which computes the same bits as the daemons (docs/design.md,
daemon == simulator). The cross-check printed beside it: the mean of the nodes' own final test
accuracies, measured by the daemons, against the simulator's for the same iteration.

    rounds_point.py point DIR NODES SIM_CSV SERIES TARGET [WARM]
        DIR/metrics-<i>.jsonl: one per node. SIM_CSV: gossip-sim run --csv of the same job;
        SERIES: its algorithm column (dpsgd, cpsgd-allreduce). The iteration k at which the
        averaged model first reaches TARGET is the simulator's; the time to target is the
        cluster's: the mean over nodes of the wall-clock at the end of iteration k less the run's
        start. With WARM, DIR holds a short run only: the time is its seconds per iteration after
        WARM iterations times k (bytes per node likewise).

Prints "iterations_to_target seconds_to_target final_accuracy bytes_per_node wall_s
cluster_local_final sim_local_final source".
"""
import csv
import json
import math
import os
import sys


def load(directory, nodes):
    runs = []
    for i in range(nodes):
        path = os.path.join(directory, f"metrics-{i}.jsonl")
        if not os.path.exists(path):
            sys.exit(f"rounds_point.py: {path} missing")
        iters, evals = {}, []
        for line in open(path):
            r = json.loads(line)
            if r.get("type") == "iter":
                iters[r["iteration"]] = r
            elif r.get("type") == "eval":
                evals.append(r)
        if not iters:
            sys.exit(f"rounds_point.py: {path} has no iteration lines")
        runs.append((iters, evals))
    return runs


def simulated(sim_csv, series, target):
    rows = [r for r in csv.DictReader(open(sim_csv)) if r["algorithm"] == series]
    if not rows:
        sys.exit(f"rounds_point.py: {sim_csv} has no series {series}")
    hit = next((int(r["iteration"]) for r in rows if float(r["test_accuracy"]) >= target), None)
    last = rows[-1]
    return hit, int(last["iteration"]), float(last["test_accuracy"]), float(
        last["local_test_accuracy"])


def start_ms(it):
    first = it[min(it)]
    return first["wall_ms"] - 1000 * first["iteration_s"] * first.get("iterations_in_line", 1)


def curve(directory, nodes, sim_csv, series, warm=None):
    """[(seconds, averaged-model accuracy)]: the simulator's evaluation points at the cluster's
    wall-clock for the same iterations (with WARM: at the short run's s/it times the iteration)."""
    runs = load(directory, nodes)
    rows = [r for r in csv.DictReader(open(sim_csv)) if r["algorithm"] == series]
    out = []
    if warm is not None:
        per = []
        for it, _ in runs:
            last = max(it)
            per.append((it[last]["wall_ms"] - it[warm]["wall_ms"]) / 1000.0 / (last - warm))
        s_per_it = sum(per) / nodes
    for r in rows:
        k = int(r["iteration"])
        if k == 0:
            continue
        if warm is not None:
            seconds = s_per_it * k
        elif all(k in it for it, _ in runs):
            seconds = sum(it[k]["wall_ms"] - start_ms(it) for it, _ in runs) / nodes / 1000.0
        else:
            continue
        out.append((seconds, float(r["test_accuracy"])))
    return out


def point(directory, nodes, sim_csv, series, target, warm):
    runs = load(directory, nodes)
    hit, total, final, sim_local = simulated(sim_csv, series, target)
    finals = [e["test_accuracy"] for _, evals in runs for e in evals if e["iteration"] == total]
    cluster_local = sum(finals) / len(finals) if len(finals) == nodes else float("nan")
    if warm is None:
        wall = sum(max(r["wall_ms"] for r in it.values()) - start_ms(it) for it, _ in runs) / nodes
        wall /= 1000.0
        if hit is None:
            seconds, sent = float("nan"), float("nan")
        else:
            seconds = sum(it[hit]["wall_ms"] - start_ms(it) for it, _ in runs) / nodes / 1000.0
            sent = sum(sum(r["bytes_sent"] for k, r in it.items() if k <= hit)
                       for it, _ in runs) / nodes
        source = "measured"
    else:
        per, sent_per_it = [], []
        for it, _ in runs:
            last = max(it)
            per.append((it[last]["wall_ms"] - it[warm]["wall_ms"]) / 1000.0 / (last - warm))
            sent_per_it.append(sum(it[k]["bytes_sent"] for k in range(warm + 1, last + 1)) /
                               (last - warm))
        s_per_it, b_per_it = sum(per) / nodes, sum(sent_per_it) / nodes
        wall = s_per_it * total
        seconds = s_per_it * hit if hit is not None else float("nan")
        sent = b_per_it * hit if hit is not None else float("nan")
        source = "s/it_x_sim"
    print(f"{hit if hit is not None else '-'} {seconds:.3f} {final:.4f} "
          f"{sent:.0f} {wall:.3f} {cluster_local:.4f} {sim_local:.4f} {source}")


def main(argv):
    if len(argv) in (7, 8) and argv[1] == "point":
        warm = int(argv[7]) if len(argv) == 8 else None
        point(argv[2], int(argv[3]), argv[4], argv[5], float(argv[6]), warm)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
