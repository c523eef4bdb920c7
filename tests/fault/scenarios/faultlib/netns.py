"""The network-namespace scenarios: NetnsHarness (scripts/netns.sh: one namespace per node, loss,
cuts, heal), netns-delay-loss (every link delayed by a fault proxy, 5 % loss) and netns-partition
(the torus cut into its two rows for 10 s, then healed and merged by gossip)."""

import os
import subprocess

import numpy as np

from .checks import check_accuracy, check_exits, check_mixing, consensus_distance, reference_accuracy
from .cluster import Cluster
from .common import N, REPO, Failed, Skipped, log, now_ms
from .metrics import line_ms
from .scenarios import policy_block, require_carry_on, sgd_config
from .workload import config_text, fmnist_subset, neighbours


# ---------------------------------------------------------------- network namespaces

class NetnsHarness:
    def __init__(self, prefix):
        self.script = os.path.join(REPO, "scripts", "netns.sh")
        self.env = dict(os.environ, GOSSIP_NETNS_PREFIX=prefix)
        self.prefix = prefix

    def run(self, *words, check=True):
        p = subprocess.run([self.script, *words], env=self.env, capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            if p.returncode == 77:
                raise Skipped(p.stderr.strip())
            raise Failed(f"netns.sh {' '.join(words)} failed ({p.returncode}): {p.stderr.strip()}")
        return p

    def ns(self, i):
        return f"{self.prefix}-n{i}"

    def addr(self, i):
        return f"10.231.0.{i + 1}"

    def check(self):
        p = self.run("check", check=False)
        if p.returncode == 77:
            raise Skipped(p.stderr.strip() or "network namespaces cannot be created here")
        if p.returncode != 0:
            raise Failed(f"netns.sh check failed: {p.stderr.strip()}")


def netns_setup(args, n=N):
    h = NetnsHarness(f"gfs{os.getpid() % 100000}")
    h.check()
    h.run("up", str(n))
    return h


def tear_down(c, h):
    """Kills every process of cluster c (None when it was never built) and takes the netns hosts h
    down: the end of every netns scenario, whatever happened in it."""
    if c:
        c.kill_everything()
    h.run("down", check=False)


def scenario_netns_delay_loss(args, workdir, rng):
    """8 namespaces; every link delayed 100 +- 50 ms per direction (one fault proxy in front of
    every node) and 5 % of the packets arriving at every host dropped: the run finishes and its
    accuracy is within 1 percentage point of the undisturbed loopback run of the same config."""
    require_carry_on(args)
    iterations = 150
    config = sgd_config(args, iterations, deadline_ms=8000)
    h = netns_setup(args)
    c = None
    try:
        ref = reference_accuracy(args, workdir, config, insecure=True)
        c = Cluster(args, workdir, "run", config, insecure=False, netns=h, hard_timeout=args.timeout)
        for i in range(N):
            c.start_proxy(i, 100, 50, args.seed * 100 + i)
        h.run("loss", "5")
        c.start_all()
        c.wait_all()
    finally:
        tear_down(c, h)
    check_exits(c, range(N))
    dropped = sum(len(c.current(i).events("edge_dropped")) for i in range(N))
    checked = check_mixing(c)
    ours, theirs = check_accuracy(c, range(N), ref)
    its = [o for i in range(N) for o in c.current(i).of_type("iter")]
    ms = 1000 * float(np.mean([o["iteration_s"] for o in its]))
    return c, {"w_checks": checked, "detect_ms": None, "reweight_ms": None, "rejoin_ms": None,
               "detail": f"{iterations} iterations at {ms:.0f} ms each; {dropped} edge drops; accuracy "
                         f"{ours:.4f} vs {theirs:.4f} undisturbed on loopback"}


def scenario_netns_partition(args, workdir, rng):
    """8 namespaces, links delayed 20 +- 5 ms; the graph is cut into its two rows {0..3} and
    {4..7} (nftables drops) for 10 s. Both halves keep training (with partitioned / edge_dropped
    warnings), after healing both sides log edge_admitted, and the run merges: after S iterations
    the learning rate is 0 (gossip), and the final parameters of all 8 nodes agree."""
    require_carry_on(args)
    s, iterations = 700, 1100
    args.checkpoint_every = s
    data = fmnist_subset(args.cache_dir, 12000, 10000)
    config = config_text("fmnist", data, iterations, args.train_seed, policy_block(args, "CARRY_ON"),
                         2000, 200, gossip_after=s, shards="BY_LABEL", lr=0.05)
    h = netns_setup(args)
    c = None
    a, b = [0, 1, 2, 3], [4, 5, 6, 7]
    try:
        c = Cluster(args, workdir, "run", config, insecure=True, netns=h, hard_timeout=args.timeout)
        for i in range(N):
            c.start_proxy(i, 20, 5, args.seed * 100 + i)
        c.start_all()
        c.wait_until(lambda: min(c.current(i).iteration for i in range(N)) >= 30, "every node at iteration 30")
        c.poll()
        cut_its = {i: c.current(i).iteration for i in range(N)}
        t_cut = now_ms()  # before the rules go in: the first ones bite while the rest are added
        h.run("cut", ",".join(map(str, a)), ",".join(map(str, b)))
        log(f"cut {a} | {b} at iterations {cut_its} (the rules took {now_ms() - t_cut} ms)")
        c.sleep(10)  # 10 s with every rule in place (the first ones went in up to a few seconds earlier)
        c.poll()
        mid_its = {i: c.current(i).iteration for i in range(N)}
        h.run("heal")
        t_heal = now_ms()  # after the rules are gone
        log(f"healed at iterations {mid_its}")
        c.wait_all()
    finally:
        tear_down(c, h)
    check_exits(c, range(N))
    stalled = [i for i in range(N) if mid_its[i] - cut_its[i] < 20]
    if stalled:
        raise Failed(f"nodes {stalled} did not keep training during the partition (iterations {cut_its} -> {mid_its})")
    warned = [i for i in range(N) if not [o for o in c.current(i).lines if o.get("type") == "event" and
                                          o.get("event") in ("partitioned", "edge_dropped") and line_ms(o) >= t_cut]]
    if warned:
        raise Failed(f"nodes {warned} logged neither partitioned nor edge_dropped during the partition")
    for half in (a, b):
        if not any(c.current(i).events("edge_admitted") and
                   any(line_ms(o) >= t_heal for o in c.current(i).events("edge_admitted")) for i in half):
            raise Failed(f"no node of {half} logged edge_admitted after the heal")
    admitted = [int(o["iteration"]) for i in range(N) for o in c.current(i).events("edge_admitted")]
    if max(admitted) >= s:
        raise Failed(f"the halves were re-admitted only at iteration {max(admitted)}, after the gossip phase began "
                     f"at {s}: increase S")
    cut = {frozenset((i, j)) for i in a for j in neighbours(i) if j in b}
    one_sided = {}
    checked = check_mixing(c, cut_edges=cut, asymmetric=one_sided)
    if one_sided:
        log(f"cut edges one-sided for one iteration (a verdict lost to the cut): "
            f"{ {tuple(sorted(e)): t for e, t in one_sided.items()} }")
    start = consensus_distance([c.checkpoint_params(i, s) for i in range(N)])
    final = consensus_distance([c.final_params(i) for i in range(N)])
    log(f"consensus distance {start:.3e} at iteration {s}, {final:.3e} at the end")
    if final > 1e-5:
        raise Failed(f"the halves did not merge: final consensus distance {final:.3e} > 1e-5")
    heal_ms = min(line_ms(o) for i in range(N) for o in c.current(i).events("edge_admitted")
                  if line_ms(o) >= t_heal) - t_heal
    return c, {"w_checks": checked, "detect_ms": None, "reweight_ms": None, "rejoin_ms": heal_ms,
               "detail": f"cut for 10 s at iterations {min(cut_its.values())}-{max(cut_its.values())}, "
                         f"{len(one_sided)} of {len(cut)} cut edges one-sided for one iteration, "
                         f"edges re-admitted {heal_ms} ms after the heal; consensus {start:.2e} -> {final:.2e}"}
