"""The checks of a finished run: survivors' exits, W(t) rebuilt from every node's weights lines
(symmetric, doubly stochastic, Metropolis-Hastings once settled, dead nodes dropped), the
detection / re-weight / rejoin figures, the consensus distance, and the final accuracy against
the undisturbed reference run (cached per config and gossipd binary)."""

import hashlib
import json
import os

import numpy as np

from .cluster import Cluster
from .common import MH_SETTLE, N, TOL, Failed, log
from .metrics import line_ms, parse_row
from .workload import neighbours, sha256_file


# ---------------------------------------------------------------- checks

def consensus_distance(xs):
    """sqrt(mean_i ||x_i - mean||^2) / ||mean||."""
    x = np.stack(xs)
    mean = x.mean(axis=0)
    return float(np.sqrt(((x - mean) ** 2).sum(axis=1).mean()) / max(np.linalg.norm(mean), 1e-30))


def check_exits(c, survivors):
    bad = []
    for i in survivors:
        code = c.exit_codes[i][-1]
        if code != 0:
            bad.append(f"node {i} exited {code}")
            continue
        if c.current(i).iteration != c.iterations:
            bad.append(f"node {i} exited 0 but its last iteration line says {c.current(i).iteration} "
                       f"of {c.iterations}")
    if bad:
        raise Failed("survivors did not all finish: " + "; ".join(bad) + "\n" +
                     "\n".join(c.log_tail(i) for i in survivors if c.exit_codes[i][-1] != 0))


