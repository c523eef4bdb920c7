#!/usr/bin/python3
"""One point of `scripts/cluster-bench.sh --rounds`: time to a target accuracy and bytes per node.

    rounds_point.py run DIR NODES TARGET
        A whole run's metrics (DIR/metrics-<i>.jsonl, one per node): the run starts at its first
        iteration (the earliest node's); each periodic evaluation is the mean of the nodes' test
        accuracies at the mean time they reached it; the time to TARGET is the first that meets
        it (else the final evaluation's, on the whole test set, if that does; else nan).
    rounds_point.py measured-rate DIR NODES WARM SIM_CSV TARGET
        A short run's seconds per iteration after WARM iterations (the mean over nodes) times the
        iterations gossip-sim's run of the same config (SIM_CSV, series cpsgd-allreduce) needs to
        reach TARGET; bytes per node: the run's bytes per iteration times those iterations.

Prints "iterations_to_target seconds_to_target final_accuracy bytes_per_node wall_s source".
"""
import csv
import json
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


def whole_run(directory, nodes, target):
    runs = load(directory, nodes)
    start = min(it[min(it)]["wall_ms"] - 1000 * it[min(it)]["iteration_s"] * it[min(it)].get(
        "iterations_in_line", 1) for it, _ in runs)
    last = max(max(it) for it, _ in runs)
    by_iteration = {}
    for _, evals in runs:
        for e in evals:
            by_iteration.setdefault(e["iteration"], []).append(e)
    points = []
    for iteration in sorted(by_iteration):
        es = by_iteration[iteration]
        if len(es) < nodes:
            continue
        acc = sum(e["test_accuracy"] for e in es) / len(es)
        seconds = sum(e["wall_ms"] for e in es) / len(es) / 1000.0 - start / 1000.0
        points.append((iteration, seconds, acc))
    if not points:
        sys.exit(f"rounds_point.py: {directory}: no evaluation every node made")
    final_acc = points[-1][2]
    hit = next((p for p in points if p[2] >= target), None)
    sent = sum(sum(r["bytes_sent"] for r in it.values()) for it, _ in runs) / nodes
    wall = max(max(r["wall_ms"] for r in it.values()) for it, _ in runs) / 1000.0 - start / 1000.0
    it_t, t_t = (hit[0], hit[1]) if hit else ("-", float("nan"))
    print(f"{it_t} {t_t:.3f} {final_acc:.4f} {sent:.0f} {wall:.3f} measured")


def measured_rate(directory, nodes, warm, sim_csv, target):
    runs = load(directory, nodes)
    per, sent, count = [], 0, 0
    for it, _ in runs:
        last = max(it)
        per.append((it[last]["wall_ms"] - it[warm]["wall_ms"]) / 1000.0 / (last - warm))
        for t in range(warm + 1, last + 1):
            sent += it[t]["bytes_sent"]
            count += 1
    s_per_it = sum(per) / len(per)
    bytes_per_it = sent / count
    rows = [r for r in csv.DictReader(open(sim_csv)) if r["algorithm"] == "cpsgd-allreduce"]
    final = float(rows[-1]["test_accuracy"])
    total = int(rows[-1]["iteration"])
    hit = next((int(r["iteration"]) for r in rows if float(r["test_accuracy"]) >= target), None)
    if hit is None:
        print(f"- nan {final:.4f} {bytes_per_it * total:.0f} {s_per_it * total:.3f} s/it_x_sim")
        return
    print(f"{hit} {s_per_it * hit:.3f} {final:.4f} {bytes_per_it * hit:.0f} {s_per_it * total:.3f} "
          f"s/it_x_sim")


def main(argv):
    if len(argv) >= 4 and argv[1] == "run":
        whole_run(argv[2], int(argv[3]), float(argv[4]))
    elif len(argv) >= 7 and argv[1] == "measured-rate":
        measured_rate(argv[2], int(argv[3]), int(argv[4]), argv[5], float(argv[6]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
