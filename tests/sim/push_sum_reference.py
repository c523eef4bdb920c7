#!/usr/bin/python3
"""Asynchronous push-sum, independently of gossip-sim: schedules, the logs gossipd writes, and
the numerator-form recursion in float64 (numpy; run by Debian's /usr/bin/python3).

A schedule is, for each node i, consumed[i][t] (the messages (j, s) node i mixes at its iteration
t, sorted) and drained[i] (those it mixes after its last iteration). The reference keeps the
numerator x_i = w_i z_i and the weight w_i, and at node i's iteration t

    w_i <- p_ii(t) w_i + sum p_ij(s) w_j^s,   x_i <- p_ii(t) x_i + sum_(j,s) p_ij(s) x_j^s - gamma w_i u_i
    (the step on the de-biased parameters z = x / w; p_ii = 1 and empty messages once i is alone)

with u_i = z_i - b_i (node i's loss 1/2 |z - b_i|^2, its gradient at z_i = x_i / w_i); the drain
the same with p_ii = 1 and no step. p_ij(s) = 1 / (1 + |out-neighbours of j at s|).

Imported by push_sum_replay_test.py; as a script (push_sum_replay_test.cc):
    push_sum_reference.py quadratic DIR N T D GAMMA SEED
writes DIR/logs/node-<i>/push_sum_order.tsv (slow_node_schedule), DIR/z0.f64 and DIR/b.f64 (N x D, float32 values) and the reference's
DIR/z.f64 (N x D) and DIR/w.f64 (N).
"""
import os
import sys

import numpy as np


class Topology:
    """in_neighbours(i, t) and out_degree(j, t) of a (possibly time-varying) directed graph."""

    def __init__(self, n, arcs_at):
        self.n = n
        self.arcs_at = arcs_at  # t -> list of arcs (from, to)

    def in_neighbours(self, i, t):
        return sorted({a for a, b in self.arcs_at(t) if b == i})

    def out_degree(self, j, t):
        return len({b for a, b in self.arcs_at(t) if a == j})

    def p(self, j, t):
        return 1.0 / (1.0 + self.out_degree(j, t))


def directed_ring(n):
    arcs = [(i, (i + 1) % n) for i in range(n)]
    return Topology(n, lambda t: arcs)


def star(n):
    arcs = [(0, i) for i in range(1, n)] + [(i, 0) for i in range(1, n)]
    return Topology(n, lambda t: arcs)


def one_peer_exponential(n):
    hops = max(1, (n - 1).bit_length())  # ceil(log2 n)
    return Topology(n, lambda t: [(i, (i + (1 << (t % hops))) % n) for i in range(n)])


def lockstep(topo, T):
    """Every node mixes at t exactly the messages of iteration t sent to it: synchronous push-sum."""
    consumed = [[[(j, t) for j in topo.in_neighbours(i, t)] for t in range(T)] for i in range(topo.n)]
    return consumed, [[] for _ in range(topo.n)]


def clocked(topo, T, tau, duration, delay):
    """A run on per-node clocks (integer ticks) with staleness tau: node i's iteration t takes
    duration(i, t) ticks and may start only once every message (j, t - tau) sent to it has arrived;
    at its start it sends (i, t), which reaches node o delay(i, t, o) >= 1 ticks later, and mixes
    every message that has arrived and is not mixed yet; after its last iteration it drains the
    rest."""
    n = topo.n
    consumed = [[] for _ in range(n)]
    arrived = {}  # (j, s, i) -> tick
    pending = [[] for _ in range(n)]  # messages on their way to i: (tick, j, s)
    ready = [0] * n
    tick = 0
    while any(len(c) < T for c in consumed):
        for i in range(n):
            t = len(consumed[i])
            if t == T or ready[i] > tick:
                continue
            s = t - tau
            if s >= 0 and any(arrived.get((j, s, i), tick + 1) > tick for j in topo.in_neighbours(i, s)):
                continue  # too far ahead: waits for its in-neighbours' iteration t - tau
            for o in range(n):
                if o != i and i in topo.in_neighbours(o, t):
                    at = tick + delay(i, t, o)
                    arrived[(i, t, o)] = at
                    pending[o].append((at, i, t))
            consumed[i].append(sorted((j, s) for at, j, s in pending[i] if at <= tick))
            pending[i] = [m for m in pending[i] if m[0] > tick]
            ready[i] = tick + duration(i, t)
        tick += 1
    return consumed, [sorted((j, s) for _, j, s in pending[i]) for i in range(n)]


