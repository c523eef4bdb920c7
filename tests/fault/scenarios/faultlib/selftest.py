"""The self-test of the W(t) checker (scenario selftest): check_mixing on synthetic weights lines
of good runs (accepted) and of bad ones (caught), with Metropolis-Hastings rows computed here as
an independent reference."""

from .checks import check_mixing
from .common import N, Failed, log
from .metrics import MetricsFile
from .workload import neighbours, torus_edges


# ---------------------------------------------------------------- self-test of the checks

def mh_rows(edges, nodes):
    """Metropolis-Hastings rows of W for an undirected edge set on `nodes` (an independent reference)."""
    deg = {i: 0 for i in nodes}
    for a, b in edges:
        deg[a] += 1
        deg[b] += 1
    rows = {i: {} for i in nodes}
    for a, b in edges:
        w = 1.0 / (1 + max(deg[a], deg[b]))
        rows[a][b] = w
        rows[b][a] = w
    for i in nodes:
        rows[i][i] = 1.0 - sum(rows[i].values())
    return rows


class FakeRun:
    """The parts of a Cluster that check_mixing reads, filled with synthetic weights lines."""

    def __init__(self, iterations, local_steps=1):
        self.iterations, self.local_steps = iterations, local_steps
        self.metrics = {i: [MetricsFile("-", i, 0)] for i in range(N)}
        self.exit_codes = {i: [0] for i in range(N)}
        self.kills = []

    def log_rows(self, iteration, rows, only=None):
        for i, row in rows.items():
            if only is None or i in only:
                text = ",".join(f"{j}:{row[j]:.17g}" for j in sorted(row))
                self.metrics[i][-1].lines.append({"type": "weights", "node": i, "iteration": iteration,
                                                  "unix_ms": 0, "row": text})

    def kill(self, i, in_iteration):
        self.exit_codes[i][-1] = -9
        self.metrics[i][-1].iteration = in_iteration  # its last "iter" line: in_iteration completed
        self.kills.append({"node": i, "unix_ms": 0, "iteration": in_iteration})


