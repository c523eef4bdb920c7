#!/usr/bin/python3
"""What serving Prometheus metrics costs a gossipd run, in seconds per iteration.

Runs the same D-PSGD job with `gossipd launch` on loopback, alternating two ways, `--repeats`
times each:
  plain    no metrics endpoint;
  scraped  every node with --metrics-listen, and a thread of this script fetching every node's
           /metrics every --scrape-interval seconds (default 0.1; Prometheus's default is 15 s).
Two figures per run:
  wall  seconds per iteration: the mean over nodes of (wall_ms of the last `iter` line − wall_ms
        of the line at iteration --warmup) / (iterations between); on a shared machine this
        also carries the scraper's own CPU (Python's HTTP client on the same cores);
  cpu   gossipd's CPU seconds (user + system, every process of the launch: getrusage of the
        waited-for children) per node-iteration;
  http  the CPU of the nodes' HTTP threads (named metrics-http; /proc/PID/task/TID/schedstat, read by
        the scraper after each pass), per scrape and as a share of the nodes' CPU: what serving
        costs, exact where wall and cpu drown in the noise of a shared machine.
The figure per way is the median over its runs; overhead = scraped / plain − 1.

    bench/metrics_overhead.py [--build build] [--nodes 4] [--iterations 3000] [--hidden 256]
                              [--repeats 3] [--scrape-interval 0.1]
"""
import argparse
import json
import os
import resource
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


def http_thread_cpu_s():
    """CPU seconds of every live thread named metrics-http (schedstat's time on a CPU), by id."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip() != "metrics-http":
                        continue
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    out[tid] = int(f.read().split()[0]) / 1e9  # ns on a CPU
        except OSError:
            continue  # gone meanwhile
    return out


def scrape_loop(ports, stop, counts, interval_s):
    while not stop.is_set():
        for p in ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=1) as r:
                    r.read()
                    counts["ok"] += 1
            except OSError:
                counts["failed"] += 1  # not listening yet, or already gone
        counts["http"].update(http_thread_cpu_s())  # the newest reading of each thread
        stop.wait(interval_s)


def run(args, scraped, tmp, k):
    work = os.path.join(tmp, f"run-{'s' if scraped else 'p'}{k}")
    topo = os.path.join(tmp, f"topo{k}{int(scraped)}.pbtxt")
    with open(topo, "w") as f:
        f.write(f'name: "ring"\ngenerator {{ kind: RING nodes: {args.nodes} host: "127.0.0.1" '
                f"base_port: {free_base(args.nodes, args.port0)} }}\n")
    cmd = [os.path.join(args.build, "daemon/gossipd"), "launch", topo, "--config", args.config,
           "--workdir", work, "--insecure", "--set", f"checkpoint.dir={work}/ckpt",
           "--progress-interval", "1000"]
    counts = {"ok": 0, "failed": 0, "http": {}}
    stop = threading.Event()
    scraper = None
    if scraped:
        base = free_base(args.nodes, args.port0 + 1000)
        cmd += ["--metrics-listen", f"127.0.0.1:{base}"]
        scraper = threading.Thread(target=scrape_loop,
                                   args=(range(base, base + args.nodes), stop, counts,
                                         args.scrape_interval))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if scraper:
        scraper.start()
    out = proc.communicate()[0]
    stop.set()
    if scraper:
        scraper.join()
    if proc.returncode != 0:
        sys.exit(f"gossipd launch failed ({proc.returncode}):\n{out}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) / (
        args.nodes * args.iterations)
    s = statistics.mean(
        seconds_per_iteration(os.path.join(work, f"node-{i}", "metrics.jsonl"), args.warmup)
        for i in range(args.nodes))
    return s, cpu_s, counts["ok"], sum(counts["http"].values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scrape-interval", type=float, default=0.1,
                    help="seconds between two fetches of every node's /metrics (default 0.1)")
    args = ap.parse_args()
    if args.scrape_interval <= 0:
        ap.error("--scrape-interval must be > 0")
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
        wall = {False: [], True: []}
        cpu = {False: [], True: []}
        scrapes, http_s, scraped_cpu_s = 0, 0.0, 0.0
        for k in range(args.repeats):
            for way in (False, True):  # alternated, so drifts in machine load hit both
                s, c, n, h = run(args, way, tmp, k)
                wall[way].append(s)
                cpu[way].append(c)
                if way:
                    scrapes += n
                    http_s += h
                    scraped_cpu_s += c * args.nodes * args.iterations
                print(f"  run {k} {'scraped' if way else 'plain  '}: {s * 1e3:.4f} ms/it wall, "
                      f"{c * 1e3:.4f} ms CPU per node-iteration", flush=True)
        print(f"nodes {args.nodes}, MLP hidden {args.hidden}, {args.iterations} iterations, "
              f"{args.repeats} runs each, scrapes every {args.scrape_interval:g} s; "
              f"{scrapes} scrapes answered")
        print(f"{'':6} {'plain':>8} {'scraped':>8}  overhead  (ms, median over runs)")
        for name, d in (("wall", wall), ("cpu", cpu)):
            p, s = statistics.median(d[False]), statistics.median(d[True])
            print(f"{name:6} {p * 1e3:8.4f} {s * 1e3:8.4f}  {100 * (s / p - 1):+.2f}%")
        if scrapes:
            per = http_s / scrapes
            share = http_s / scraped_cpu_s
            print(f"http   {per * 1e6:.0f} us CPU per scrape, "
                  f"{100 * share:.3f}% of the nodes' CPU at one scrape per node every "
                  f"{args.scrape_interval:g} s; at Prometheus's 15 s: "
                  f"{100 * share * args.scrape_interval / 15:.5f}%")

if __name__ == "__main__":
    main()