def causal_order(n, T, consumed, drained):
    """The steps (i, t) (t == T: the drain) in an order where z_j^s exists when it is read."""
    nxt = [0] * n
    order = []
    while len(order) < n * (T + 1):
        moved = False
        for i in range(n):
            while nxt[i] <= T:
                msgs = consumed[i][nxt[i]] if nxt[i] < T else drained[i]
                if any(nxt[j] < s for j, s in msgs):
                    break
                order.append((i, nxt[i]))
                nxt[i] += 1
                moved = True
        if not moved:
            raise ValueError("causally impossible schedule")
    return order


def last_send(topo, j, i, T):
    """The last iteration s < T at which j sends to i, or -1."""
    return next((s for s in range(T - 1, -1, -1) if j in topo.in_neighbours(i, s)), -1)


def empties(topo, T, consumed, drained):
    """Every message (j, s) sent while j was alone: it carries no mass and is not mixed. Node i is
    alone from the line after the one where every in-neighbour j was exhausted: its last message
    taken, or its first empty one (j alone). Computed in a causal order, since j's being alone
    decides which of its messages are empty."""
    n = topo.n
    senders = [{j for t in range(T) for j in topo.in_neighbours(i, t)} for i in range(n)]
    alone = [T] * n
    exhausted = [dict() for _ in range(n)]  # j -> the line that exhausted it
    for i, t in causal_order(n, T, consumed, drained):
        if t == T:
            continue
        for j, s in consumed[i][t]:
            if j not in exhausted[i] and (s >= alone[j] or s == last_send(topo, j, i, T)):
                exhausted[i][j] = t
        live = [j for j in senders[i] if last_send(topo, j, i, T) >= 0]
        if senders[i] and alone[i] == T and all(j in exhausted[i] for j in live):
            alone[i] = min(T, max([exhausted[i][j] for j in live], default=-1) + 1)
    return {(j, s) for i in range(n) for line in consumed[i] + [drained[i]]
            for j, s in line if s >= alone[j]}, alone


def float32_weights(topo, T, consumed, drained):
    """w_i^final as gossipd keeps it: each new weight summed in float64 over the row (own entry at
    its place by node id) and rounded to float32 (topology::push_sum_mix), for the weight lines."""
    n = topo.n
    empty, alone = empties(topo, T, consumed, drained)
    w = {(i, 0): np.float32(1) for i in range(n)}
    final = [None] * n
    for i, t in causal_order(n, T, consumed, drained):
        msgs = [m for m in (consumed[i][t] if t < T else drained[i]) if m not in empty]
        if t == T and not msgs:
            final[i] = w[(i, T)]
            continue
        own = (i, topo.p(i, t) if t < T and t < alone[i] else 1.0, w[(i, t)])
        row = [(j, topo.p(j, s), w[(j, s)]) for j, s in msgs]
        k = next((k for k, (j, _, _) in enumerate(row) if j > i), len(row))
        row.insert(k, own)
        total = 0.0
        for _, p, wj in row:
            total += p * float(wj)
        if t < T:
            w[(i, t + 1)] = np.float32(total)
        else:
            final[i] = np.float32(total)
    return final


