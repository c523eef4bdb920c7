#!/usr/bin/python3
"""Asynchronous push-sum, independently of gossip-sim: schedules, the logs gossipd writes, and
the numerator-form recursion in float64 (numpy; run by Debian's /usr/bin/python3).

A schedule is, for each node i, consumed[i][t] (the messages (j, s) node i mixes at its iteration
t, sorted) for t = 0 .. E_i - 1, E_i = len(consumed[i]) <= T its number of iterations, and
drained[i] (those it mixes after its last iteration: the drain).

Node i ends its run when it is alone. Its senders are its in-neighbours over the topology's
period; the live ones are those that send to it within T (last_send(j, i, T) >= 0). Node i
finishes sender j on the line where it takes j's message (j, last_send(j, i, T)). It is alone at
iteration t when it has senders and finished every live one on a line < t (at once, t = 0, when
none is live); E_i = min(T, the first such t). A node without senders runs all T iterations.

Node j sends (j, s) with its mass to its out-neighbours at s for s < E_j. When it ends it sends
each out-neighbour o with last_send(j, o, T) >= E_j one empty message (j, last_send(j, o, T))
("j:se" in the logs): no mass, not mixed, but taking it finishes j. So (j, s) is empty exactly
when s >= E_j. The state z_j^s of (j, s), s < E_j, exists once j's iteration s - 1 is done; an
empty message once j has run all its E_j iterations.

The reference keeps the numerator x_i = w_i z_i and the weight w_i, and at node i's iteration
t < E_i

    w_i <- p_ii(t) w_i + sum p_ij(s) w_j^s,   x_i <- p_ii(t) x_i + sum_(j,s) p_ij(s) x_j^s - gamma w_i u_i
    (the step on the de-biased parameters z = x / w; the sums over the non-empty messages)

with u_i = z_i - b_i (node i's loss 1/2 |z - b_i|^2, its gradient at z_i = x_i / w_i); the drain
the same with p_ii = 1 and no step. p_ij(s) = 1 / (1 + |out-neighbours of j at s|).

Imported by push_sum_replay_test.py; as a script (push_sum_replay_test.cc):
    push_sum_reference.py quadratic DIR N T D GAMMA SEED
writes DIR/logs/node-<i>/push_sum_order.tsv (slow_node_schedule), DIR/z0.f64 and DIR/b.f64 (N x D, float32 values) and the reference's
DIR/z.f64 (N x D) and DIR/w.f64 (N).

The logs (format version 2), node-<i>/push_sum_order.tsv:
    # gossip-sgd push-sum order 2 node <i> nodes <n> start 0 total <T> staleness <tau>
    <t>\t<entries>      t = 0 .. E_i - 1: "j:s" (or "j:se", empty) sorted by (j, s), one space apart
    end\t<entries>      the drain
    weight\t<w_i final as a float32, %a>
"""
import os
import sys

import numpy as np

FORMAT_VERSION = 2


class Topology:
    """in_neighbours(i, t) and out_degree(j, t) of a (possibly time-varying) directed graph whose
    arcs repeat with `period`."""

    def __init__(self, n, arcs_at, period=1):
        self.n = n
        self.arcs_at = arcs_at  # t -> list of arcs (from, to)
        self.period = period

    def in_neighbours(self, i, t):
        return sorted({a for a, b in self.arcs_at(t) if b == i})

    def out_neighbours(self, j, t):
        return sorted({b for a, b in self.arcs_at(t) if a == j})

    def out_degree(self, j, t):
        return len(self.out_neighbours(j, t))

    def p(self, j, t):
        return 1.0 / (1.0 + self.out_degree(j, t))

    def senders(self, i):
        """Node i's in-neighbours over the period."""
        return sorted({j for t in range(self.period) for j in self.in_neighbours(i, t)})


def directed_ring(n):
    arcs = [(i, (i + 1) % n) for i in range(n)]
    return Topology(n, lambda t: arcs)


def star(n):
    arcs = [(0, i) for i in range(1, n)] + [(i, 0) for i in range(1, n)]
    return Topology(n, lambda t: arcs)


