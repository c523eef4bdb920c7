#!/usr/bin/python3
"""A small CNN on Fashion-MNIST trained two ways on one machine, printed side by side:

  D-PSGD  8 PyTorch trainers, each attached to its own gossipd (`gossipd launch --attach-dir`),
          gossiping through a topology file (default: the one-peer exponential graph), or with
          --topology allreduce averaging through gossipd's Gloo ring (DiLoCo with --local-steps);
  DDP     8 PyTorch processes with DistributedDataParallel on the gloo backend.

Same model, initialisation, data shards, batch order, optimizer and epochs on both sides; the
D-PSGD figure is the test accuracy of the average of the 8 final models.

    /usr/bin/python3 examples/torch/fmnist_cnn.py [--epochs 10] [--batch 32] [--nodes 8]
        [--gossipd PATH] [--local-steps H] [--compression none|bf16|int8]
        [--outer none|sgd|nesterov] [--outer-lr LR] [--schedule step|cosine] [--decay-at F] [--seed S]

With --local-steps H each trainer takes H steps of its own between rounds (gossipd's
`local_steps`; the trainer's GossipOptimizer learns H from its daemon), with the round's messages
compressed by gossipd (--compression) and an outer step on the pseudo-gradient (--outer). The
bytes each gossipd node sent (its metrics) are printed beside what DDP's allreduce of every
step's gradients moves per node.

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist). The trainer side is
the pure-Python gossip_sgd package (python/), imported from the source tree.
"""
import os

# One BLAS thread per process on both sides (8 trainers or 8 DDP ranks share the machine):
# OpenBLAS's own threads, unbounded by torch.set_num_threads, spin against each other otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import gzip
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def load(kind):
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(y.astype(np.int64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(64 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_model(seed):
    torch.manual_seed(seed)  # the same x_0 on every node
    return Net()


def shard(rank, nodes, seed, n):
    """Node `rank`'s example indices: a fixed permutation, dealt round-robin."""
    perm = np.random.default_rng(seed).permutation(n)
    return perm[rank::nodes]


def batches(indices, batch, epoch, rank, seed):
    """The batches of one epoch: the shard reshuffled by (seed, epoch, rank); tail dropped."""
    order = np.random.default_rng([seed, epoch, rank]).permutation(indices)
    for k in range(len(order) // batch):
        yield torch.from_numpy(order[k * batch:(k + 1) * batch])


def steps_per_epoch(args, n_train):
    return min(len(shard(r, args.nodes, args.seed, n_train)) for r in range(args.nodes)) // args.batch


def lr_at(args, step, total):
    """A linear warm-up of one epoch's worth of steps, then (--schedule step) constant and x0.1
    from --decay-at, or (--schedule cosine) a half cosine from --lr down to 0 at the last step."""
    warm = total // args.epochs
    if step < warm:
        return args.lr * (step + 1) / warm
    if args.schedule == "cosine":
        return args.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / (total - warm)))
    return args.lr * (0.1 if step >= args.decay_at * total else 1.0)


@torch.no_grad()
def accuracy(model, x, y):
    model.eval()
    correct = sum((model(x[k:k + 2000]).argmax(1) == y[k:k + 2000]).sum().item()
                  for k in range(0, len(x), 2000))
    model.train()
    return correct / len(x)


def train(model, step_fn, args, rank, x, y):
    """The local training loop both sides share; step_fn(opt) ends each iteration."""
    if args.inner == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.wd)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.wd)
    mine = shard(rank, args.nodes, args.seed, len(x))
    per_epoch = steps_per_epoch(args, len(x))
    total = per_epoch * args.epochs
    step = 0
    for epoch in range(args.epochs):
        for k, idx in enumerate(batches(mine, args.batch, epoch, rank, args.seed)):
            if k == per_epoch:
                break
            for g in opt.param_groups:
                g["lr"] = lr_at(args, step, total)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            step_fn(opt)
            step += 1
    return step


# ---------------------------------------------------------------- D-PSGD through gossipd


