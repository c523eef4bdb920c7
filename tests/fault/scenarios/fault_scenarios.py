#!/usr/bin/python3
"""Fault-tolerance scenarios for gossipd (issue 8; docs/fault.md, "Fault scenarios").

Starts 8 real `gossipd run` processes (one per node) on a 2 x 4 torus (the 3-cube: every node
has 3 neighbours, and the graph stays connected after any 2 nodes die), injects faults (SIGKILL
at seeded-random iterations, a restart with --resume, delay/loss/partitions across network
namespaces), waits with a hard timeout (a hang is a failure: everything is killed and reported),
then checks the run from the nodes' metrics files and final parameters:

  * survivors exit 0 after all iterations (no restart, no hang);
  * W(t) rebuilt from every node's "weights" lines is symmetric and doubly stochastic (1e-12) on
    the nodes in the mixing at every iteration; a dead node's edges are gone from the survivors'
    rows after the drop;
  * gossip phase (learning rate 0): the survivors' final parameters agree (consensus distance);
  * SGD: survivors' final test accuracy within 1 percentage point of an undisturbed run with the
    same seed (run once per config and binary, cached);
  * rejoin: the restarted node logs `rejoined`, its neighbours' rows include it again within a
    few seconds of the restart, and its final parameters are as close to the others' average as
    any other node's;
  * figures: detection time (kill -> first `edge_dropped` at a neighbour), re-weight time (kill ->
    the last neighbour's first weights line without the dead node), rejoin time (restart ->
    `rejoined`), printed as one SUMMARY line per run.

Scenarios: failstop, undisturbed, kill1, kill2, gossip, rejoin, netns-delay-loss, netns-partition.
Exit codes: 0 passed, 1 failed (the reasons are printed), 2 bad usage, 77 skipped (netns
scenarios where namespaces cannot be created).

    fault_scenarios.py kill1 --build build-fault [--seed 3] [--keep] [--summary-json F]
"""

import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_SKIP = 0, 1, 2, 77
N = 8  # nodes: 2 x 4 torus
ROWS, COLS = 2, 4
TOL = 1e-12
MH_SETTLE = 5  # a W in force this many iterations must be Metropolis-Hastings of its graph
FMNIST = "/usr/share/datasets/fashion-mnist"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class Failed(Exception):
    """A check failed; the message says which and why."""


class Skipped(Exception):
    """The scenario cannot run here (exit 77)."""


def now_ms():
    return int(time.time() * 1000)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- topology, data, configs

def torus_edges():
    """Undirected edges of the ROWS x COLS torus, node r * COLS + c (rows = 2: one vertical edge)."""
    edges = set()
    for r in range(ROWS):
        for c in range(COLS):
            i = r * COLS + c
            for j in (r * COLS + (c + 1) % COLS, ((r + 1) % ROWS) * COLS + c):
                if i != j:
                    edges.add((min(i, j), max(i, j)))
    return sorted(edges)


def neighbours(i):
    return sorted({b for a, b in torus_edges() if a == i} | {a for a, b in torus_edges() if b == i})