def scenario_selftest(args, workdir, rng):
    """The W(t) checker on synthetic logs. Accepted: a correct drop of node 0 (killed in iteration
    101, dropped by all its neighbours from 102, Metropolis-Hastings from the new degrees), a node
    killed between its verdicts (one neighbour used its last parameters, the others did not), the
    same under rounds of 5 local steps (killed while sending its round message), a second death
    re-weighted in two steps, a correct rejoin (also one where the restarted node trained alone
    from its older checkpoint first). Caught: one end dropping a iteration late (using parameters
    the dead node never sent), the rounds case read per step, one end dropping a round late, a row
    summing to 1 + 1e-9, a survivor that never drops the dead node, W_ij != W_ji, symmetric doubly
    stochastic weights that are not Metropolis-Hastings, a transitional W kept 10 iterations, a
    node without weights lines, a late re-admission."""
    full = torus_edges()
    survivors = [i for i in range(N) if i != 0]
    without0 = [e for e in full if 0 not in e]

    def changed_by_drop():
        before, after = mh_rows(full, range(N)), mh_rows(without0, survivors)
        return [i for i in survivors if after[i] != before[i]]

    def run(mutate=None):
        r = FakeRun(300)
        r.log_rows(0, mh_rows(full, range(N)))
        r.kill(0, 101)  # died in iteration 101; the survivors drop it from 102
        after = mh_rows(without0, survivors)
        changed = [i for i in survivors if after[i] != mh_rows(full, range(N))[i]]
        if mutate:
            mutate(r, after, changed)
        else:
            r.log_rows(102, after, only=changed)
        return r

    def expect_fail(name, r, rejoined=()):
        try:
            check_mixing(r, rejoined=rejoined)
        except Failed as e:
            log(f"selftest: {name}: caught ({str(e)[:110]})")
            return
        raise Failed(f"selftest: the checker accepted a run with {name}")

    if check_mixing(run()) < 2:
        raise Failed("selftest: fewer than 2 distinct W checked")

    # The real pattern of a node killed between sending its verdicts: node 0 was in iteration 102;
    # node 3 still mixed with x_0^102 (it had 0's verdict), nodes 1 and 4 dropped 0 at 102.
    def lost_verdict(r, after, changed):
        r.metrics[0][0].iteration = 102
        r.log_rows(102, after, only=[1, 4])
        r.log_rows(103, after, only=[3])
    check_mixing(run(lost_verdict))

    # The same under rounds of H = 5 (one W per round [100, 105), used at the round's exchange):
    # node 0 was killed while sending its round-100 message after iteration 104; node 3 had it and
    # mixed with node 0 in round 100, nodes 1 and 4 did not and dropped node 0 from round 100.
    # Accepted under rounds; the same rows read per step (node 0 in the mixing at 100..103 while
    # rows 1 and 4 leave it out) are caught; so is node 3 keeping node 0 a round later.
    def lost_round_message(h, late=False):
        r = FakeRun(300, local_steps=h)
        r.log_rows(0, mh_rows(full, range(N)))
        r.kill(0, 104)
        after = mh_rows(without0, survivors)
        r.log_rows(100, after, only=[1, 4])
        r.log_rows(110 if late else 105, after, only=[3])
        return r
    if sorted(changed_by_drop()) != [1, 3, 4]:
        raise Failed(f"selftest: node 0's neighbours are not 1, 3, 4: {changed_by_drop()}")
    check_mixing(lost_round_message(5))
    expect_fail("rows of a round read per step (a round's lost message)", lost_round_message(1))
    expect_fail("a neighbour keeping a dead node a round late", lost_round_message(5, late=True))

    # A link cut between the two verdicts of iteration 150 (partition scenarios): node 1 mixed with
    # node j at 150, node j (whose verdict from 1 never came) did not; both dropped it from 151.
    # Rejected without cut_edges; tolerated once with it; a second one-sided iteration is not.
    j = neighbours(1)[-1]
    cut_w = mh_rows(full, range(N))
    cut_after = mh_rows([e for e in full if set(e) != {1, j}], range(N))

    def cut_run(one_sided_iterations):
        r = FakeRun(300)
        r.log_rows(0, cut_w)
        alone = {j: {k: w for k, w in cut_w[j].items() if k != 1}}
        alone[j][j] += cut_w[j][1]
        r.log_rows(150, alone)
        r.log_rows(150 + one_sided_iterations, cut_after, only=[1])
        r.log_rows(151, cut_after, only=[j])
        return r
    expect_fail("a one-sided edge without cut_edges", cut_run(1))
    seen = {}
    check_mixing(cut_run(1), cut_edges={frozenset((1, j))}, asymmetric=seen)
    if seen != {frozenset((1, j)): 150}:
        raise Failed(f"selftest: the one-sided cut edge was not recorded at iteration 150: {seen}")
    try:
        check_mixing(cut_run(2), cut_edges={frozenset((1, j))}, asymmetric={})
        raise Failed("selftest: the checker accepted a cut edge one-sided for two iterations")
    except Failed as e:
        if "accepted" in str(e):
            raise
        log(f"selftest: a cut edge one-sided for two iterations: caught ({str(e)[:110]})")

    def late(r, after, changed):
        r.log_rows(102, after, only=changed[:-1])
        r.log_rows(103, after, only=changed[-1:])
    expect_fail("one end dropping the edge an iteration late", run(late))

    def off(r, after, changed):
        bad = {i: dict(after[i]) for i in changed}
        bad[changed[0]][changed[0]] += 1e-9
        r.log_rows(102, bad)
    expect_fail("a row summing to 1 + 1e-9", run(off))

    def keeps(r, after, changed):
        r.log_rows(102, after, only=changed[1:])
    expect_fail("a survivor that never drops the dead node", run(keeps))

    def skew(r, after, changed):
        bad = {i: dict(after[i]) for i in changed}
        a = changed[0]
        b = next(j for j in bad[a] if j != a)
        bad[a][b] += 1e-6
        bad[a][a] -= 1e-6
        r.log_rows(102, bad)
    expect_fail("W[i][j] != W[j][i]", run(skew))

    def not_mh(r, after, changed):
        bad = {i: dict(after[i]) for i in (1, 2)}
        for a, b in ((1, 2), (2, 1)):  # symmetric and doubly stochastic, but not Metropolis-Hastings
            bad[a][b] += 0.05
            bad[a][a] -= 0.05
        r.log_rows(102, after, only=[i for i in changed if i not in bad])
        r.log_rows(102, bad)
    expect_fail("symmetric doubly stochastic weights that are not Metropolis-Hastings", run(not_mh))

    # Two deaths, the second re-weighted in two steps: at 200 node 1's edges go and their weights
    # move to the diagonals (symmetric, doubly stochastic, not yet Metropolis-Hastings), at 201 the
    # new degrees apply. Accepted; the same transition kept for 10 iterations is not.
    def two_step(r, after, changed, hold=1):
        r.log_rows(102, after, only=changed)
        r.kill(1, 199)
        stale = {i: {j: w for j, w in after[i].items() if j != 1} for i in survivors if i != 1}
        for i in stale:
            stale[i][i] += after[i].get(1, 0.0)
        r.log_rows(200, stale, only=[i for i in stale if 1 in after[i]])
        final = mh_rows([e for e in without0 if 1 not in e], [i for i in survivors if i != 1])
        r.log_rows(200 + hold, final, only=[i for i in final if final[i] != stale[i]])
    if check_mixing(run(two_step)) < 3:
        raise Failed("selftest: fewer than 3 distinct W checked in the two-step run")
    expect_fail("a transitional (non Metropolis-Hastings) W kept for 10 iterations",
                run(lambda r, a, c: two_step(r, a, c, hold=10)))

    r = run()
    r.metrics[5][0].lines = []
    expect_fail("a node without weights lines", r)

    # Rejoin: node 0 comes back as incarnation 1, admitted at iteration 200 by all three neighbours.
    def rejoin(r, after, changed, admit=200, late_one=False):
        r.log_rows(102, after, only=changed)
        r.metrics[0].append(MetricsFile("-", 0, 1))
        r.exit_codes[0].append(0)
        back = mh_rows(full, range(N))
        r.log_rows(admit, back, only=[0] + (changed[:-1] if late_one else changed))
        if late_one:
            r.log_rows(admit + 1, back, only=changed[-1:])
    if check_mixing(run(rejoin), rejoined=[0]) < 3:
        raise Failed("selftest: fewer than 3 distinct W checked in the rejoin run")
    def rejoin_alone(r, after, changed):  # restarted from its checkpoint at 50, alone until 200
        rejoin(r, after, changed)
        r.metrics[0][1].lines.insert(0, {"type": "weights", "node": 0, "iteration": 50, "unix_ms": 0,
                                         "row": "0:1"})
    if check_mixing(run(rejoin_alone), rejoined=[0]) < 3:
        raise Failed("selftest: fewer than 3 distinct W checked in the rejoin-alone run")
    expect_fail("a neighbour re-admitting a rejoined node an iteration late",
                run(lambda r, a, c: rejoin(r, a, c, late_one=True)), rejoined=[0])
    join_leave_selftest(full)
    return None, {"detail": "checker self-test: 8 good runs accepted, 15 bad ones caught (join and leave included)"}


