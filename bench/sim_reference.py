#!/usr/bin/python3
"""numpy reference for bench/sim_bench: the same D-PSGD loop on synthetic least squares.

Every iteration, every node i draws a mini-batch from its own shard, computes the least-squares
gradient at its own x_i, and then x_i <- sum_j W_ij x_j - lr * g_i (Lian et al. 2017, Alg. 1),
with W the Metropolis-Hastings ring (weights 1/3) or the static exponential graph (node i hears
from i - 2^k, k < ceil(log2 n), weights 1/(tau+1)). Written the way a numpy user would: all nodes
at once (batched matmul for the gradients, scipy.sparse for the mixing), float32 throughout.
The gradients use np.matmul on the stacked (n, b, d) batch rather than np.einsum: on this
machine matmul was 1.2-1.3x faster for the whole loop (einsum, used before 2026-11-23 03:30,
flattered gossip-sim by that much). np.take(..., out=) into a preallocated buffer and the
all-shard formulation (every node's 32 rows, gradient weighted by sample counts) were slower.

Timed with this thread's CPU time (time.thread_time; --wall: time.perf_counter), as sim_bench
times its own side. Prints one line: "node_iterations_per_s <value>".
"""
import argparse
import math
import time

import numpy as np
import scipy.sparse as sp


def mixing_matrix(kind, n):
    if kind == "ring":
        rows = np.repeat(np.arange(n), 3)
        cols = (rows + np.tile([-1, 0, 1], n)) % n
        return sp.csr_matrix((np.full(3 * n, 1 / 3, dtype=np.float32), (rows, cols)), shape=(n, n))
    tau = max(1, math.ceil(math.log2(n)))
    rows = np.repeat(np.arange(n), tau + 1)
    shifts = np.tile([0] + [2**k for k in range(tau)], n)
    cols = (rows - shifts) % n
    w = np.full(n * (tau + 1), 1 / (tau + 1), dtype=np.float32)
    return sp.csr_matrix((w, (rows, cols)), shape=(n, n))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--dim", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--examples-per-node", type=int, default=32)
    ap.add_argument("--topology", choices=["ring", "exponential"], default="ring")
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=2,
                    help="timed loops of --iterations; the fastest is reported")
    ap.add_argument("--wall", action="store_true",
                    help="time with the wall clock instead of this thread's CPU time")
    a = ap.parse_args()
    n, d, b, m = a.nodes, a.dim, a.batch, a.examples_per_node
    rng = np.random.default_rng(1)
    features = rng.standard_normal((n * m, d), dtype=np.float32)
    truth = rng.standard_normal(d, dtype=np.float32)
    targets = features @ truth + np.float32(0.1) * rng.standard_normal(n * m, dtype=np.float32)
    w = mixing_matrix(a.topology, n)
    x = np.zeros((n, d), dtype=np.float32)  # row i: node i's model
    lr = np.float32(0.01)
    base = (np.arange(n) * m)[:, None]

    def iteration():
        nonlocal x
        idx = base + rng.integers(0, m, size=(n, b))          # each node samples its own shard
        a_batch = features[idx]                                # (n, b, d)
        residual = (a_batch @ x[:, :, None])[:, :, 0] - targets[idx]   # (n, b)
        grad = (residual[:, None, :] @ a_batch)[:, 0, :] / np.float32(b)  # (n, d)
        x = w @ x - lr * grad                                  # gossip + local step

    clock = time.perf_counter if a.wall else time.thread_time
    iteration()  # warm-up
    best = float("inf")
    for _ in range(a.repeats):  # best of --repeats timed loops, as sim_bench times its own side
        start = clock()
        for _ in range(a.iterations):
            iteration()
        best = min(best, clock() - start)
    assert np.isfinite(x).all()
    print(f"node_iterations_per_s {a.iterations * n / best:.6g}")


if __name__ == "__main__":
    main()
