#!/usr/bin/python3
"""gossip-sim run --replay-push-sum end to end (sim/push_sum_replay.h).

- Lock-step logs (node i mixes at t exactly the messages of iteration t sent to it, empty end line)
  replay `gossip-sim run` of the same PUSH_SUM config bit for bit, node by node, on the one-peer
  exponential graph of 8 (weights stay 1); on the star of 8 (directed mass flows are uneven: the
  weights leave 1) the weights are the same but the parameters are not, since the asynchronous step
  is not scaled by 1 / w.
- An asynchronous schedule (push_sum_reference.slow_node_schedule) on the real least-squares
  problem, in which nodes end early (alone: every in-neighbour sent them its last message) and
  send empty messages: the final weights are those of the independent float32 weight recursion,
  bit for bit (the replay checks them against the logs' weight lines), they sum to n, and the
  parameters differ from the synchronous run's.
- Bad logs (format version 2: one line per iteration the node ran, then end and weight) exit 2
  naming the file and line: malformed lines and entries, a bad header, messages not sent, taken
  twice or never (an empty one too), an empty mark on a message sent with its mass, a log that
  ends early while its node is not alone, an iteration line after its node is alone, a cycle; a
  weight line the replay does not reproduce exits 1.

Run by CTest with GOSSIP_SIM pointing at the binary, under Debian's /usr/bin/python3 (numpy).
"""
import itertools
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import push_sum_reference as ref  # noqa: E402

SIM = os.environ["GOSSIP_SIM"]
T = 30
CONFIG = ('seed: 5\nalgorithm: PUSH_SUM\nmodel { kind: LEAST_SQUARES }\n'
          'data { dataset: SYNTHETIC_LEAST_SQUARES num_examples: 1024 dim: 8 test_examples: 256 }\n'
          'batch_size: 8\noptimizer { kind: MOMENTUM lr: 0.05 momentum: 0.5 }\n'
          f'iterations: {T}\neval_every: 10\n')


def sim(*args):
    return subprocess.run([SIM, *args], capture_output=True, text=True, timeout=120)


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def params(directory, n):
    return [open(os.path.join(directory, f"node_{i}.f32"), "rb").read() for i in range(n)]


def weights_line(stdout):
    """(sum, [w_i]) from 'push-sum weights: sum S (w_0 ... w_n-1)'."""
    line = [l for l in stdout.splitlines() if l.startswith("push-sum weights: sum ")]
    check(len(line) == 1, f"one weights line: {stdout!r}")
    head, ws = line[0][len("push-sum weights: sum "):].split(" (")
    return float(head), [np.float32(float(w)) for w in ws.rstrip(")").split()]


