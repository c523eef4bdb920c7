#!/usr/bin/python3
"""What attaching a trainer costs gossipd per iteration, against gossipd's own trainer.

Runs the same D-PSGD job three times with `gossipd launch` on loopback, one after the other:
  own     gossipd trains its MLP itself;
  update  every node serves an external trainer (tests/daemon/attach_trainer: the same SGD step,
          the same model and data, driven through the attach socket and shared memory) in an
          update session: the trainer computes at the shared buffer and hands u_t to the daemon;
  plain   the same in a plain session: the trainer keeps its own x, copies x_t in and applies
          u_t to the mixed values itself.
All produce the same parameters bit for bit (daemon_attach_integration_tests), so the difference
in wall time per iteration is what the attach path adds.

    bench/attach_overhead.py [--build build] [--hidden 4800,4400] [--nodes 2] [--iterations 12]

Per-iteration wall time is the median of the differences between consecutive `iter` lines of
node 0's metrics (metrics_every 1), after the first two iterations.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def per_iteration_s(metrics_path, skip):
    walls = []
    with open(metrics_path) as f:
        for line in f:
            m = json.loads(line)
            if m.get("type") == "iter":
                walls.append(m["wall_ms"])
    steps = [(b - a) / 1000.0 for a, b in zip(walls, walls[1:])][skip:]
    if not steps:
        sys.exit(f"attach_overhead: too few iterations in {metrics_path}")
    return statistics.median(steps)


def run(args, work, attach, plain=False):
    topo = os.path.join(work, "topology.pbtxt")
    with open(topo, "w") as f:
        kind = "RING" if args.nodes >= 3 else "COMPLETE"  # two nodes: the single edge
        port = args.port + (0 if not attach else 100 if plain else 50)
        f.write(f'name: "overhead"\ngenerator {{ kind: {kind} nodes: {args.nodes} '
                f'host: "127.0.0.1" base_port: {port} }}\n')
    cfg = os.path.join(work, "train.pbtxt")
    with open(cfg, "w") as f:
        hidden = " ".join(f"hidden: {h}" for h in args.hidden.split(","))
        f.write(f"seed: 5\nmodel {{ kind: MLP {hidden} }}\ndata {{ dataset: FASHION_MNIST }}\n"
                f"batch_size: {args.batch}\noptimizer {{ kind: MOMENTUM lr: 0.01 momentum: 0.9 }}\n"
                f"iterations: {args.iterations}\neval_every: 0\neval_examples: 100\n"
                "metrics_every: 1\ncheckpoint { every: 0 }\n"
                "timeouts { connect_ms: 120000 deadline_ms: 120000 }\n")
    run_dir = os.path.join(work, "own" if not attach else "plain" if plain else "update")
    cmd = [args.gossipd, "launch", topo, "--config", cfg, "--insecure", "--workdir", run_dir,
           "--set", f"checkpoint.dir={run_dir}/ckpt", "--progress-interval", "600"]
    if attach:
        cmd += ["--attach-dir", os.path.join(work, "sock"), "--trainer",
                f"{args.trainer} --config {cfg} --node $GOSSIP_NODE_ID --nodes $GOSSIP_NUM_NODES"
                + (" --plain" if plain else "")]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"attach_overhead: gossipd launch ({os.path.basename(run_dir)}) exited "
                 f"{out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return per_iteration_s(os.path.join(run_dir, "node-0", "metrics.jsonl"), args.skip)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--hidden", default="4800,4400", help="MLP hidden widths (784-in, 10-out)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--skip", type=int, default=2, help="first iteration steps left out")
    ap.add_argument("--port", type=int, default=26100)
    args = ap.parse_args()
    args.gossipd = os.path.join(args.build, "daemon", "gossipd")
    args.trainer = os.path.join(args.build, "tests", "daemon", "attach_trainer")
    widths = [784] + [int(h) for h in args.hidden.split(",")] + [10]
    params = sum(a * b + b for a, b in zip(widths, widths[1:]))
    with tempfile.TemporaryDirectory(prefix="attach_overhead_") as work:
        own = run(args, work, attach=False)
        update = run(args, work, attach=True)
        plain = run(args, work, attach=True, plain=True)
    print(f"MLP {args.hidden} ({params / 1e6:.1f}M parameters, {4 * params / 1e6:.0f} MB), "
          f"{args.nodes} nodes on a ring over loopback, batch {args.batch}, "
          f"median of iterations {args.skip + 1}..{args.iterations - 1}")
    print(f"  {'gossipd own trainer':34s} {own:8.3f} s/iteration")
    for name, value in (("attached, update session", update), ("attached, plain session", plain)):
        print(f"  {name:34s} {value:8.3f} s/iteration  {value - own:+.3f} s "
              f"({100 * (value - own) / own:+.1f}%)")


if __name__ == "__main__":
    main()