def join_leave_selftest(full):
    """A standby node 0 that joins at 150 (its neighbours leave it out of W until then) and a node
    5 that announces its leave from 250 (exit 4, its neighbours drop it at 250). Accepted; caught:
    a neighbour that admits the joiner an iteration late, one that mixes with it before t_a, and
    one that drops the leaver an iteration late."""
    everyone = list(range(N))

    def run(admit_late=False, early=False, drop_late=False):
        r = FakeRun(300)
        r.log_rows(0, mh_rows([e for e in full if 0 not in e], everyone[1:]), only=everyone[1:])
        if early:
            r.log_rows(100, mh_rows(full, everyone), only=[neighbours(0)[0]])
        both = mh_rows(full, everyone)
        late = neighbours(0)[-1] if admit_late else None
        r.log_rows(150, both, only=[i for i in everyone if i != late])
        if late is not None:
            r.log_rows(151, both, only=[late])
        r.exit_codes[5][0] = 4
        r.metrics[5][0].iteration = 249
        rest = [i for i in everyone if i != 5]
        after = mh_rows([e for e in full if 5 not in e], rest)
        changed = [i for i in rest if after[i] != both[i]]
        slow = changed[-1] if drop_late else None
        r.log_rows(250, after, only=[i for i in changed if i != slow])
        if slow is not None:
            r.log_rows(251, after, only=[slow])
        return r

    if check_mixing(run(), joined={0: 150}, left={5: 250}) < 3:
        raise Failed("selftest: fewer than 3 distinct W checked in the join-and-leave run")
    for name, r in (("a neighbour admitting the joiner an iteration late", run(admit_late=True)),
                    ("a neighbour mixing with the standby node before it joined", run(early=True)),
                    ("a neighbour dropping the leaver an iteration late", run(drop_late=True))):
        try:
            check_mixing(r, joined={0: 150}, left={5: 250})
        except Failed as e:
            log(f"selftest: {name}: caught ({str(e)[:110]})")
            continue
        raise Failed(f"selftest: the checker accepted a run with {name}")