def one_peer_exponential(n):
    hops = max(1, (n - 1).bit_length())  # ceil(log2 n)
    return Topology(n, lambda t: [(i, (i + (1 << (t % hops))) % n) for i in range(n)], period=hops)


def last_send(topo, j, i, T):
    """The last iteration s < T at which j sends to i, or -1."""
    return next((s for s in range(T - 1, -1, -1) if j in topo.in_neighbours(i, s)), -1)


class Finishing:
    """Which of node i's live senders it has finished, and on which line: alone(t) says whether
    node i is alone at its iteration t."""

    def __init__(self, topo, i, T):
        self.senders = topo.senders(i)
        self.last = {j: last_send(topo, j, i, T) for j in self.senders}
        self.live = [j for j in self.senders if self.last[j] >= 0]
        self.finished = {}  # j -> the line that took (j, last_send(j, i, T))

    def take(self, t, msgs):
        for j, s in msgs:
            if j in self.last and s == self.last[j]:
                self.finished.setdefault(j, t)

    def alone(self, t):
        return bool(self.senders) and all(self.finished.get(j, t) < t for j in self.live)


def ends(topo, T, consumed):
    """E_i as the rule makes it from node i's lines: min(T, the first t at which i is alone)."""
    out = []
    for i in range(topo.n):
        f = Finishing(topo, i, T)
        t = 0
        while t < T and not f.alone(t):
            if t < len(consumed[i]):
                f.take(t, consumed[i][t])
            t += 1
        out.append(t)
    return out


def sent(topo, T, E):
    """The messages every node is sent, given each node's number of iterations E_j: sent[i] maps
    (j, s) to whether it is empty."""
    out = [dict() for _ in range(topo.n)]
    for j in range(topo.n):
        for s in range(E[j]):
            for o in topo.out_neighbours(j, s):
                if o != j:
                    out[o][(j, s)] = False
        for o in range(topo.n):
            last = last_send(topo, j, o, T) if o != j else -1
            if last >= E[j]:
                out[o][(j, last)] = True
    return out


def lockstep(topo, T):
    """Synchronous push-sum: node i mixes at t exactly the messages of iteration t sent to it, and
    the empty messages of the nodes that end at t. Where every node runs T iterations (the last
    sends to each node are at the end of the run: the one-peer exponential graph, the star), the
    drains are empty."""
    n = topo.n
    fin = [Finishing(topo, i, T) for i in range(n)]
    E = [None] * n
    consumed = [[] for _ in range(n)]
    inbox = [[] for _ in range(n)]
    for t in range(T):
        for i in range(n):
            if E[i] is None and fin[i].alone(t):
                E[i] = t
                for o in range(n):
                    last = last_send(topo, i, o, T) if o != i else -1
                    if last >= t:
                        inbox[o].append((i, last))
        for j in range(n):
            if E[j] is None:
                for o in topo.out_neighbours(j, t):
                    if o != j:
                        inbox[o].append((j, t))
        for i in range(n):
            if E[i] is None:
                consumed[i].append(sorted(inbox[i]))
                fin[i].take(t, inbox[i])
                inbox[i] = []
    return consumed, [sorted(m) for m in inbox]