def numerator_reference(topo, T, consumed, drained, z0, b, gamma):
    """The float64 numerator-form recursion (module docstring): the final z_i = x_i / w_i and w_i."""
    n = topo.n
    empty, alone = empties(topo, T, consumed, drained)
    x = {(i, 0): np.array(z0[i], dtype=np.float64) for i in range(n)}
    w = {(i, 0): 1.0 for i in range(n)}
    for i, t in causal_order(n, T, consumed, drained):
        msgs = [m for m in (consumed[i][t] if t < T else drained[i]) if m not in empty]
        p_own = topo.p(i, t) if t < T and t < alone[i] else 1.0
        xi = p_own * x[(i, t)]
        wi = p_own * w[(i, t)]
        for j, s in msgs:
            xi = xi + topo.p(j, s) * x[(j, s)]
            wi += topo.p(j, s) * w[(j, s)]
        if t < T:  # the step on the de-biased parameters: the numerator moves by gamma w' u
            xi = xi - gamma * wi * (x[(i, t)] / w[(i, t)] - b[i])
        x[(i, t + 1)], w[(i, t + 1)] = xi, wi
    z = np.array([x[(i, T + 1)] / w[(i, T + 1)] for i in range(n)])
    return z, np.array([w[(i, T + 1)] for i in range(n)])


def write_logs(directory, n, T, consumed, drained, weights, staleness=3, header=None, topo=None):
    """gossipd's push_sum_order.tsv of every node; `header(i)` replaces node i's header line."""
    for i in range(n):
        d = os.path.join(directory, f"node-{i}")
        os.makedirs(d, exist_ok=True)
        empty, _ = empties(topo, T, consumed, drained) if topo else (set(), None)
        entries = lambda msgs: " ".join(f"{j}:{s}" + ("e" if (j, s) in empty else "") for j, s in msgs)
        lines = [header(i) if header else
                 f"# gossip-sgd push-sum order 1 node {i} nodes {n} start 0 total {T} staleness {staleness}"]
        lines += [f"{t}\t{entries(consumed[i][t])}" for t in range(T)]
        lines.append(f"end\t{entries(drained[i])}")
        lines.append(f"weight\t{float(weights[i]).hex()}")
        with open(os.path.join(d, "push_sum_order.tsv"), "w") as f:
            f.write("\n".join(lines) + "\n")


def slow_node_schedule(n, T, seed, tau=3):
    """The directed ring of n, node 0 at a quarter of the others' speed for the first half of the
    run, delays of 1 to 3 ticks, staleness tau: nodes mix 0, 1 or several messages per iteration,
    messages older and newer than the iteration, and some in the drain."""
    topo = directed_ring(n)
    rng = np.random.default_rng(seed)
    delays = rng.integers(1, 4, size=(n, T, n))
    consumed, drained = clocked(topo, T, tau, lambda i, t: 4 if i == 0 and t < T // 2 else 1,
                                lambda j, s, i: int(delays[j, s, i]))
    return topo, consumed, drained


def main(argv):
    if len(argv) != 8 or argv[1] != "quadratic":
        sys.exit("usage: push_sum_reference.py quadratic DIR N T D GAMMA SEED")
    directory, n, T, d, gamma, seed = argv[2], int(argv[3]), int(argv[4]), int(argv[5]), \
        float(argv[6]), int(argv[7])
    topo, consumed, drained = slow_node_schedule(n, T, seed)
    rng = np.random.default_rng(seed + 1)
    z0 = rng.normal(size=(n, d)).astype(np.float32).astype(np.float64)
    b = (3 * rng.normal(size=(n, d))).astype(np.float32).astype(np.float64)
    z, w = numerator_reference(topo, T, consumed, drained, z0, b, gamma)
    write_logs(os.path.join(directory, "logs"), n, T, consumed, drained,
               float32_weights(topo, T, consumed, drained), topo=topo)
    for name, a in (("z0", z0), ("b", b), ("z", z), ("w", w)):
        np.ascontiguousarray(a, dtype=np.float64).tofile(os.path.join(directory, name + ".f64"))


if __name__ == "__main__":
    main(sys.argv)
