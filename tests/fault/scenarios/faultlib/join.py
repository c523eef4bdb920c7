"""The netns-join scenario (issue 35): 9 network-namespace hosts on a 3 x 3 torus with links shaped
to 100 Mbit/s; node 8 is a standby node (fault.standby_nodes). Nodes 0-7 start without it, node 8
joins mid-run, then node 4 is stopped with SIGTERM (an announced leave). Measured: node 8's start ->
`joined` and -> its first iteration after the join, against 2 x deadline + model bytes / link rate;
the other nodes' largest gap between iterations around the join; the neighbours' `left` drops after
the SIGTERM; W(t) over the nodes present at every iteration."""

import os
import signal

import numpy as np

from .checks import check_exits, check_mixing
from .cluster import Cluster
from .common import Failed, log, now_ms
from .metrics import line_ms, parse_row
from .netns import netns_setup, tear_down
from .scenarios import require_carry_on
from .workload import config_text, fmnist_subset, torus_edges

NODES, SIDE = 9, 3          # 3 x 3 torus: every node has 4 neighbours
JOINER, LEAVER = 8, 4       # without both, the rest (0-3, 5-7) stays connected
RATE, RATE_BPS = "100mbit", 100e6
DEADLINE_MS = 3000
CONNECT_MS = 30000          # config_text's timeouts.connect_ms
JOIN_AFTER = 100            # node 8 starts once every other node is past this iteration
LEAVE_AFTER = 150           # node 4 is stopped this many iterations after the join
ITERATIONS = 1500           # ~10 ms each on an idle 2-core machine, ~100 ms at load 14
HARD_TIMEOUT_S = 400        # at least; --timeout raises it
STALL_SLACK_MS = 500        # "no stall beyond one deadline": a deadline's wait plus scheduling at load
MIN_ACCURACY = 0.75         # softmax on Fashion-MNIST reaches ~0.83 here (docs/fault.md, kill1)


def nbrs(edges, i):
    return sorted({b for a, b in edges if a == i} | {a for a, b in edges if b == i})


def first_iteration_ms(c, i, t0_ms):
    """ms from t0 to node i's first `iter` line."""
    its = c.current(i).of_type("iter")
    return line_ms(its[0]) - t0_ms if its else None


def max_gap_ms(c, i, lo_ms, hi_ms):
    """Largest gap between consecutive `iter` lines of node i that overlaps [lo_ms, hi_ms]."""
    ts = sorted(line_ms(o) for o in c.current(i).of_type("iter"))
    gaps = [b - a for a, b in zip(ts, ts[1:]) if b >= lo_ms and a <= hi_ms]
    return max(gaps) if gaps else None


def join_figures(c, edges, t_start):
    """The join: t_a, ms to `joined` and to the first iteration at or after t_a, and the checks
    that every neighbour of the joiner admitted it at t_a."""
    ev = c.current(JOINER).events("joined")
    if not ev:
        raise Failed(f"node {JOINER} logged no `joined` event\n{c.log_tail(JOINER)}")
    t_a = int(ev[0]["iteration"])
    joined_ms = line_ms(ev[0]) - t_start
    after = [o for o in c.current(JOINER).of_type("iter") if int(o["iteration"]) >= t_a]
    if not after:
        raise Failed(f"node {JOINER} joined at iteration {t_a} but completed no iteration after it")
    trained_ms = line_ms(after[0]) - t_start
    split = {}
    for j in nbrs(edges, JOINER):
        adm = [int(o["iteration"]) for o in c.current(j).events("edge_admitted") if o.get("peer") == JOINER]
        # An agreement the joiner withdrew after the neighbour had started it: admitted and dropped
        # at that same iteration as "withdrew its admission", before the admission at t_a.
        withdrawn = {int(o["iteration"]) for o in c.current(j).events("edge_dropped")
                     if o.get("peer") == JOINER and "withdrew its admission" in o.get("detail", "")}
        if not adm or adm[-1] != t_a or any(t not in withdrawn for t in adm[:-1]):
            split[j] = adm  # every admission of the joiner at j (the last at t_a, the others withdrawn)
    log(f"node {JOINER} joined at iteration {t_a}: `joined` {joined_ms} ms after its start, first iteration "
        f"after the join {trained_ms} ms after its start; detail: {ev[0].get('detail')}")
    return t_a, joined_ms, trained_ms, split


