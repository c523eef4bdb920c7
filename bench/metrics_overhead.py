#!/usr/bin/python3
"""What serving Prometheus metrics costs a gossipd run, in seconds per iteration.

Runs the same D-PSGD job with `gossipd launch` on loopback, alternating two ways, `--repeats`
times each:
  plain    no metrics endpoint;
  scraped  every node with --metrics-listen, and a thread of this script fetching every node's
           /metrics every 100 ms (Prometheus's usual interval is 15 s: this is 150 times harsher).
Seconds per iteration of one run: the mean over nodes of (wall_ms of the last `iter` line −
wall_ms of the line at iteration --warmup) / (iterations between). The figure per way is the
median over its runs; overhead = scraped / plain − 1.

    bench/metrics_overhead.py [--build build] [--nodes 4] [--iterations 3000] [--hidden 256]
                              [--repeats 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_base(n, start):
    """A base port >= start with n free consecutive loopback ports (probed by binding)."""
    import socket
    for base in range(start, 60000, 37):
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    sys.exit("no free ports")


def seconds_per_iteration(path, warmup):
    lines = [json.loads(l) for l in open(path) if '"type":"iter"' in l]
    first = next(l for l in lines if l["iteration"] >= warmup)
    last = lines[-1]
    return (last["wall_ms"] - first["wall_ms"]) / 1000.0 / (last["iteration"] - first["iteration"])


def scrape_loop(ports, stop, counts):
    while not stop.is_set():
        for p in ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=1) as r:
                    r.read()
                    counts["ok"] += 1
            except OSError:
                counts["failed"] += 1  # not listening yet, or already gone
        stop.wait(0.1)


def run(args, scraped, tmp, k):
    work = os.path.join(tmp, f"run-{'s' if scraped else 'p'}{k}")
    topo = os.path.join(tmp, f"topo{k}{int(scraped)}.pbtxt")
    with open(topo, "w") as f:
        f.write(f'name: "ring"\ngenerator {{ kind: RING nodes: {args.nodes} host: "127.0.0.1" '
                f"base_port: {free_base(args.nodes, args.port0)} }}\n")
    cmd = [os.path.join(args.build, "daemon/gossipd"), "launch", topo, "--config", args.config,
           "--workdir", work, "--insecure", "--set", f"checkpoint.dir={work}/ckpt",
           "--progress-interval", "1000"]
    counts = {"ok": 0, "failed": 0}
    stop = threading.Event()
    scraper = None
    if scraped:
        base = free_base(args.nodes, args.port0 + 1000)
        cmd += ["--metrics-listen", f"127.0.0.1:{base}"]
        scraper = threading.Thread(target=scrape_loop,
                                   args=(range(base, base + args.nodes), stop, counts))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if scraper:
        scraper.start()
    out = proc.communicate()[0]
    stop.set()
    if scraper:
        scraper.join()
    if proc.returncode != 0:
        sys.exit(f"gossipd launch failed ({proc.returncode}):\n{out}")
    s = statistics.mean(
        seconds_per_iteration(os.path.join(work, f"node-{i}", "metrics.jsonl"), args.warmup)
        for i in range(args.nodes))
    return s, counts["ok"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    args.port0 = 32000 + (os.getpid() % 200) * 100  # the topology's ports; metrics 1000 above
    with tempfile.TemporaryDirectory(prefix="metrics-overhead-") as tmp:
        args.config = os.path.join(tmp, "train.pbtxt")
        with open(args.config, "w") as f:
            f.write(f"seed: 1\nmodel {{ kind: MLP hidden: {args.hidden} }}\n"
                    "data { dataset: SYNTHETIC_LOGISTIC num_examples: 8192 dim: 64 "
                    "test_examples: 256 }\nbatch_size: 32\n"
                    "optimizer { kind: MOMENTUM lr: 0.05 momentum: 0.9 }\n"
                    f"iterations: {args.iterations}\nmetrics_every: 10\neval_every: 0\ncpu_threads: 1\n"
                    "checkpoint { every: 0 }\n")
        plain, scraped, scrapes = [], [], 0
        for k in range(args.repeats):
            for way in (False, True):  # alternated, so drifts in machine load hit both
                s, n = run(args, way, tmp, k)
                (scraped if way else plain).append(s)
                scrapes += n
                print(f"  run {k} {'scraped' if way else 'plain  '}: {s * 1e3:.4f} ms/it",
                      flush=True)
        p, s = statistics.median(plain), statistics.median(scraped)
        print(f"nodes {args.nodes}, MLP hidden {args.hidden}, {args.iterations} iterations, "
              f"{args.repeats} runs each; {scrapes} scrapes answered")
        print(f"{'plain':>8} {'scraped':>8}  overhead  (ms/it, median over runs)")
        print(f"{p * 1e3:8.4f} {s * 1e3:8.4f}  {100 * (s / p - 1):+.2f}%")


if __name__ == "__main__":
    main()
