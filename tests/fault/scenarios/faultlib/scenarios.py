"""The loopback scenarios (every node on 127.0.0.1): undisturbed, failstop, kill1 and kill2 (SGD
with one or two nodes SIGKILLed), gossip (consensus after deaths in the pure-gossip phase) and
rejoin (a node restarted with --resume); and the config helpers the netns scenarios share."""

import numpy as np

from .checks import (check_accuracy, check_exits, check_mixing, consensus_distance, figures,
                     reference_accuracy, require_figures)
from .cluster import Cluster
from .common import N, Failed, local_steps, log
from .metrics import line_ms, parse_row
from .workload import config_text, fmnist_subset, neighbours


# ---------------------------------------------------------------- scenarios

def policy_block(args, policy):
    if not args.fault_supported:
        return ""
    return f"fault {{ policy: {policy} admit_margin: 2 }}"


def require_carry_on(args):
    if not args.fault_supported:
        raise Failed("this gossipd has no `fault { policy: CARRY_ON }` config block: carrying on without a "
                     "neighbour (issue 8) is not built, so this scenario cannot pass")


def sgd_config(args, iterations=600, deadline_ms=2000):
    data = fmnist_subset(args.cache_dir, 12000, 10000)
    return config_text("fmnist", data, iterations, args.train_seed, policy_block(args, "CARRY_ON"),
                       deadline_ms, 200) + getattr(args, "config_extra", "") + "\n"


def per_exchange(args, iterations):
    """ITERATIONS times the local steps H of --config-extra (1 without): under rounds an iteration
    exchanges nothing H − 1 times in H, so a scenario keeps its number of exchanges, and its
    wall-clock, by running H times the iterations (a restarted node must find the others still
    running however fast the machine)."""
    return iterations * local_steps(getattr(args, "config_extra", ""))


def kill_plan(rng, iterations, count):
    nodes = rng.sample(range(N), count)
    lo = [0.2, 0.5]
    its = [int(iterations * (lo[k] + 0.2 * rng.random())) for k in range(count)]
    return list(zip(nodes, its))


def scenario_undisturbed(args, workdir, rng):
    config = sgd_config(args)
    c = Cluster(args, workdir, "run", config, hard_timeout=args.timeout)
    try:
        c.start_all()
        c.wait_all()
    finally:
        c.kill_everything()
    check_exits(c, range(N))
    result = {"detail": f"accuracy {np.mean([c.final_accuracy(i) for i in range(N)]):.4f}"}
    if args.fault_supported:
        result["w_checks"] = check_mixing(c)
    return c, result


def scenario_failstop(args, workdir, rng):
    """SIGKILL one node under FAIL_STOP: every other node exits 3 (with a neighbour_failed event)
    within deadline + 5 s; nothing hangs. Proves the harness against the fail-stop semantics."""
    deadline_ms = 2000
    data = fmnist_subset(args.cache_dir, 12000, 10000)
    config = config_text("fmnist", data, 600, args.train_seed, policy_block(args, "FAIL_STOP"), deadline_ms, 200)
    c = Cluster(args, workdir, "run", config, hard_timeout=args.timeout)
    (victim, at), = kill_plan(rng, 600, 1)
    try:
        c.start_all()
        c.wait_until(lambda: c.current(victim).iteration >= at, f"node {victim} reaching iteration {at}")
        c.kill(victim)
        c.wait_all()
    finally:
        c.kill_everything()
    t0 = c.kills[0]["unix_ms"]
    others = [i for i in range(N) if i != victim]
    bad = [f"node {i} exited {c.exit_codes[i][0]}" for i in others if c.exit_codes[i][0] != 3]
    if bad:
        raise Failed("under FAIL_STOP every other node must exit 3: " + "; ".join(bad))
    late = []
    for i in others:
        ev = c.current(i).events("neighbour_failed")
        if not ev:
            raise Failed(f"node {i} exited 3 without a neighbour_failed event")
        dt = line_ms(ev[-1]) - t0
        if dt > deadline_ms + 5000:
            late.append(f"node {i} after {dt} ms")
    if late:
        raise Failed(f"fail-stop slower than deadline + 5 s: {late}")
    worst = max(line_ms(c.current(i).events("neighbour_failed")[-1]) - t0 for i in others)
    first = min(line_ms(c.current(i).events("neighbour_failed")[-1]) - t0 for i in neighbours(victim))
    return c, {"detect_ms": first, "detail": f"killed {victim}; all 7 others exited 3 within {worst} ms"}


def scenario_kill(args, workdir, rng, count):
    require_carry_on(args)
    iterations = 1500
    config = sgd_config(args, iterations)
    ref = reference_accuracy(args, workdir, config, insecure=False)
    plan = kill_plan(rng, iterations, count)
    # kill1 runs over TLS (mutual certificates), kill2 in plaintext.
    c = Cluster(args, workdir, "run", config, insecure=(count != 1), hard_timeout=args.timeout)
    try:
        c.start_all()
        for victim, at in plan:
            c.wait_until(lambda: c.current(victim).iteration >= at, f"node {victim} reaching iteration {at}")
            c.kill(victim)
        c.wait_all()
    finally:
        c.kill_everything()
    dead = [v for v, _ in plan]
    survivors = [i for i in range(N) if i not in dead]
    check_exits(c, survivors)
    checked = check_mixing(c)
    fig = figures(c)
    require_figures(c, fig)
    ours, theirs = check_accuracy(c, survivors, ref)
    return c, {"w_checks": checked, **fig,
               "detail": f"killed {plan} (node, iteration); accuracy {ours:.4f} vs {theirs:.4f} undisturbed"}


