"""Cluster: the N gossipd processes of one run (and the fault proxies in front of them in the
netns scenarios), their topology, config, certificates, metrics files and exit codes, kills and
restarts, and a hard deadline (a hang is a failure); and the parameters in a checkpoint."""

import os
import random
import signal
import struct
import subprocess
import time

import numpy as np

from .common import N, REPO, Failed, local_steps, log, now_ms
from .metrics import MetricsFile
from .workload import free_base_port, write_topology


# ---------------------------------------------------------------- the cluster

class Cluster:
    """N gossipd processes (and optional fault proxies), their files, and a hard deadline."""

    def __init__(self, args, workdir, name, config, insecure=True, netns=None, hard_timeout=120,
                 n=N, edges=None, proxied=True):
        """n nodes on the undirected `edges` (default: the 2 x 4 torus). In namespaces, a node
        listens on 127.0.0.1 behind its fault proxy (proxied) or on its namespace's address."""
        self.n, self.proxied = n, proxied
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
            addresses = [f"{netns.addr(i)}:7000" for i in range(n)]
        else:
            base = free_base_port(n, random.Random(os.getpid() * 7919 + int(time.time())))
            addresses = [f"127.0.0.1:{base + i}" for i in range(n)]
        self.topology = os.path.join(self.dir, "topology.pbtxt")
        write_topology(self.topology, addresses, edges)
        self.config_path = os.path.join(self.dir, "train.pbtxt")
        with open(self.config_path, "w") as f:
            f.write(config + f'checkpoint {{ every: {args.checkpoint_every} dir: "{self.dir}/ckpt" keep: 50 }}\n')
        self.iterations = int([l for l in config.splitlines() if l.startswith("iterations:")][0].split()[1])
        self.local_steps = local_steps(config)
        self.certs = None
        if not insecure:
            self.certs = os.path.join(self.dir, "certs")
            subprocess.run([os.path.join(REPO, "scripts", "gen-certs.sh"), self.certs, str(n), "faultsc"],
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
            cmd += ["--listen", "127.0.0.1" if self.proxied else self.netns.addr(i)]
            cmd = ["ip", "netns", "exec", self.netns.ns(i)] + cmd
        logf = open(os.path.join(ndir, f"log{suffix}.txt"), "wb")
        self.procs[i] = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.metrics.setdefault(i, []).append(MetricsFile(mpath, i, inc))
        self.exit_codes.setdefault(i, []).append(None)

    def start_all(self):
        for i in range(self.n):
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