def write_topology(path, addresses):
    lines = ['# 2 x 4 torus (the 3-cube), written by tests/fault/scenarios/fault_scenarios.py',
             'name: "faultsc"']
    for i, a in enumerate(addresses):
        lines.append(f'node {{ id: {i} address: "{a}" }}')
    for a, b in torus_edges():
        lines.append(f"edge {{ from: {a} to: {b} }}")
    lines.append("weights: METROPOLIS_HASTINGS")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def free_base_port(n, rng):
    """A base port with n consecutive free ports on 127.0.0.1."""
    for _ in range(200):
        base = rng.randrange(20000, 60000 - n)
        ok = True
        for p in range(base, base + n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                s.close()
            if not ok:
                break
        if ok:
            return base
    raise Failed("no 8 consecutive free ports on 127.0.0.1")


def fmnist_subset(cache, train_examples, test_examples):
    """Uncompressed IDX files of the first train/test examples of Fashion-MNIST (fast to load)."""
    out = os.path.join(cache, f"fmnist-{train_examples}-{test_examples}")
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte"]
    if all(os.path.exists(os.path.join(out, n)) for n in names):
        return out
    if not os.path.exists(os.path.join(FMNIST, names[0] + ".gz")):
        raise Skipped(f"Fashion-MNIST is not installed in {FMNIST}")
    tmp = out + f".tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    for name in names:
        count = train_examples if name.startswith("train") else test_examples
        with gzip.open(os.path.join(FMNIST, name + ".gz"), "rb") as f:
            data = f.read()
        ndims = data[3]
        dims = list(struct.unpack(">" + "I" * ndims, data[4:4 + 4 * ndims]))
        row = int(np.prod(dims[1:])) if ndims > 1 else 1
        header = data[:4] + struct.pack(">" + "I" * ndims, count, *dims[1:])
        body = data[4 + 4 * ndims: 4 + 4 * ndims + count * row]
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(header + body)
    try:
        os.rename(tmp, out)
    except OSError:  # another run made it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def config_text(kind, data_dir, iterations, seed, fault_block, deadline_ms, heartbeat_ms,
                gossip_after=0, shards="IID", lr=None):
    """A small fast training config. kind: 'fmnist' (softmax) or 'lsq' (least squares).
    gossip_after = S > 0: SGD for S iterations, then the learning rate drops by 1e-30 (pure gossip:
    float(lr * 1e-60) is exactly 0 from iteration 2S, and 1e-31 * lr before that is far below
    float resolution), so the nodes start the gossip phase apart from each other."""
    if kind == "fmnist":
        model = "model { kind: SOFTMAX }"
        data = f'data {{ dataset: FASHION_MNIST path: "{data_dir}" }}'
        batch = 32
        lr = lr or 0.05
    else:
        model = "model { kind: LEAST_SQUARES }"
        data = "data { dataset: SYNTHETIC_LEAST_SQUARES num_examples: 4096 dim: 2000 noise: 0.5 test_examples: 256 }"
        batch = 8
        lr = lr or 0.02
    if gossip_after:
        opt = f"optimizer {{ kind: SGD lr: {lr} schedule: STEP step_size: {gossip_after} step_factor: 1e-30 }}"
    else:
        opt = f"optimizer {{ kind: SGD lr: {lr} schedule: COSINE min_lr: {lr / 10} }}"
    lines = [f"seed: {seed}", model, data, f"shard {{ scheme: {shards} }}", f"batch_size: {batch}", opt,
             f"iterations: {iterations}", "eval_every: 0", "metrics_every: 1", 'job_id: "faultsc"',
             f"timeouts {{ connect_ms: 30000 deadline_ms: {deadline_ms} heartbeat_ms: {heartbeat_ms} }}"]
    if fault_block:
        lines.append(fault_block)
    return "\n".join(lines) + "\n"


def gossipd_supports_fault(gossipd, workdir):
    """True when gossipd knows the `fault { policy }` config block (issue 8, carry-on)."""
    cfg = os.path.join(workdir, "probe.pbtxt")
    with open(cfg, "w") as f:
        f.write("batch_size: 1\niterations: 1\nfault { policy: CARRY_ON }\n")
    p = subprocess.run([gossipd, "run", os.path.join(workdir, "no-such-topology.pbtxt"), "--node", "0",
                        "--config", cfg, "--insecure"], capture_output=True, text=True, timeout=60)
    return 'named "fault"' not in p.stderr


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- metrics files

class MetricsFile:
    """Reads one node incarnation's JSON lines as they are written (a partial last line waits)."""

    def __init__(self, path, node, incarnation):
        self.path, self.node, self.incarnation = path, node, incarnation
        self.offset, self.partial = 0, b""
        self.lines = []
        self.iteration = -1  # latest completed iteration seen in an "iter" line
        self.bad = []

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        data = self.partial + data
        parts = data.split(b"\n")
        self.partial = parts.pop()
        for raw in parts:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                self.bad.append(raw[:200])
                continue
            self.lines.append(obj)
            if obj.get("type") == "iter":
                self.iteration = max(self.iteration, int(obj.get("iteration", -1)))

    def of_type(self, t):
        return [o for o in self.lines if o.get("type") == t]

    def events(self, name):
        return [o for o in self.lines if o.get("type") == "event" and o.get("event") == name]


def line_ms(obj):
    v = obj.get("unix_ms", obj.get("wall_ms"))
    return None if v is None else int(v)