def gossip_config(args, iterations, gossip_after, deadline_ms=2000):
    return config_text("lsq", "", iterations, args.train_seed, policy_block(args, "CARRY_ON"),
                       deadline_ms, 200, gossip_after=gossip_after, lr=0.02)


def scenario_gossip(args, workdir, rng):
    """SGD for S iterations (so the nodes' parameters differ), then learning rate 0; two nodes are
    killed at random iterations of the gossip phase; the survivors must reach consensus."""
    require_carry_on(args)
    s, iterations = 300, 1500
    args.checkpoint_every = s
    config = gossip_config(args, iterations, s)
    c = Cluster(args, workdir, "run", config, hard_timeout=args.timeout)
    victims = rng.sample(range(N), 2)
    its = sorted([s + 50 + rng.randrange(0, 300), s + 400 + rng.randrange(0, 300)])
    try:
        c.start_all()
        for victim, at in zip(victims, its):
            c.wait_until(lambda: c.current(victim).iteration >= at, f"node {victim} reaching iteration {at}")
            c.kill(victim)
        c.wait_all()
    finally:
        c.kill_everything()
    survivors = [i for i in range(N) if i not in victims]
    check_exits(c, survivors)
    checked = check_mixing(c)
    fig = figures(c)
    require_figures(c, fig)
    start = consensus_distance([c.checkpoint_params(i, s) for i in range(N)])
    final = consensus_distance([c.final_params(i) for i in survivors])
    log(f"consensus distance: {start:.3e} at the start of the gossip phase, {final:.3e} at the end (survivors)")
    if start < 1e-4:
        raise Failed(f"the nodes were already in consensus ({start:.2e}) when gossip began: the test proves nothing")
    if final > 1e-5:
        raise Failed(f"survivors did not reach consensus: distance {final:.3e} > 1e-5 (it was {start:.3e})")
    return c, {"w_checks": checked, **fig,
               "detail": f"killed {list(zip(victims, its))}; consensus {start:.2e} -> {final:.2e}"}


def scenario_rejoin(args, workdir, rng):
    """Kill one node, restart it with --resume once its neighbours dropped it; it must log
    `rejoined`, be back in its neighbours' rows within a few seconds, and end as close to the
    others' average as the others are."""
    require_carry_on(args)
    iterations = per_exchange(args, 3000)
    args.checkpoint_every = 100
    config = sgd_config(args, iterations)
    ref = reference_accuracy(args, workdir, config, insecure=True)
    (victim, at), = kill_plan(rng, iterations, 1)
    c = Cluster(args, workdir, "run", config, hard_timeout=args.timeout)
    nbrs = neighbours(victim)
    try:
        c.start_all()
        c.wait_until(lambda: c.current(victim).iteration >= at, f"node {victim} reaching iteration {at}")
        c.kill(victim)
        t_kill = c.kills[0]["unix_ms"]
        c.wait_until(lambda: all(any(line_ms(o) >= t_kill and victim not in parse_row(o["row"])
                                     for o in c.current(j).of_type("weights")) for j in nbrs),
                     f"the neighbours of node {victim} dropping it")
        c.sleep(0.5)
        c.restart(victim)
        t_restart = c.restarts[0]["unix_ms"]
        c.wait_until(lambda: c.current(victim).events("rejoined"), f"node {victim} logging rejoined")
        c.wait_until(lambda: all(any(line_ms(o) >= t_restart and victim in parse_row(o["row"])
                                     for o in c.current(j).of_type("weights")) for j in nbrs),
                     f"the neighbours of node {victim} listing it again")
        c.wait_all()
    finally:
        c.kill_everything()
    check_exits(c, range(N))
    checked = check_mixing(c, rejoined=[victim])
    fig = figures(c)
    require_figures(c, fig)
    back, readmit_it = [], 0
    for j in nbrs:
        w = [o for o in c.current(j).of_type("weights") if line_ms(o) >= t_restart and victim in parse_row(o["row"])]
        back.append(line_ms(w[0]) - t_restart)
        readmit_it = max(readmit_it, int(w[0]["iteration"]))
    if max(back) > args.rejoin_limit_ms:
        raise Failed(f"node {victim} was back in its neighbours' rows only {max(back)} ms after the restart "
                     f"(limit {args.rejoin_limit_ms} ms)")
    k = iterations - readmit_it
    if k < 100:
        raise Failed(f"only {k} iterations after the re-admission: the consensus check needs at least 100")
    xs = {i: c.final_params(i) for i in range(N)}
    dist = {}
    for i in range(N):
        others = np.mean([xs[j] for j in range(N) if j != i], axis=0)
        dist[i] = float(np.linalg.norm(xs[i] - others) / np.linalg.norm(others))
    worst_other = max(d for i, d in dist.items() if i != victim)
    log(f"distance to the others' average: rejoined node {dist[victim]:.3e}, other nodes up to {worst_other:.3e}")
    if dist[victim] > 2 * worst_other + 1e-6 or dist[victim] > 0.05:
        raise Failed(f"rejoined node {victim} is {dist[victim]:.3e} from the others' average after {k} iterations "
                     f"(others: up to {worst_other:.3e})")
    ours, theirs = check_accuracy(c, range(N), ref)
    return c, {"w_checks": checked, **fig,
               "detail": f"killed {victim} at {at}, back in the rows after {max(back)} ms, re-admitted at "
                         f"iteration {readmit_it}; distance {dist[victim]:.2e} (others <= {worst_other:.2e}); "
                         f"accuracy {ours:.4f} vs {theirs:.4f}"}