def check_mixing(c, rejoined=(), cut_edges=None, asymmetric=None, joined=None, left=None):
    """W(t) from every node incarnation's weights lines: symmetric and doubly stochastic on the
    nodes in the mixing at every iteration where anything changes, and Metropolis-Hastings of the
    current graph where it stays in force MH_SETTLE iterations or more. A killed incarnation k
    that was in iteration L_k when it died (its last "iter" line says L_k completed) could have
    sent x_k^t only for t <= L_k, so no row may list it after L_k. It stays in the mixing (its last
    row must match the others) for t < U_k, where U_k is the last iteration at which another row
    lists it: x_k^(t+1), computed with k's row at t, was used at t + 1. At U_k itself nobody uses
    x_k^(U_k + 1), so k's row there is excluded (k may have died before logging it, or used an edge
    whose far end never got k's verdict), and the entries W[j][k] are not compared with it. At the
    end no live row lists a dead node (unless it rejoined). Returns the number of distinct W checked.

    cut_edges (partition scenarios only): edges a link cut may hit between the two verdicts of an
    iteration, where one end has mixed the edge and the other, whose verdict never came, has not
    (no protocol can make both ends agree in bounded time over a link that may fail at any moment;
    README "Failure model"). Such an edge may be one-sided at ONE iteration: W[i][j] > 0 while row
    j lists no i at all. Each tolerated case is recorded in `asymmetric` ({edge: iteration}); a
    second one on the same edge, or any other asymmetry, fails.

    joined ({node: t_a}): a standby node (fault.standby_nodes) that joined at t_a; it is in the
    mixing from t_a on (rows it logged before t_a must list it alone). left ({node: t_l}): a node
    stopped by SIGTERM that announced its leave from t_l (its `stopped` event; exit 4): like a
    killed node, except that no row may list it from t_l on and every row that lists it up to
    t_l - 1 must match its own (it sent its verdicts, so both ends agree on the last iteration).

    Under rounds (c.local_steps H > 1) one W holds for a whole round [rH, rH + H) and is used at
    the round's one exchange, so what holds at U_k holds for the round that contains U_k: a node
    killed while sending its round message is in some neighbours' W of that round and not in
    others' (the per-step case of a node killed between its verdicts). A W must be
    Metropolis-Hastings once it stays in force for MH_SETTLE exchanges (MH_SETTLE x H iterations)."""
    joined, left = joined or {}, left or {}
    h = c.local_steps

    def round_of(t):
        return t - t % h
    incs = []  # [node, incarnation, killed, [(iteration, row)], L (killed: iteration in progress)]
    for i, files in c.metrics.items():
        for k, f in enumerate(files):
            rows = [(int(o["iteration"]), parse_row(o["row"])) for o in f.of_type("weights")]
            if not rows:
                raise Failed(f"node {i} (incarnation {k}) logged no weights lines: gossipd does not log W(t) "
                             "(issue 8 carry-on is not built into this gossipd?)")
            rows.sort(key=lambda r: r[0])
            code = c.exit_codes[i][k]
            gone = i in left and k == len(files) - 1
            killed = gone or (code is not None and code < 0)
            end = left[i] - 1 if gone else max(f.iteration, 0) if killed else c.iterations
            incs.append((i, k, killed, rows, end))
    for i, k, _, rows, _ in incs:
        if k == 0 and rows[0][0] != 0 and i not in joined:
            raise Failed(f"node {i}: first weights line at iteration {rows[0][0]}, expected 0")

    def start(inc):
        """First iteration of this incarnation in the mixing: a restarted node may log rows (alone)
        from its checkpoint's iteration, before the iteration its previous incarnation died in."""
        if inc[1] == 0 and inc[0] in joined:
            return joined[inc[0]]
        prev = [o for o in incs if o[0] == inc[0] and o[1] == inc[1] - 1]
        return max(inc[3][0][0], prev[0][4] + 1) if prev and prev[0][2] else inc[3][0][0]

    def span(inc):
        """Iterations [first, last] in which this incarnation applied its rows."""
        later = [start(o) for o in incs if o[0] == inc[0] and o[1] > inc[1]]
        last = min([c.iterations - 1] + [t - 1 for t in later])
        if inc[2]:
            last = min(last, inc[4])  # it was in iteration L when killed
        return start(inc), last

    for inc in incs:  # rows of a restarted (or joining) node from before it entered the timeline: alone
        for t, row in inc[3]:
            if t < start(inc) and set(row) != {inc[0]}:
                raise Failed(f"restarted or joining node {inc[0]} mixes with {sorted(set(row) - {inc[0]})} at "
                             f"iteration {t}, before the iteration its previous incarnation died in (or it joined)")

    # U_k: the last iteration at which any other incarnation's row lists killed incarnation k
    # (within k's own span: after a restart the rows list the new incarnation).
    last_use = {}
    for inc in incs:
        if not inc[2]:
            continue
        k = inc[0]
        k_first, k_last = span(inc)
        k_end = min([c.iterations - 1] + [start(o) - 1 for o in incs if o[0] == k and o[1] > inc[1]])
        u = -1
        for other in incs:
            if other[0] == k:
                continue
            first, last = span(other)
            rows = other[3]
            for n, (t, row) in enumerate(rows):
                hi = min(rows[n + 1][0] - 1 if n + 1 < len(rows) else last, last, k_end)
                lo = max(t, first, k_first)
                if k in row and lo <= hi:
                    if hi > inc[4]:
                        raise Failed(f"node {other[0]} mixes with node {k} at iteration {hi}, but node {k} was "
                                     f"killed in iteration {inc[4]} and never sent its parameters for {hi}")
                    u = max(u, hi)
        last_use[(k, inc[1])] = u
        if k in left and inc[1] == len(c.metrics[k]) - 1:
            if u != left[k] - 1:
                raise Failed(f"node {k} announced its leave from iteration {left[k]}, but the last iteration "
                             f"another row lists it is {u}, not {left[k] - 1}")
            last_use[(k, inc[1])] = left[k]  # its row at t_l - 1 is checked like any other

    breakpoints = {t for inc in incs for t, _ in inc[3]} | {start(inc) for inc in incs}
    for inc in incs:
        if inc[2]:
            u = last_use[(inc[0], inc[1])]
            breakpoints |= {max(round_of(u), 0), max(u, 0), u + 1, inc[4] + 1}
    breakpoints = sorted(t for t in breakpoints if 0 <= t < c.iterations)

    def row_at(inc, t):
        cur = None
        for it, row in inc[3]:
            if it <= t:
                cur = row
            else:
                break
        return cur

    checked = 0
    for n, t in enumerate(breakpoints):
        settled = (breakpoints[n + 1] if n + 1 < len(breakpoints) else c.iterations) - t >= MH_SETTLE * h
        # The current incarnation of each node at t: the newest one whose first row is at or before t.
        current = {}
        for inc in incs:
            if start(inc) <= t:
                if inc[0] not in current or inc[1] > current[inc[0]][1]:
                    current[inc[0]] = inc
        rows = {i: row_at(inc, t) for i, inc in current.items()}
        members = {i for i, inc in current.items()
                   if not inc[2] or t < round_of(last_use[(inc[0], inc[1])])}
        dying = {i for i, inc in current.items()
                 if inc[2] and round_of(last_use[(inc[0], inc[1])]) <= t <= last_use[(inc[0], inc[1])]}
        for i in sorted(members):
            row = rows[i]
            if i not in row:
                raise Failed(f"iteration {t}: row {i} of W has no diagonal entry: {row}")
            if any(w < 0 for w in row.values()):
                raise Failed(f"iteration {t}: row {i} of W has a negative entry: {row}")
            total = sum(row.values())
            if abs(total - 1) > TOL:
                raise Failed(f"iteration {t}: row {i} of W sums to {total!r}, not 1 (1e-12)")
            for j, w in row.items():
                if j == i or j in dying:
                    continue
                if j not in members:
                    raise Failed(f"iteration {t}: node {i} mixes with node {j}, which is not in the mixing "
                                 f"(dead and dropped by its other neighbours, or never logged a row)")
                wj = rows[j].get(i)
                edge = frozenset((i, j))
                if wj is None and cut_edges and edge in cut_edges and asymmetric.get(edge, t) == t:
                    asymmetric[edge] = t  # one end mixed at the cut, the other had no verdict
                    continue
                if wj is None or abs(wj - w) > TOL:
                    raise Failed(f"iteration {t}: W is not symmetric: W[{i}][{j}] = {w!r} but W[{j}][{i}] = {wj!r}")
                # Metropolis-Hastings from the degrees in the current mixing graph, once settled: a W
                # in force for fewer than MH_SETTLE exchanges may be a transition (a dropped edge's
                # weight moved to the diagonals for the exchange before the new degrees apply).
                mh = 1.0 / (1 + max(len(row) - 1, len(rows[j]) - 1))
                if settled and abs(w - mh) > TOL:
                    raise Failed(f"iteration {t}: W[{i}][{j}] = {w!r} is not the Metropolis-Hastings weight "
                                 f"1/(1 + max({len(row) - 1}, {len(rows[j]) - 1})) = {mh!r} of the current graph "
                                 f"(and this W stays in force for {MH_SETTLE * h} or more iterations)")
        checked += 1
    # After the drop, no surviving row lists a dead node (unless it came back).
    last = c.iterations - 1
    dead = ({k["node"] for k in c.kills} | set(left)) - set(rejoined)
    for i, files in c.metrics.items():
        if i in dead:
            continue
        row = parse_row(files[-1].of_type("weights")[-1]["row"])
        for k in dead:
            if k in row:
                raise Failed(f"node {i}'s last row of W still lists dead node {k}: {row}")
    return checked