def leave_figures(c, edges, t_term):
    """The leave: t_l from the leaver's `stopped` event; ms from the SIGTERM to each neighbour's
    `edge_dropped` with the reason "left"."""
    stopped = c.current(LEAVER).events("stopped")
    if not stopped:
        raise Failed(f"node {LEAVER} exited without a `stopped` event")
    t_l = int(stopped[0]["iteration"])
    detect = {}
    for j in nbrs(edges, LEAVER):
        drops = [o for o in c.current(j).events("edge_dropped") if o.get("peer") == LEAVER]
        if not drops:
            raise Failed(f"node {j} never dropped its edge to node {LEAVER}, which left")
        if "left" not in drops[0].get("detail", "") or int(drops[0]["iteration"]) != t_l:
            raise Failed(f"node {j} dropped node {LEAVER} at iteration {drops[0]['iteration']} "
                         f"({drops[0].get('detail')}), not as 'left' at its announced iteration {t_l}")
        detect[j] = line_ms(drops[0]) - t_term
    return t_l, detect


def scenario_netns_join(args, workdir, rng):
    require_carry_on(args)
    iterations = getattr(args, "iterations", None) or ITERATIONS
    data = fmnist_subset(args.cache_dir, 12000, 10000)
    fault = f"fault {{ policy: CARRY_ON admit_margin: 2 standby_nodes: {JOINER} }}"
    config = config_text("fmnist", data, iterations, args.train_seed, fault, DEADLINE_MS, 200) + \
        getattr(args, "config_extra", "") + "\n"
    edges = torus_edges(SIDE, SIDE)
    present = [i for i in range(NODES) if i != JOINER]
    h = netns_setup(args, NODES)
    c = None
    try:
        h.run("rate", RATE)
        c = Cluster(args, workdir, "run", config, insecure=True, netns=h,
                    hard_timeout=max(args.timeout, HARD_TIMEOUT_S),
                    n=NODES, edges=edges, proxied=False)
        t0 = now_ms()
        for i in present:
            c.start(i)
        c.wait_until(lambda: all(c.current(i).iteration >= 1 for i in present), "nodes 0-7 at iteration 1")
        first = {i: first_iteration_ms(c, i, t0) for i in present}
        c.wait_until(lambda: min(c.current(i).iteration for i in present) >= JOIN_AFTER,
                     f"nodes 0-7 at iteration {JOIN_AFTER}")
        t_start = now_ms()
        c.start(JOINER)
        log(f"started node {JOINER} with nodes 0-7 at iterations {[c.current(i).iteration for i in present]}")
        c.wait_until(lambda: c.current(JOINER).events("joined"), f"node {JOINER} logging joined")
        t_a = int(c.current(JOINER).events("joined")[0]["iteration"])
        c.wait_until(lambda: min(c.current(i).iteration for i in range(NODES)) >= t_a + LEAVE_AFTER,
                     f"every node at iteration {t_a + LEAVE_AFTER}")
        it_term = c.current(LEAVER).iteration
        t_term = now_ms()
        os.kill(c.procs[LEAVER].pid, signal.SIGTERM)
        log(f"SIGTERM node {LEAVER} at its iteration {it_term}")
        c.wait_all()
    finally:
        tear_down(c, h)
    if t_a + LEAVE_AFTER >= iterations - 50:
        raise Failed(f"node {JOINER} joined at iteration {t_a} of {iterations}: too late to see the leave "
                     "(run more --iterations)")
    if c.exit_codes[LEAVER][-1] != 4:
        raise Failed(f"node {LEAVER} exited {c.exit_codes[LEAVER][-1]} after SIGTERM, not 4\n{c.log_tail(LEAVER)}")
    survivors = [i for i in range(NODES) if i != LEAVER]
    check_exits(c, survivors)
    start_ms = max(first.values())
    if start_ms > CONNECT_MS / 3:
        raise Failed(f"nodes 0-7 took {start_ms} ms to their first iteration: did they wait for standby node "
                     f"{JOINER} (connect_ms {CONNECT_MS})?")
    t_a, joined_ms, trained_ms, split = join_figures(c, edges, t_start)
    model_bytes = c.final_params(JOINER).size * 4
    bound_ms = 2 * DEADLINE_MS + model_bytes * 8 / RATE_BPS * 1000
    t_joined = t_start + trained_ms
    stall = {i: max_gap_ms(c, i, t_start, t_joined + 500) for i in present}
    t_before = t_start - (t_joined + 500 - t_start)  # a window of the same length before the join
    calm = {i: max_gap_ms(c, i, t_before, t_start) for i in present}
    max_stall = max(v for v in stall.values() if v is not None)
    result_calm = max([v for v in calm.values() if v is not None], default=None)
    t_l, detect = leave_figures(c, edges, t_term)
    checked = check_mixing(c, joined={JOINER: t_a}, left={LEAVER: t_l})
    acc = float(np.mean([c.final_accuracy(i) for i in survivors]))
    log(f"nodes 0-7 at their first iteration {min(first.values())}-{start_ms} ms after their start; "
        f"largest gap between iterations around the join {stall}, in as long a window before it {calm}; "
        f"`left` drops {detect} ms after the SIGTERM (t_l {t_l}); survivors' accuracy {acc:.4f}")
    bad = []
    if split:
        bad.append(f"node {JOINER} joined at t_a = {t_a}, but its neighbours admitted it at iterations {split} "
                   f"(every neighbour must admit it at t_a, and an earlier admission only where the joiner withdrew it)")
    last = parse_row(c.current(JOINER).of_type("weights")[-1]["row"])
    missing = [j for j in nbrs(edges, JOINER) if j != LEAVER and j not in last]
    if missing:
        bad.append(f"node {JOINER}'s last row of W {sorted(last)} lacks its neighbours {missing}: "
                   f"the join left edges out for the rest of the run")
    if trained_ms > bound_ms:
        bad.append(f"node {JOINER} trained {trained_ms} ms after its start, beyond 2 x deadline + model bytes / "
                   f"link rate = {bound_ms:.0f} ms")
    if max_stall > DEADLINE_MS + STALL_SLACK_MS:
        bad.append(f"a node stalled {max_stall} ms around the join, beyond one deadline ({DEADLINE_MS} ms + "
                   f"{STALL_SLACK_MS} ms): {stall}")
    if max(detect.values()) > DEADLINE_MS / 2:
        bad.append(f"the `left` drops came {detect} ms after the SIGTERM, not far below a deadline ({DEADLINE_MS} ms)")
    if acc < MIN_ACCURACY:
        bad.append(f"survivors' mean final accuracy {acc:.4f} < {MIN_ACCURACY}")
    result = {"w_checks": checked, "detect_ms": None, "reweight_ms": None, "rejoin_ms": None,
              "join_ms": trained_ms, "joined_event_ms": joined_ms, "join_bound_ms": round(bound_ms),
              "max_stall_ms": max_stall, "calm_stall_ms": result_calm,
              "leave_detect_ms": max(detect.values()), "start_ms": start_ms, "t_a": t_a, "t_l": t_l,
              "accuracy": round(acc, 4), "model_bytes": model_bytes,
              "detail": f"nodes 0-7 at iteration 1 within {start_ms} ms (connect_ms {CONNECT_MS}); node {JOINER} "
                        f"joined at iteration {t_a}: `joined` {joined_ms} ms, trained {trained_ms} ms after its "
                        f"start (bound 2 x {DEADLINE_MS} + {model_bytes} B / {RATE} = {bound_ms:.0f} ms); largest "
                        f"gap of the others around the join {max_stall} ms (before it {result_calm} ms); "
                        f"node {LEAVER} left at {t_l}, dropped as 'left' {min(detect.values())}-"
                        f"{max(detect.values())} ms after the SIGTERM; accuracy {acc:.4f}"}
    if bad:
        raise Failed("; ".join(bad) + f"\n  figures: {result['detail']}")
    return c, result