def parse_row(text):
    row = {}
    for item in text.split(","):
        if not item:
            continue
        j, w = item.split(":")
        row[int(j)] = float(w)
    return row


# ---------------------------------------------------------------- the cluster

class Cluster:
    """N gossipd processes (and optional fault proxies), their files, and a hard deadline."""

    def __init__(self, args, workdir, name, config, insecure=True, netns=None, hard_timeout=120):
        self.args, self.workdir, self.name = args, workdir, name
        self.gossipd = os.path.join(args.build, "daemon", "gossipd")
        self.proxy_bin = os.path.join(args.build, "tests", "fault", "gossip-faultproxy")
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.netns = netns  # NetnsHarness or None
        self.insecure = insecure
        self.deadline = time.monotonic() + hard_timeout
        self.hard_timeout = hard_timeout
        if netns:
            addresses = [f"{netns.addr(i)}:7000" for i in range(N)]
        else:
            base = free_base_port(N, random.Random(os.getpid() * 7919 + int(time.time())))
            addresses = [f"127.0.0.1:{base + i}" for i in range(N)]
        self.topology = os.path.join(self.dir, "topology.pbtxt")
        write_topology(self.topology, addresses)
        self.config_path = os.path.join(self.dir, "train.pbtxt")
        with open(self.config_path, "w") as f:
            f.write(config + f'checkpoint {{ every: {args.checkpoint_every} dir: "{self.dir}/ckpt" keep: 50 }}\n')
        self.iterations = int([l for l in config.splitlines() if l.startswith("iterations:")][0].split()[1])
        self.certs = None
        if not insecure:
            self.certs = os.path.join(self.dir, "certs")
            subprocess.run([os.path.join(REPO, "scripts", "gen-certs.sh"), self.certs, str(N), "faultsc"],
                           check=True, capture_output=True)
        self.procs = {}      # node -> Popen of the current incarnation
        self.metrics = {}    # node -> [MetricsFile per incarnation]
        self.exit_codes = {}  # node -> [code per incarnation]
        self.proxies = []
        self.kills = []      # {"node", "unix_ms", "iteration"}
        self.restarts = []   # {"node", "unix_ms"}
        self.dump = os.path.join(self.dir, "final")

    def start(self, i, resume=False):
        inc = len(self.metrics.get(i, []))
        suffix = "" if inc == 0 else f".r{inc}"
        ndir = os.path.join(self.dir, f"node-{i}")
        os.makedirs(ndir, exist_ok=True)
        mpath = os.path.join(ndir, f"metrics{suffix}.jsonl")
        cmd = [self.gossipd, "run", self.topology, "--node", str(i), "--config", self.config_path,
               "--metrics", mpath, "--dump-params", self.dump]
        cmd += ["--insecure"] if self.insecure else ["--certs", self.certs]
        if resume:
            cmd.append("--resume")
        if self.netns:
            cmd += ["--listen", "127.0.0.1"]
            cmd = ["ip", "netns", "exec", self.netns.ns(i)] + cmd
        logf = open(os.path.join(ndir, f"log{suffix}.txt"), "wb")
        self.procs[i] = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.metrics.setdefault(i, []).append(MetricsFile(mpath, i, inc))
        self.exit_codes.setdefault(i, []).append(None)

    def start_all(self):
        for i in range(N):
            self.start(i)

    def start_proxy(self, i, delay_ms, jitter_ms, seed):
        ns = self.netns.ns(i)
        cmd = ["ip", "netns", "exec", ns, self.proxy_bin, "--listen", f"{self.netns.addr(i)}:7000",
               "--target", "127.0.0.1:7000", "--control", "127.0.0.1:18000",
               "--delay-ms", str(delay_ms), "--jitter-ms", str(jitter_ms), "--seed", str(seed)]
        logf = open(os.path.join(self.dir, f"proxy-{i}.txt"), "wb")
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.proxies.append(p)
        path = os.path.join(self.dir, f"proxy-{i}.txt")
        for _ in range(100):
            with open(path) as f:
                if "listening" in f.read():
                    return
            if p.poll() is not None:
                break
            time.sleep(0.05)
        with open(path) as f:
            raise Failed(f"fault proxy of node {i} did not start: {f.read().strip()}")

    def current(self, i):
        return self.metrics[i][-1]

    def poll(self):
        for i, p in self.procs.items():
            self.current(i).poll()
            if p is not None and p.poll() is not None and self.exit_codes[i][-1] is None:
                self.exit_codes[i][-1] = p.returncode
                self.current(i).poll()

    def running(self):
        return [i for i, p in self.procs.items() if p is not None and p.poll() is None]

    def wait_until(self, cond, what):
        """Polls until cond() holds; fails at the hard deadline or when every node has exited."""
        while True:
            self.poll()
            if cond():
                return
            if not self.running():
                raise Failed(f"every node exited before {what} (exit codes {self.codes_text()})")
            if time.monotonic() > self.deadline:
                raise Failed(f"hard timeout ({self.hard_timeout} s) waiting for {what}: hang")
            time.sleep(0.02)

    def sleep(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.poll()
            time.sleep(0.02)

    def kill(self, i):
        p = self.procs[i]
        it = self.current(i).iteration
        ms = now_ms()
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        self.poll()
        self.kills.append({"node": i, "unix_ms": ms, "iteration": it})
        log(f"SIGKILL node {i} at its iteration {it}")

    def restart(self, i):
        ms = now_ms()
        self.start(i, resume=True)
        self.restarts.append({"node": i, "unix_ms": ms})
        log(f"restarted node {i} with --resume")

    def wait_all(self):
        """Waits for every process; on the hard deadline kills everything and fails (a hang)."""
        while self.running():
            self.poll()
            if time.monotonic() > self.deadline:
                hung = self.running()
                its = {i: self.current(i).iteration for i in hung}
                self.kill_everything()
                raise Failed(f"hang: nodes {hung} still running at the hard timeout of {self.hard_timeout} s "
                             f"(their last logged iterations {its}); all killed")
            time.sleep(0.05)
        self.poll()
        for m in self.metrics.values():
            for f in m:
                f.poll()

    def kill_everything(self):
        for p in list(self.procs.values()) + self.proxies:
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass

    def codes_text(self):
        return ", ".join(f"{i}:{'/'.join(str(c) for c in cs)}" for i, cs in sorted(self.exit_codes.items()))

    def log_tail(self, i, lines=6):
        out = []
        ndir = os.path.join(self.dir, f"node-{i}")
        for name in sorted(os.listdir(ndir)):
            if name.startswith("log"):
                with open(os.path.join(ndir, name), errors="replace") as f:
                    tail = f.read().splitlines()[-lines:]
                out.append(f"  node {i} {name}: " + "\n    ".join(tail))
        return "\n".join(out)

    def final_params(self, i):
        path = os.path.join(self.dump, f"node_{i}.f32")
        if not os.path.exists(path):
            raise Failed(f"node {i}: no final parameters at {path}")
        return np.fromfile(path, dtype="<f4").astype(np.float64)

    def final_accuracy(self, i):
        evals = [o for o in self.current(i).of_type("eval") if int(o["iteration"]) == self.iterations]
        if not evals:
            raise Failed(f"node {i}: no final eval line at iteration {self.iterations}")
        return float(evals[-1]["test_accuracy"])

    def checkpoint_params(self, i, iteration):
        path = os.path.join(self.dir, "ckpt", f"node-{i}", f"ckpt-{iteration:012d}.bin")
        if not os.path.exists(path):
            raise Failed(f"node {i}: no checkpoint at iteration {iteration} ({path})")
        return read_checkpoint_params(path)


def read_checkpoint_params(path):
    """Parameters of a gossipd checkpoint (format in docs/daemon.md, "Checkpoints")."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:8] != b"GSPCKPT\0":
        raise Failed(f"{path}: not a checkpoint")
    (version,) = struct.unpack_from("<I", b, 8)
    iteration, p, s = struct.unpack_from("<QQQ", b, 24)
    off = 48
    # topology and config fingerprints (and, from version 2, the run id), length-prefixed
    for _ in range(3 if version >= 2 else 2):
        (length,) = struct.unpack_from("<I", b, off)
        off += 4 + length
    off += 56  # sampler state
    return np.frombuffer(b, dtype="<f4", count=p, offset=off).astype(np.float64)


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


def check_mixing(c, rejoined=(), cut_edges=None, asymmetric=None):
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
    second one on the same edge, or any other asymmetry, fails."""
    incs = []  # [node, incarnation, killed, [(iteration, row)], L (killed: iteration in progress)]
    for i, files in c.metrics.items():
        for k, f in enumerate(files):
            rows = [(int(o["iteration"]), parse_row(o["row"])) for o in f.of_type("weights")]
            if not rows:
                raise Failed(f"node {i} (incarnation {k}) logged no weights lines: gossipd does not log W(t) "
                             "(issue 8 carry-on is not built into this gossipd?)")
            rows.sort(key=lambda r: r[0])
            killed = c.exit_codes[i][k] is not None and c.exit_codes[i][k] < 0
            incs.append((i, k, killed, rows, max(f.iteration, 0) if killed else c.iterations))
    for i, k, _, rows, _ in incs:
        if k == 0 and rows[0][0] != 0:
            raise Failed(f"node {i}: first weights line at iteration {rows[0][0]}, expected 0")

    def start(inc):
        """First iteration of this incarnation in the mixing: a restarted node may log rows (alone)
        from its checkpoint's iteration, before the iteration its previous incarnation died in."""
        prev = [o for o in incs if o[0] == inc[0] and o[1] == inc[1] - 1]
        return max(inc[3][0][0], prev[0][4] + 1) if prev and prev[0][2] else inc[3][0][0]

    def span(inc):
        """Iterations [first, last] in which this incarnation applied its rows."""
        later = [start(o) for o in incs if o[0] == inc[0] and o[1] > inc[1]]
        last = min([c.iterations - 1] + [t - 1 for t in later])
        if inc[2]:
            last = min(last, inc[4])  # it was in iteration L when killed
        return start(inc), last

    for inc in incs:  # rows of a restarted node from before it rejoined the timeline: alone
        for t, row in inc[3]:
            if t < start(inc) and set(row) != {inc[0]}:
                raise Failed(f"restarted node {inc[0]} mixes with {sorted(set(row) - {inc[0]})} at iteration {t}, "
                             f"before the iteration its previous incarnation died in")

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

    breakpoints = {t for inc in incs for t, _ in inc[3]} | {start(inc) for inc in incs}
    for inc in incs:
        if inc[2]:
            u = last_use[(inc[0], inc[1])]
            breakpoints |= {max(u, 0), u + 1, inc[4] + 1}
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
        settled = (breakpoints[n + 1] if n + 1 < len(breakpoints) else c.iterations) - t >= MH_SETTLE
        # The current incarnation of each node at t: the newest one whose first row is at or before t.
        current = {}
        for inc in incs:
            if start(inc) <= t:
                if inc[0] not in current or inc[1] > current[inc[0]][1]:
                    current[inc[0]] = inc
        rows = {i: row_at(inc, t) for i, inc in current.items()}
        members = {i for i, inc in current.items() if not inc[2] or t < last_use[(inc[0], inc[1])]}
        dying = {i for i, inc in current.items() if inc[2] and t == last_use[(inc[0], inc[1])]}
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
                # in force for fewer than MH_SETTLE iterations may be a transition (a dropped edge's
                # weight moved to the diagonals for the iteration before the new degrees apply).
                mh = 1.0 / (1 + max(len(row) - 1, len(rows[j]) - 1))
                if settled and abs(w - mh) > TOL:
                    raise Failed(f"iteration {t}: W[{i}][{j}] = {w!r} is not the Metropolis-Hastings weight "
                                 f"1/(1 + max({len(row) - 1}, {len(rows[j]) - 1})) = {mh!r} of the current graph "
                                 f"(and this W stays in force for {MH_SETTLE} or more iterations)")
        checked += 1
    # After the drop, no surviving row lists a dead node (unless it came back).
    last = c.iterations - 1
    dead = {k["node"] for k in c.kills} - set(rejoined)
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
                       deadline_ms, 200)


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
    iterations = 3000
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