def clocked(topo, T, tau, duration, delay, max_ticks=10**6):
    """A run on per-node clocks (integer ticks) with staleness tau. Before its iteration t node i
    ends if it is alone (or t == T); then it sends its empty messages (i, last_send(i, o, T)),
    which reach node o delay(i, last, o) ticks later, and drains: it mixes every message that
    arrives afterwards. Otherwise iteration t may start only once every message (j, t - tau) sent
    to it has arrived, unless j ended before sending it (t - tau >= E_j); at its start it sends
    (i, t), which reaches node o delay(i, t, o) >= 1 ticks later, mixes every message that has
    arrived and is not mixed yet, and takes duration(i, t) ticks."""
    n = topo.n
    consumed = [[] for _ in range(n)]
    fin = [Finishing(topo, i, T) for i in range(n)]
    E = [None] * n
    arrived = {}  # (j, s, i) -> tick
    pending = [[] for _ in range(n)]  # messages on their way to i: (tick, j, s)
    ready = [0] * n
    tick = 0
    while any(e is None for e in E):
        if tick > max_ticks:
            raise RuntimeError("clocked: the run does not end")
        for i in range(n):
            if E[i] is not None or ready[i] > tick:
                continue
            t = len(consumed[i])
            if t == T or fin[i].alone(t):
                E[i] = t
                for o in range(n):
                    last = last_send(topo, i, o, T) if o != i else -1
                    if last >= t:
                        pending[o].append((tick + delay(i, last, o), i, last))
                continue
            s = t - tau
            if s >= 0 and any(arrived.get((j, s, i), tick + 1) > tick
                              for j in topo.in_neighbours(i, s) if j != i and (E[j] is None or s < E[j])):
                continue  # too far ahead: waits for its in-neighbours' iteration t - tau
            for o in topo.out_neighbours(i, t):
                if o != i:
                    at = tick + delay(i, t, o)
                    arrived[(i, t, o)] = at
                    pending[o].append((at, i, t))
            msgs = sorted((j, s) for at, j, s in pending[i] if at <= tick)
            consumed[i].append(msgs)
            fin[i].take(t, msgs)
            pending[i] = [m for m in pending[i] if m[0] > tick]
            ready[i] = tick + duration(i, t)
        tick += 1
    return consumed, [sorted((j, s) for _, j, s in pending[i]) for i in range(n)]


def causal_order(consumed, drained):
    """The steps (i, t), t = 0 .. E_i (t == E_i = len(consumed[i]): the drain), in an order where
    every message read exists: z_j^s of an ordinary (j, s) once j's iteration s - 1 is done, an
    empty one once j has run all its E_j iterations."""
    n = len(consumed)
    E = [len(c) for c in consumed]
    nxt = [0] * n
    order = []
    while len(order) < sum(E) + n:
        moved = False
        for i in range(n):
            while nxt[i] <= E[i]:
                msgs = consumed[i][nxt[i]] if nxt[i] < E[i] else drained[i]
                if any(nxt[j] < min(s, E[j]) for j, s in msgs):
                    break
                order.append((i, nxt[i]))
                nxt[i] += 1
                moved = True
        if not moved:
            raise ValueError("causally impossible schedule")
    return order


def empties(consumed, drained):
    """The empty messages (j, s) taken, s >= E_j, and every node's E_j."""
    E = [len(c) for c in consumed]
    return {(j, s) for i in range(len(consumed)) for line in consumed[i] + [drained[i]]
            for j, s in line if s >= E[j]}, E


def check_schedule(topo, T, consumed, drained):
    """Raises ValueError unless the schedule follows the rule: every node's E_i <= T is the one its
    lines imply (it ends as soon as it is alone), it takes every message sent to it exactly once
    and nothing else, and a causal order exists."""
    n = topo.n
    E = [len(c) for c in consumed]
    if any(e > T for e in E):
        raise ValueError(f"more than T = {T} iterations: {E}")
    rule = ends(topo, T, consumed)
    if rule != E:
        raise ValueError(f"the nodes end at {E}, the rule says {rule}")
    expected = sent(topo, T, E)
    for i in range(n):
        taken = [m for line in consumed[i] + [drained[i]] for m in line]
        if len(taken) != len(set(taken)) or set(taken) != set(expected[i]):
            raise ValueError(f"node {i} takes {sorted(taken)}, is sent {sorted(expected[i])}")
    causal_order(consumed, drained)


def float32_weights(topo, T, consumed, drained):
    """w_i^final as gossipd keeps it: each new weight summed in float64 over the row (own entry at
    its place by node id) and rounded to float32 (topology::push_sum_mix), for the weight lines.
    Any causal schedule (the rule is not checked: check_schedule)."""
    n = topo.n
    empty, E = empties(consumed, drained)
    w = {(i, 0): np.float32(1) for i in range(n)}
    final = [None] * n
    for i, t in causal_order(consumed, drained):
        drain = t == E[i]
        msgs = [m for m in (drained[i] if drain else consumed[i][t]) if m not in empty]
        if drain and not msgs:
            final[i] = w[(i, t)]
            continue
        own = (i, 1.0 if drain else topo.p(i, t), w[(i, t)])
        row = [(j, topo.p(j, s), w[(j, s)]) for j, s in msgs]
        k = next((k for k, (j, _, _) in enumerate(row) if j > i), len(row))
        row.insert(k, own)
        total = 0.0
        for _, p, wj in row:
            total += p * float(wj)
        if drain:
            final[i] = np.float32(total)
        else:
            w[(i, t + 1)] = np.float32(total)
    return final