def gossip_trainer(args):
    """One node's trainer, started by `gossipd launch --trainer` with $GOSSIP_ATTACH_SOCKET."""
    from gossip_sgd import Client
    from gossip_sgd.torch_optim import GossipOptimizer

    torch.set_num_threads(1)
    x, y = load("train")
    model = make_model(args.seed)
    n = sum(q.numel() for q in model.parameters())
    client = Client(num_params=n, timeout=600)
    rank = client.node_id
    holder = {}

    def step_fn(opt):
        if "g" not in holder:
            holder["g"] = GossipOptimizer(opt, params=list(model.parameters()), client=client)
        holder["g"].step()

    train(model, step_fn, args, rank, x, y)
    client.close()
    torch.save(model.state_dict(), os.path.join(args.out, f"node_{rank}.pt"))


def write_topology(path, args):
    kinds = {"ring": "RING", "exponential": "EXPONENTIAL",
             "one_peer_exponential": "ONE_PEER_EXPONENTIAL", "allreduce": "RING"}
    with open(path, "w") as f:
        f.write(f'name: "fmnist-cnn"\ngenerator {{ kind: {kinds[args.topology]} '
                f'nodes: {args.nodes} host: "127.0.0.1" base_port: {args.port} }}\n')


def run_gossip(args, x_test, y_test):
    work = tempfile.mkdtemp(prefix="fmnist_cnn_gossip_")
    args.out = work
    topo = os.path.join(work, "topology.pbtxt")
    write_topology(topo, args)
    per_epoch = steps_per_epoch(args, 60000)
    cfg = os.path.join(work, "train.pbtxt")
    with open(cfg, "w") as f:
        # The trainer owns model, data and optimizer; gossipd owns the schedule of rounds (one
        # per H trainer steps), the mixing, the deadlines and the checkpoints of the mixed state.
        # An iteration is a round of H trainer steps: a metrics line every 100 trainer steps.
        f.write(f"seed: {args.seed}\niterations: {per_epoch * args.epochs // args.local_steps}\n"
                f"checkpoint {{ every: 0 dir: \"{work}/checkpoints\" }}\n"
                f"metrics_every: {max(1, 100 // args.local_steps)}\n"
                "timeouts { connect_ms: 300000 deadline_ms: 120000 heartbeat_ms: 500 }\n")
        if args.topology == "allreduce":
            f.write("algorithm: ALLREDUCE\n")
        if args.local_steps > 1 or args.compression != "none" or args.outer != "none":
            f.write(f"local_steps: {args.local_steps}\n"
                    f"compression {{ kind: {args.compression.upper()} }}\n"
                    f"outer {{ kind: {args.outer.upper()}"
                    + (f" lr: {args.outer_lr}" if args.outer_lr is not None else "")
                    + (f" momentum: {args.outer_momentum}" if args.outer_momentum is not None
                       else "") + " }\n")
    trainer = (f"{sys.executable} {os.path.abspath(__file__)} --trainer --out {work} "
               f"--epochs {args.epochs} --nodes {args.nodes} --batch {args.batch} "
               f"--lr {args.lr} --wd {args.wd} --seed {args.seed} --inner {args.inner} "
               f"--decay-at {args.decay_at} --schedule {args.schedule}")
    t0 = time.time()
    rc = subprocess.run([args.gossipd, "launch", topo, "--config", cfg, "--insecure",
                         "--workdir", os.path.join(work, "run"), "--attach-dir",
                         os.path.join(work, "sockets"), "--trainer", trainer,
                         "--progress-interval", "30"]).returncode
    seconds = time.time() - t0
    if rc != 0:
        sys.exit(f"fmnist_cnn: gossipd launch exited {rc} (logs in {work}/run)")
    sent = []
    for r in range(args.nodes):
        with open(os.path.join(work, "run", f"node-{r}", "metrics.jsonl")) as f:
            sent.append(sum(json.loads(line).get("bytes_sent", 0) for line in f
                            if '"type":"iter"' in line))
    args.sent_per_node = sum(sent) / len(sent)
    models = [torch.load(os.path.join(work, f"node_{r}.pt")) for r in range(args.nodes)]
    avg = make_model(args.seed)
    avg.load_state_dict({k: sum(m[k] for m in models) / args.nodes for k in models[0]})
    each = []
    for m in models:
        net = make_model(args.seed)
        net.load_state_dict(m)
        each.append(accuracy(net, x_test, y_test))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return accuracy(avg, x_test, y_test), min(each), max(each), seconds


# ---------------------------------------------------------------- DDP reference


def ddp_worker(rank, args, port, out):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.nodes)
    x, y = load("train")
    model = DDP(make_model(args.seed))
    train(model, lambda opt: opt.step(), args, rank, x, y)
    if rank == 0:
        torch.save(model.module.state_dict(), out)
    dist.destroy_process_group()