def netns_setup(args):
    h = NetnsHarness(f"gfs{os.getpid() % 100000}")
    h.check()
    h.run("up", str(N))
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

    def __init__(self, iterations):
        self.iterations = iterations
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
    killed between its verdicts (one neighbour used its last parameters, the others did not), a
    second death re-weighted in two steps, a correct rejoin (also one where the restarted node
    trained alone from its older checkpoint first). Caught: one end dropping a iteration
    late (using parameters the dead node never sent), a row summing to 1 + 1e-9, a survivor that
    never drops the dead node, W_ij != W_ji, symmetric doubly stochastic weights that are not
    Metropolis-Hastings, a transitional W kept 10 iterations, a node without weights lines, a late
    re-admission."""
    full = torus_edges()
    survivors = [i for i in range(N) if i != 0]
    without0 = [e for e in full if 0 not in e]

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
    return None, {"detail": "checker self-test: 5 good runs accepted, 8 bad ones caught"}


SCENARIOS = {
    "selftest": scenario_selftest,
    "failstop": scenario_failstop,
    "undisturbed": scenario_undisturbed,
    "kill1": lambda a, w, r: scenario_kill(a, w, r, 1),
    "kill2": lambda a, w, r: scenario_kill(a, w, r, 2),
    "gossip": scenario_gossip,
    "rejoin": scenario_rejoin,
    "netns-delay-loss": scenario_netns_delay_loss,
    "netns-partition": scenario_netns_partition,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="build directory with gossipd")
    ap.add_argument("--seed", type=int, default=1, help="seeds the fault plan (which nodes, which iterations)")
    ap.add_argument("--train-seed", type=int, default=1, help="seed of the training config")
    ap.add_argument("--timeout", type=int, default=150, help="hard timeout of one run, seconds")
    ap.add_argument("--workdir", help="keep files here (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory even when passing")
    ap.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "gossip-fault-scenarios-cache"),
                    help="Fashion-MNIST subset and undisturbed-run results")
    ap.add_argument("--rejoin-limit-ms", type=int, default=8000,
                    help="rejoin: restart -> back in the neighbours' rows, at most (default 8000)")
    ap.add_argument("--summary-json", help="append the run's summary as one JSON line to this file")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    args.checkpoint_every = 100
    gossipd = os.path.join(args.build, "daemon", "gossipd")
    if args.scenario != "selftest" and not os.access(gossipd, os.X_OK):
        print(f"fault_scenarios: no gossipd at {gossipd} (build it: ninja -C {args.build} gossipd)", file=sys.stderr)
        return EXIT_USAGE
    os.makedirs(args.cache_dir, exist_ok=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix=f"gossip-fault-{args.scenario}-")
    os.makedirs(workdir, exist_ok=True)
    args.fault_supported = args.scenario != "selftest" and gossipd_supports_fault(gossipd, workdir)
    rng = random.Random(f"{args.scenario}/{args.seed}")
    started = time.monotonic()
    log(f"scenario {args.scenario} seed {args.seed} in {workdir} "
        f"(gossipd {'with' if args.fault_supported else 'WITHOUT'} fault policies)")
    result, status, reason = {}, "PASS", ""
    try:
        _, result = SCENARIOS[args.scenario](args, workdir, rng)
    except Skipped as e:
        status, reason = "SKIP", str(e)
    except Failed as e:
        status, reason = "FAIL", str(e)
    wall = time.monotonic() - started

    def fmt(v):
        return "-" if v is None else str(v)
    line = (f"SUMMARY scenario={args.scenario} seed={args.seed} result={status} "
            f"detect_ms={fmt(result.get('detect_ms'))} reweight_ms={fmt(result.get('reweight_ms'))} "
            f"rejoin_ms={fmt(result.get('rejoin_ms'))} w_checks={fmt(result.get('w_checks'))} wall_s={wall:.1f}")
    if result.get("detail"):
        log(result["detail"])
    if reason:
        print(f"{status}: {args.scenario}: {reason}", file=sys.stderr if status == "FAIL" else sys.stdout, flush=True)
    print(line, flush=True)
    if args.summary_json:
        with open(args.summary_json, "a") as f:
            f.write(json.dumps({"scenario": args.scenario, "seed": args.seed, "result": status, "reason": reason[:500],
                                "wall_s": round(wall, 1), **{k: v for k, v in result.items()}}) + "\n")
    if status == "PASS" and not args.keep and not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    elif status != "SKIP":
        log(f"files kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"PASS": EXIT_PASS, "FAIL": EXIT_FAIL, "SKIP": EXIT_SKIP}[status]


if __name__ == "__main__":
    sys.exit(main())