def numerator_reference(topo, T, consumed, drained, z0, b, gamma):
    """The float64 numerator-form recursion (module docstring): the final z_i = x_i / w_i and w_i,
    after the drain."""
    n = topo.n
    empty, E = empties(consumed, drained)
    x = {(i, 0): np.array(z0[i], dtype=np.float64) for i in range(n)}
    w = {(i, 0): 1.0 for i in range(n)}
    for i, t in causal_order(consumed, drained):
        drain = t == E[i]
        msgs = [m for m in (drained[i] if drain else consumed[i][t]) if m not in empty]
        p_own = 1.0 if drain else topo.p(i, t)
        xi = p_own * x[(i, t)]
        wi = p_own * w[(i, t)]
        for j, s in msgs:
            xi = xi + topo.p(j, s) * x[(j, s)]
            wi += topo.p(j, s) * w[(j, s)]
        if not drain:  # the step on the de-biased parameters: the numerator moves by gamma w' u
            xi = xi - gamma * wi * (x[(i, t)] / w[(i, t)] - b[i])
        x[(i, t + 1)], w[(i, t + 1)] = xi, wi
    z = np.array([x[(i, E[i] + 1)] / w[(i, E[i] + 1)] for i in range(n)])
    return z, np.array([w[(i, E[i] + 1)] for i in range(n)])


def header_line(i, n, T, staleness, version=FORMAT_VERSION):
    return (f"# gossip-sgd push-sum order {version} node {i} nodes {n} start 0 total {T} "
            f"staleness {staleness}")


def log_lines(i, n, T, consumed, drained, weights, staleness=3):
    """Node i's push_sum_order.tsv as a list of lines (module docstring): the header on line 1,
    iteration t on line t + 2, end on line E_i + 2, weight on line E_i + 3."""
    E = [len(c) for c in consumed]
    entries = lambda msgs: " ".join(f"{j}:{s}" + ("e" if s >= E[j] else "") for j, s in msgs)
    lines = [header_line(i, n, T, staleness)]
    lines += [f"{t}\t{entries(line)}" for t, line in enumerate(consumed[i])]
    lines.append(f"end\t{entries(drained[i])}")
    lines.append(f"weight\t{float(weights[i]).hex()}")
    return lines


def write_logs(directory, n, T, consumed, drained, weights, staleness=3, header=None, topo=None):
    """gossipd's push_sum_order.tsv of every node; `header(i)` replaces node i's header line. With
    `topo`, the schedule is checked against the rule first (check_schedule)."""
    if topo is not None:
        check_schedule(topo, T, consumed, drained)
    for i in range(n):
        d = os.path.join(directory, f"node-{i}")
        os.makedirs(d, exist_ok=True)
        lines = log_lines(i, n, T, consumed, drained, weights, staleness)
        if header:
            lines[0] = header(i)
        with open(os.path.join(d, "push_sum_order.tsv"), "w") as f:
            f.write("\n".join(lines) + "\n")


def slow_node_schedule(n, T, seed, tau=3):
    """The directed ring of n, node 0 at a quarter of the others' speed for the whole run, delays
    of 1 to 3 ticks, staleness tau: nodes mix 0, 1 or several messages per iteration, messages
    older and newer than the iteration, and some in the drain. Node n - 1 runs ahead of node 0, so
    node 0 takes n - 1's last message and is alone before T: it ends early, and its empty message
    may end its out-neighbours early in turn (asserted: some E_i < T)."""
    topo = directed_ring(n)
    rng = np.random.default_rng(seed)
    delays = rng.integers(1, 4, size=(n, T, n))
    consumed, drained = clocked(topo, T, tau, lambda i, t: 4 if i == 0 else 1,
                                lambda j, s, i: int(delays[j, s, i]))
    assert any(len(c) < T for c in consumed), "slow_node_schedule: no node ends early"
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