def figures(c):
    """Detection, re-weight and rejoin times in ms (None where not applicable)."""
    det, rew, rej = [], [], []
    for k in c.kills:
        dead, t0 = k["node"], k["unix_ms"]
        firsts, reweights = [], []
        for j in neighbours(dead):
            if j in {x["node"] for x in c.kills if x["unix_ms"] <= t0} - {dead}:
                continue  # a neighbour that was already dead
            f = c.metrics[j][0]
            ev = [line_ms(o) for o in f.events("edge_dropped") if o.get("peer") == dead and (line_ms(o) or 0) >= t0]
            if ev:
                firsts.append(min(ev))
            w = [line_ms(o) for o in f.of_type("weights")
                 if (line_ms(o) or 0) >= t0 and dead not in parse_row(o["row"])]
            if w:
                reweights.append(min(w))
        if firsts:
            det.append(min(firsts) - t0)
        if reweights:
            rew.append(max(reweights) - t0)
    for r in c.restarts:
        f = c.metrics[r["node"]][-1]
        ev = [line_ms(o) for o in f.events("rejoined")]
        if ev:
            rej.append(min(ev) - r["unix_ms"])

    def mean(v):
        return round(sum(v) / len(v), 1) if v else None
    return {"detect_ms": mean(det), "reweight_ms": mean(rew), "rejoin_ms": mean(rej),
            "detect_all": det, "reweight_all": rew, "rejoin_all": rej}


def require_figures(c, fig):
    if c.kills and fig["detect_ms"] is None:
        raise Failed("no neighbour of a killed node logged an edge_dropped event with its id")
    if c.kills and len(fig["reweight_all"]) != len(c.kills):
        raise Failed("some killed node's neighbours never logged a weights line without it")


# ---------------------------------------------------------------- the undisturbed reference

def reference_accuracy(args, workdir, config, insecure):
    """Final test accuracy per node of an undisturbed run of this config (cached per config and
    gossipd binary in --cache-dir)."""
    key = hashlib.sha256((config + sha256_file(os.path.join(args.build, "daemon", "gossipd"))).encode()).hexdigest()[:20]
    path = os.path.join(args.cache_dir, f"reference-{key}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    log("undisturbed reference run (cached for later runs of this config)")
    c = Cluster(args, workdir, "reference", config, insecure=insecure, hard_timeout=args.timeout)
    try:
        c.start_all()
        c.wait_all()
        check_exits(c, range(N))
        acc = {str(i): c.final_accuracy(i) for i in range(N)}
    finally:
        c.kill_everything()
    tmp = path + f".tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(acc, f)
    os.replace(tmp, path)
    return acc


def check_accuracy(c, survivors, ref):
    ours = np.mean([c.final_accuracy(i) for i in survivors])
    theirs = np.mean([ref[str(i)] for i in survivors])
    log(f"final test accuracy of the survivors {ours:.4f}, same nodes undisturbed {theirs:.4f}")
    if abs(ours - theirs) > 0.01:
        raise Failed(f"survivors' mean final test accuracy {ours:.4f} is not within 1 percentage point of "
                     f"the undisturbed run's {theirs:.4f}")
    return float(ours), float(theirs)