with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "train.pbtxt")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    dring = os.path.join(tmp, "dring4.pbtxt")
    with open(dring, "w") as f:
        f.write('name: "dring4"\ndirected: true\n')
        f.write("".join(f'node {{ id: {i} address: "127.0.0.1:{7000 + i}" }}\n' for i in range(4)))
        f.write("".join(f"edge {{ from: {i} to: {(i + 1) % 4} }}\n" for i in range(4)))

    # Lock-step logs replay the synchronous run bit for bit.
    for name, topo in (("one_peer_exponential", ref.one_peer_exponential(8)), ("star", ref.star(8))):
        consumed, drained = ref.lockstep(topo, T)
        expected = ref.float32_weights(topo, T, consumed, drained)
        logs = os.path.join(tmp, name, "logs")
        ref.write_logs(logs, 8, T, consumed, drained, expected, topo=topo)
        common = ["run", "--config", cfg, "--topology", name, "--nodes", "8", "--quiet"]
        p = sim(*common, "--dump-params", os.path.join(tmp, name, "run"))
        check(p.returncode == 0, f"{name}: run exited {p.returncode}: {p.stderr}")
        p = sim(*common, "--replay-push-sum", logs, "--dump-params", os.path.join(tmp, name, "replay"))
        check(p.returncode == 0, f"{name}: replay exited {p.returncode}: {p.stderr}")
        run, replay = params(os.path.join(tmp, name, "run"), 8), params(os.path.join(tmp, name, "replay"), 8)
        # The asynchronous step is not scaled by 1 / w: where every weight stays 1 (the one-peer
        # exponential graph) the replay is the synchronous run to the bit; on the star it is not.
        for i in range(8):
            check(len(run[i]) == 4 * 9 and (run[i] == replay[i]) == (name != "star"),
                  f"{name}, node {i}: replay == run, bit for bit, only where the weights stay 1")
        total, weights = weights_line(p.stdout)
        check(weights == expected and abs(total - 8) < 1e-5, f"{name}: weights {p.stdout!r}")
        if name == "star":
            check(abs(weights[0] - 32 / 11) < 0.05 and abs(weights[1] - 8 / 11) < 0.05,
                  f"star: the hub's weight tends to 32/11, a leaf's to 8/11: {weights}")

    # An asynchronous schedule on the real problem: weights of the independent recursion, mass kept.
    # Node 0 is slow: its in-neighbour ends first, node 0 is alone before T and ends early, and so,
    # through node 0's empty message, does node 1.
    topo, consumed, drained = ref.slow_node_schedule(4, T, seed=3)
    E = [len(c) for c in consumed]  # E_i: the iterations node i ran
    check(any(e < T for e in E), f"some node ends early: {E}")
    empty, _ = ref.empties(consumed, drained)
    check(any(m in empty for i in range(4) for line in consumed[i] for m in line)
          and any(m in empty for i in range(4) for m in drained[i]),
          "empty messages taken on an iteration line and in a drain")
    expected = ref.float32_weights(topo, T, consumed, drained)
    logs = os.path.join(tmp, "async", "logs")
    ref.write_logs(logs, 4, T, consumed, drained, expected, topo=topo)
    common = ["run", "--config", cfg, "--topology", dring, "--quiet"]
    p = sim(*common, "--replay-push-sum", logs, "--dump-params", os.path.join(tmp, "async", "replay"))
    check(p.returncode == 0, f"async replay exited {p.returncode}: {p.stderr}")
    total, weights = weights_line(p.stdout)
    check(weights == expected and abs(total - 4) < 1e-5, f"async weights: {p.stdout!r} vs {expected}")
    check(abs(sum(float(w) for w in weights) - 4) <= 4e-5, f"the weights sum to n: {weights}")
    check(max(abs(w - 1) for w in weights) > 0.1, f"the weights moved: {weights}")
    check(sim(*common, "--dump-params", os.path.join(tmp, "async", "run")).returncode == 0, "sync run")
    replay = [np.frombuffer(b, dtype=np.float32) for b in params(os.path.join(tmp, "async", "replay"), 4)]
    run = [np.frombuffer(b, dtype=np.float32) for b in params(os.path.join(tmp, "async", "run"), 4)]
    check(all(np.isfinite(r).all() for r in replay), "finite parameters")
    check(all((a != b).any() for a, b in zip(replay, run)), "the schedule changes every node's result")

    # Bad logs: exit 2 naming the file and line. Each case edits one copy of the asynchronous logs:
    # node i's iteration t on line t + 2, its end line E_i + 2, its weight line E_i + 3.
    copies = itertools.count()

    def node_file(d, i):
        return os.path.join(d, f"node-{i}", "push_sum_order.tsv")

    def bad_dir():  # a fresh directory for each copy
        return os.path.join(tmp, f"bad-{next(copies)}")

    def edited(i, edit):
        d = bad_dir()
        shutil.copytree(logs, d)
        with open(node_file(d, i)) as f:
            lines = f.read().split("\n")
        edit(lines)
        with open(node_file(d, i), "w") as f:
            f.write("\n".join(lines))
        return d

    def rescheduled(edit):
        """The logs of the schedule as `edit(consumed, drained)` leaves a copy of it (the empty
        marks follow each node's number of lines; weight lines of the recursion)."""
        c = [[list(line) for line in node] for node in consumed]
        dr = [list(m) for m in drained]
        edit(c, dr)
        c = [[sorted(line) for line in node] for node in c]
        dr = [sorted(m) for m in dr]
        d = bad_dir()
        ref.write_logs(d, 4, T, c, dr, ref.float32_weights(topo, T, c, dr))
        return d

    def set_line(t, text):  # the line of iteration t
        def edit(lines):
            lines[t + 1] = str(t) + "\t" + text
        return edit

    def entries(msgs):  # messages sent with their mass
        return " ".join(f"{j}:{s}" for j, s in sorted(msgs))

    def header(**fields):
        def edit(lines):
            words = lines[0].split(" ")
            for key, value in fields.items():
                words[words.index(key) + 1] = str(value)
            lines[0] = " ".join(words)
        return edit

    check(E[2] == T and consumed[2][10], "node 2 runs every iteration and mixes something at 10")
    first = consumed[2][10][0]  # node 1's message, sent with its mass
    check(first[0] == 1 and first[1] < E[1] and first[1] != T - 1,
          f"node 1's message with its mass, not its last: {first}")
    later = next(t for t in range(11, E[2]) if consumed[2][t])
    cases = [
        # (node whose log is edited, the logs, line named, words in the message)
        (2, edited(2, set_line(10, "1:x")), 12, "expected <node>:<iteration>"),
        (2, edited(2, set_line(10, "1 : 3")), 12, "expected <node>:<iteration>"),
        (2, edited(2, lambda lines: lines.insert(5, "garbage")), 6, "expected '4<tab>...'"),
        (2, edited(2, lambda lines: lines.__delitem__(slice(20, None))), 21, "the log ends here"),
        (2, edited(2, lambda lines: lines.insert(E[2] + 3, "extra\t")), E[2] + 4,
         "after the weight line"),
        (2, edited(2, set_line(10, "9:3")), 12, "node 9 is out of range (nodes 0..3)"),
        (2, edited(2, set_line(10, f"1:{T}")), 12, f"iteration {T} is out of range"),
        (2, edited(2, set_line(10, "2:3")), 12, "node 2's own message"),
        (2, edited(2, set_line(10, "1:4 1:3")), 12, "sorted"),
        (2, edited(2, header(start=10)), 1, "resumed run cannot be replayed"),
        (2, edited(2, header(nodes=5)), 1, "nodes 5, but the replay has 4"),
        (2, edited(2, header(total=T + 1)), 1, f"total {T + 1}, but the config runs {T}"),
        (2, edited(2, header(node=3)), 1, "node 3, but this is node 2's log"),
        (2, edited(2, header(order=1)), 1, "format version 1"),
        (1, edited(1, header(staleness=5)), 1, "staleness 5, but"),
        (2, edited(2, set_line(10, entries(consumed[2][10] + [(0, 3)]))), 12,
         "node 0 does not send to node 2 at iteration 3"),
        (2, edited(2, set_line(later, entries(consumed[2][later] + [first]))), later + 2, f"{first[0]}:{first[1]}: the message is consumed twice (also on line 12)"),
        (2, edited(2, set_line(10, entries(consumed[2][10][1:]))), E[2] + 2,
         f"node 1's message {first[0]}:{first[1]} to node 2 is consumed nowhere"),
        (2, edited(2, lambda lines: lines.__setitem__(E[2] + 2, "weight\t1.5x")), E[2] + 3, "%a"),
    ]
    # The rule "a node alone ends its run"; these name the file and line only.
    a = next(i for i in range(4) if E[i] < T)  # a node that ends early: alone at E_a
    sa, oa = (a - 1) % 4, (a + 1) % 4  # its in- and out-neighbour on the ring
    check(0 < E[a] < T - 1 and (sa, T - 1) in consumed[a][E[a] - 1],
          f"node {a} ends at {E[a]} after it took node {sa}'s last message on its last line")
    drained_empty = next((i, m) for i in range(4) for m in drained[i] if m in empty)

    def not_alone(c, dr):  # node a takes its in-neighbour's last message only in the drain
        c[a][E[a] - 1].remove((sa, T - 1))
        dr[a].append((sa, T - 1))

    def runs_on(c, dr):  # node a runs iteration E_a although alone; its message (a, E_a) is taken
        c[a].append([])
        dr[oa].append((a, E[a]))

    cases += [
        # An empty mark on a message node 1 sent with its mass (first[1] < E_1).
        (2, edited(2, set_line(10, " ".join(f"{j}:{s}" + ("e" if (j, s) == first else "")
                                            for j, s in consumed[2][10]))), 12, ""),
        # Node a's log ends early (its end line) though it is not alone there.
        (a, rescheduled(not_alone), E[a] + 2, ""),
        # Node a alone at E_a, yet a line for iteration E_a.
        (a, rescheduled(runs_on), E[a] + 2, ""),
        # An empty message that is never taken: named at its receiver's end line.
        (drained_empty[0], rescheduled(lambda c, dr: dr[drained_empty[0]].remove(drained_empty[1])),
         E[drained_empty[0]] + 2, ""),
    ]
    for node, d, line, says in cases:
        p = sim(*common, "--replay-push-sum", d)
        where = f"{node_file(d, node)}:{line}:"
        check(p.returncode == 2 and where in p.stderr and says in p.stderr and p.stdout == "",
              f"expected exit 2 with {where} ... {says!r}, got {p.returncode}: {p.stderr!r}")

    # A missing log names the file; so does a missing directory (its node 0's log).
    d = edited(0, lambda lines: None)
    os.remove(node_file(d, 3))
    for directory, node in ((d, 3), (os.path.join(tmp, "nowhere"), 0)):
        p = sim(*common, "--replay-push-sum", directory)
        check(p.returncode == 2 and f"{node_file(directory, node)}: missing" in p.stderr,
              f"missing log: {p.returncode} {p.stderr!r}")

    # A cycle: every node mixes its in-neighbour's next message (node 1's iteration 0 needs node 0's
    # iteration 0 done, which needs node 3's, ..., which needs node 1's).
    # Node i takes its in-neighbour's last message T - 1 on its last line: it is alone only at T.
    shifted = [[[((i - 1) % 4, s) for s in ([0, 1] if t == 0 else [t + 1] if t + 2 < T else
                                            [T - 1] if t == T - 1 else [])]
                for t in range(T)] for i in range(4)]
    d = os.path.join(tmp, "cycle")
    ref.write_logs(d, 4, T, shifted, [[] for _ in range(4)], [1.0] * 4)
    p = sim(*common, "--replay-push-sum", d)
    check(p.returncode == 2 and f"{node_file(d, 0)}:2: iteration 0: causally impossible" in p.stderr
          and "cycle" in p.stderr, f"cycle: {p.returncode} {p.stderr!r}")

    # A weight line the replay does not reproduce: the logs are fine, the run is another: exit 1.
    d = edited(3, lambda lines: lines.__setitem__(E[3] + 2,
                                                  "weight\t" + float(np.float32(0.75)).hex()))
    p = sim(*common, "--replay-push-sum", d)
    check(p.returncode == 1 and f"{node_file(d, 3)}:{E[3] + 3}: weight 0x1.8p-1, but the replay ends node 3"
          in p.stderr, f"weight mismatch: {p.returncode} {p.stderr!r}")

    # Without a PUSH_SUM config there is nothing to replay; the replay prints no evaluation points.
    dpsgd = os.path.join(tmp, "dpsgd.pbtxt")
    with open(dpsgd, "w") as f:
        f.write(CONFIG.replace("algorithm: PUSH_SUM\n", ""))
    small = ["--problem", "least_squares", "--iterations", str(T), "--dim", "8"]
    for args, says in (([*common[:2], dpsgd, *common[3:]], "has another algorithm"),
                       (["run", "--topology", dring, "--algorithm", "push_sum", *small, "--quiet"],
                        "give its training config (--config) with algorithm: PUSH_SUM"),
                       ([*common, "--csv", os.path.join(tmp, "x.csv")], "leave out --csv")):
        p = sim(*args, "--replay-push-sum", logs)
        check(p.returncode == 2 and says in p.stderr and p.stdout == "", f"{args}: {p.returncode} {p.stderr!r}")

    check("--replay-push-sum" in sim("run", "--help").stdout, "run --help lists --replay-push-sum")
print("ok")
