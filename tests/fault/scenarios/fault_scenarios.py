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

  * netns-join: 9 namespaces, standby node 8 joins mid-run, node 4 leaves (SIGTERM); join time
    against 2 x deadline + model bytes / link rate, the others' largest gap between iterations
    around the join, the `left` drops after the SIGTERM (join_ms, join_bound_ms, max_stall_ms,
    leave_detect_ms in the SUMMARY line).

Scenarios: failstop, undisturbed, kill1, kill2, gossip, rejoin, netns-delay-loss, netns-partition,
netns-join.
Exit codes: 0 passed, 1 failed (the reasons are printed), 2 bad usage, 77 skipped (netns
scenarios where namespaces cannot be created).

    fault_scenarios.py kill1 --build build-fault [--seed 3] [--keep] [--summary-json F]
"""

# The driver's modules are in faultlib/ (its __init__.py says which holds what); this file is the
# command line: the scenario table and main().

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

from faultlib.common import EXIT_FAIL, EXIT_PASS, EXIT_SKIP, EXIT_USAGE, REPO, Failed, Skipped, log
from faultlib.join import scenario_netns_join
from faultlib.netns import scenario_netns_delay_loss, scenario_netns_partition
from faultlib.scenarios import (scenario_failstop, scenario_gossip, scenario_kill, scenario_rejoin,
                                scenario_undisturbed)
from faultlib.selftest import scenario_selftest
from faultlib.workload import gossipd_supports_fault


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
    "netns-join": scenario_netns_join,
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
    ap.add_argument("--config-extra", default="",
                    help="training-config text appended to every run's config, e.g. local steps and "
                         "compression: 'local_steps: 5 compression { kind: INT8 }'")
    ap.add_argument("--iterations", type=int, help="netns-join: iterations of the run (default 1500)")
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
    line += "".join(f" {k}={fmt(result[k])}" for k in ("join_ms", "join_bound_ms", "max_stall_ms", "leave_detect_ms")
                    if k in result)
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
