#!/usr/bin/python3
"""Plots for gossip-sim CSV files (matplotlib, PNG).

    /usr/bin/python3 scripts/plot_sim.py compare.csv --out docs/img/sim_lian
        -> <out>_loss_iter.png     train loss of the averaged model vs iteration
           <out>_loss_time.png     train loss vs simulated seconds
           <out>_consensus.png     consensus distance (1/n) sum ||x_i - xbar||^2 vs iteration
    /usr/bin/python3 scripts/plot_sim.py sweep.csv --out docs/img/sim_sweep --target-loss 0.45
        -> <out>_time_to_target.png  simulated time to the target vs the swept value, per series

A CSV with a non-empty sweep_param column is a sweep; the first three plots then use the first
sweep value's rows. Exits non-zero with a message on a missing file or an unusable CSV.
"""
import argparse
import csv
import math
import os
import sys
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series_label(row):
    return row["algorithm"] + (f" ({row['topology']})" if row["topology"] else "")


def load(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"plot_sim: {e}")
    need = {"algorithm", "topology", "iteration", "sim_time_s", "train_loss", "consensus_distance"}
    if not rows or not need <= set(rows[0]):
        sys.exit(f"plot_sim: {path} is not a gossip-sim CSV (needs columns {sorted(need)})")
    return rows


def group(rows):
    out = OrderedDict()
    for r in rows:
        out.setdefault(series_label(r), []).append(r)
    return out


def fnum(s):
    return float("nan") if s in ("", "nan") else float(s)


def line_plot(groups, x_key, y_key, xlabel, ylabel, title, path, logy=False, skip_zero=False, logx=False):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, rows in groups.items():
        xs = [fnum(r[x_key]) for r in rows]
        ys = [fnum(r[y_key]) for r in rows]
        if skip_zero and all(y == 0 for y in ys):
            continue
        if logx:  # time 0 has no place on a log axis
            xs, ys = zip(*[(x, y) for x, y in zip(xs, ys) if x > 0]) if any(x > 0 for x in xs) else ([], [])
        ax.plot(xs, ys, marker="o", markersize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logy:
        ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(path)


def bandwidth_value(text):
    units = {"bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12}
    t = text.strip().lower()
    for u in sorted(units, key=len, reverse=True):
        if t.endswith(u):
            return float(t[: -len(u)]) * units[u]
    return float(t)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="gossip-sim --csv output")
    ap.add_argument("--out", required=True, help="output path prefix (PNG files get suffixes)")
    ap.add_argument("--target-loss", type=float, help="sweep plots: target train loss")
    ap.add_argument("--title", default="", help="title prefix")
    a = ap.parse_args()
    rows = load(a.csv)
    out_dir = os.path.dirname(a.out)
    if out_dir:  # --out plots/lian: create plots/ as a user would expect
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            sys.exit(f"plot_sim: cannot create {out_dir}: {e.strerror}")
    sweep_param = rows[0].get("sweep_param", "")
    values = list(OrderedDict.fromkeys(r.get("sweep_value", "") for r in rows))
    first = [r for r in rows if r.get("sweep_value", "") == values[0]]
    groups = group(first)
    t = (a.title + ": ") if a.title else ""
    line_plot(groups, "iteration", "train_loss", "iteration", "train loss of the averaged model",
              t + "loss vs iteration", a.out + "_loss_iter.png")
    line_plot(groups, "sim_time_s", "train_loss", "simulated seconds (log)", "train loss of the averaged model",
              t + "loss vs simulated time", a.out + "_loss_time.png", logx=True)
    line_plot(groups, "iteration", "consensus_distance", "iteration", "(1/n) sum ||x_i - xbar||^2",
              t + "consensus distance", a.out + "_consensus.png", logy=True, skip_zero=True)
    if sweep_param:
        if a.target_loss is None:
            sys.exit("plot_sim: a sweep needs --target-loss for the time-to-target plot")
        fig, ax = plt.subplots(figsize=(7, 4.5))
        by_series = OrderedDict()
        for v in values:
            for label, rs in group([r for r in rows if r["sweep_value"] == v]).items():
                hit = next((fnum(r["sim_time_s"]) for r in rs if fnum(r["train_loss"]) <= a.target_loss),
                           math.nan)
                by_series.setdefault(label, []).append(hit)
        xs = [bandwidth_value(v) for v in values] if sweep_param in ("bandwidth",) else list(range(len(values)))
        for label, ys in by_series.items():
            ax.plot(xs, ys, marker="o", label=label)
        if sweep_param == "bandwidth":
            ax.set_xscale("log")
            ax.set_xlabel("link bandwidth (bit/s)")
        else:
            ax.set_xticks(xs, values)
            ax.set_xlabel(sweep_param)
        ax.set_yscale("log")
        ax.set_ylabel(f"simulated seconds to train loss <= {a.target_loss}")
        ax.set_title(t + "time to target")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = a.out + "_time_to_target.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main()