def run_ddp(args, x_test, y_test):
    import torch.multiprocessing as mp

    out = tempfile.mktemp(prefix="fmnist_cnn_ddp_", suffix=".pt")
    t0 = time.time()
    mp.spawn(ddp_worker, args=(args, args.port + 100, out), nprocs=args.nodes, join=True)
    seconds = time.time() - t0
    net = make_model(args.seed)
    net.load_state_dict(torch.load(out))
    os.remove(out)
    return accuracy(net, x_test, y_test), seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32, help="per node")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--wd", type=float, default=1e-4)
    ap.add_argument("--decay-at", type=float, default=0.75,
                    help="the share of the steps after which the lr is x0.1")
    ap.add_argument("--schedule", default="step", choices=["step", "cosine"],
                    help="the lr after the warm-up: step (x0.1 at --decay-at) or cosine (to 0)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--topology", default="one_peer_exponential",
                    choices=["ring", "exponential", "one_peer_exponential", "allreduce"],
                    help="the gossip graph, or allreduce: gossipd's Gloo ring allreduce "
                         "(algorithm ALLREDUCE; with --local-steps, DiLoCo)")
    ap.add_argument("--port", type=int, default=29400, help="first loopback port")
    ap.add_argument("--gossipd", default=os.path.join(ROOT, "build/daemon/gossipd"))
    ap.add_argument("--local-steps", type=int, default=1,
                    help="trainer steps per round (gossipd's local_steps)")
    ap.add_argument("--compression", default="none", choices=["none", "bf16", "int8"])
    ap.add_argument("--outer", default="none", choices=["none", "sgd", "nesterov"])
    ap.add_argument("--outer-lr", type=float,
                    help="the outer optimizer's lr (gossipd's outer.lr; default: SGD 1, Nesterov 0.7)")
    ap.add_argument("--outer-momentum", type=float,
                    help="the outer Nesterov momentum (gossipd's outer.momentum; default 0.9)")
    ap.add_argument("--inner", default="sgd", choices=["sgd", "adamw"],
                    help="every trainer's optimizer, both sides: SGD with momentum 0.9, or AdamW "
                         "(DiLoCo's inner optimizer; give it its own --lr, e.g. 0.001)")
    ap.add_argument("--only", choices=["gossip", "ddp"], help="run one side only")
    ap.add_argument("--keep", action="store_true", help="keep the gossip run's directory")
    ap.add_argument("--trainer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.local_steps < 1:
        ap.error("--local-steps must be >= 1")
    if args.trainer:
        return gossip_trainer(args)

    x_test, y_test = load("t10k")
    # DDP's allreduce of every step's gradients: 2 (n − 1)/n of the model's float32 bytes per node.
    n_params = sum(q.numel() for q in make_model(args.seed).parameters())
    steps = steps_per_epoch(args, 60000) * args.epochs
    ddp_sent = steps * 2 * (args.nodes - 1) / args.nodes * 4 * n_params
    rows = []
    if args.only != "ddp":
        acc, lo, hi, s = run_gossip(args, x_test, y_test)
        rounds = "" if args.local_steps == 1 else f", H={args.local_steps} {args.compression}"
        kind = "DiLoCo" if args.topology == "allreduce" and args.local_steps > 1 else "D-PSGD"
        rows.append((f"{kind} ({args.topology}{rounds}, gossipd --attach)", acc,
                     f"nodes {lo:.4f}..{hi:.4f}", s, args.sent_per_node))
    if args.only != "gossip":
        acc, s = run_ddp(args, x_test, y_test)
        rows.append(("DDP (gloo allreduce)", acc, "", s, ddp_sent))
    print(f"\nFashion-MNIST CNN, {args.nodes} nodes, {args.epochs} epochs, batch {args.batch}/node:")
    for name, acc, extra, s, sent in rows:
        print(f"  {name:52s} test accuracy {100 * acc:6.2f}%  {extra:22s} {s:7.1f} s  "
              f"{sent / 1e6:9.1f} MB sent per node")
    if len(rows) == 2:
        print(f"  difference D-PSGD - DDP: {100 * (rows[0][1] - rows[1][1]):+.2f} pp; "
              f"bytes {rows[1][4] / rows[0][4]:.0f}x fewer")


if __name__ == "__main__":
    main()
