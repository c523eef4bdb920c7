#!/usr/bin/python3
"""attach_bench: what attaching a Python trainer adds to one iteration, per parameter count.

Runs tests/attach/attach_peer --echo (the real AttachServer answering every POST at once, buffer
untouched) and measures, as medians over --iterations:
  round trip   Client.post_and_get(): POST, the daemon side's wait_post/reply_mixed, MIXED
  gossip()     GossipOptimizer.gossip() on a CPU model (everything attach adds to a CPU PyTorch
               trainer's iteration beyond the daemon's own exchange and mixing): the parameters
               are views of the shared buffer, so this is the round trip plus the wrapper's walk
               over the parameter list
  2 x memcpy   two numpy copies of the same bytes (what copying the parameters in and out, as a
               wrapper without the views would, costs)
The daemon's own iteration times at the same sizes are in docs/daemon.md ("Benchmark").

    ATTACH_PEER=build/tests/attach/attach_peer bench/attach_bench.py --params 1M,25M
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from gossip_sgd import Client  # noqa: E402


def parse_count(text):
    scale = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(text[:-1]) * scale[text[-1]]) if text[-1] in scale else int(text)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def start_peer(peer, socket_path, iterations):
    proc = subprocess.Popen([peer, "--socket", socket_path, "--echo", "--iterations",
                             str(iterations)], stdout=subprocess.PIPE, text=True)
    if not proc.stdout.readline().startswith("listening"):
        proc.kill()
        sys.exit("attach_bench: attach_peer did not start")
    return proc


def median_ms(samples):
    return statistics.median(samples) * 1e3


def timed(step, iterations):
    """Seconds each of `iterations` calls of step() took."""
    seconds = []
    for _ in range(iterations):
        begin = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - begin)
    return seconds


def bench_size(peer, n, iterations):
    import torch
    from gossip_sgd.torch_optim import GossipOptimizer

    with tempfile.TemporaryDirectory(prefix="attach_bench_") as tmp:
        sock = os.path.join(tmp, "s")
        # Round trip alone.
        proc = start_peer(peer, sock, iterations)
        client = Client(sock, n, timeout=120)
        client.params[:] = 1.0
        trips = timed(client.post_and_get, iterations)
        client.close()
        proc.wait()

        # gossip() of a model of n parameters in four tensors.
        sizes = [n // 2, n // 4, n // 8, n - n // 2 - n // 4 - n // 8]
        params = [torch.nn.Parameter(torch.randn(s)) for s in sizes]
        proc = start_peer(peer, sock, iterations + 1)
        opt = GossipOptimizer(torch.optim.SGD(params, lr=0.1), socket_path=sock, timeout=120)
        opt.gossip()  # first touch of the buffer's pages
        gossips = timed(opt.gossip, iterations)
        opt.close()
        proc.wait()

    a = np.ones(n, np.float32)
    b = np.empty_like(a)
    def copy_both_ways():
        np.copyto(b, a)
        np.copyto(a, b)

    copies = timed(copy_both_ways, iterations)
    return median_ms(trips), median_ms(gossips), median_ms(copies)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="1M,25M", help="comma-separated parameter counts")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--peer", default=os.environ.get("ATTACH_PEER",
                                                     "build/tests/attach/attach_peer"))
    args = ap.parse_args()
    if not os.path.exists(args.peer):
        sys.exit(f"attach_bench: no attach_peer at {args.peer} (build it, or set --peer)")
    import torch
    print(f"# {cpu_name()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), medians of "
          f"{args.iterations}")
    print("| parameters | MB | round trip ms | gossip() ms | 2 x memcpy ms |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for text in args.params.split(","):
        n = parse_count(text)
        trip, gossip, copy = bench_size(args.peer, n, args.iterations)
        print(f"| {n} | {n * 4 / 1e6:.1f} | {trip:.3f} | {gossip:.1f} | {copy:.1f} |", flush=True)


if __name__ == "__main__":
    main()
