"""What a run is made of: the 2 x 4 torus topology file, a block of free loopback ports, the
Fashion-MNIST subset (uncompressed IDX files in the cache), the training configs, whether gossipd
knows the `fault { policy }` block, and the SHA-256 of a file (the reference-run cache key)."""

import gzip
import hashlib
import os
import shutil
import socket
import struct
import subprocess

import numpy as np

from .common import COLS, FMNIST, ROWS, Failed, Skipped


# ---------------------------------------------------------------- topology, data, configs

def torus_edges(rows=ROWS, cols=COLS):
    """Undirected edges of the rows x cols torus, node r * cols + c (rows = 2: one vertical edge)."""
    edges = set()
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            for j in (r * cols + (c + 1) % cols, ((r + 1) % rows) * cols + c):
                if i != j:
                    edges.add((min(i, j), max(i, j)))
    return sorted(edges)


def neighbours(i):
    return sorted({b for a, b in torus_edges() if a == i} | {a for a, b in torus_edges() if b == i})


def write_topology(path, addresses, edges=None):
    """The topology file: the 2 x 4 torus, or the undirected `edges` given."""
    lines = [f'# {"2 x 4 torus (the 3-cube)" if edges is None else "undirected graph"}, written by '
             'tests/fault/scenarios/fault_scenarios.py', 'name: "faultsc"']
    for i, a in enumerate(addresses):
        lines.append(f'node {{ id: {i} address: "{a}" }}')
    for a, b in (torus_edges() if edges is None else edges):
        lines.append(f"edge {{ from: {a} to: {b} }}")
    lines.append("weights: METROPOLIS_HASTINGS")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def free_base_port(n, rng):
    """A base port with n consecutive free ports on 127.0.0.1, outside the kernel's ephemeral
    range (any outgoing connection on the machine may take one of those before gossipd binds)."""
    lo, hi = 32768, 60999
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        pass
    ranges = [(a, b) for a, b in ((20000, min(lo, 60000)), (max(hi + 1, 20000), 60000)) if b - a > n]
    ranges = ranges or [(20000, 60000)]
    for _ in range(200):
        a, b = rng.choice(ranges)
        base = rng.randrange(a, b - n)
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
