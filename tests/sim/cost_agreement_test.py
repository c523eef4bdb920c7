#!/usr/bin/python3
"""gossip-topo analyze and gossip-sim compare price one iteration alike.

Both tools price communication with topology/comm_cost.h. For the same topology file, message size
and link, the seconds per iteration that `gossip-topo analyze --json` prints (dpsgd_seconds,
ps_seconds, allreduce_seconds) must be the ones `gossip-sim compare --json` prints as comm_s of its
dpsgd, cpsgd-ps and cpsgd-allreduce series, to every digit gossip-sim prints (%.10g); and both must
be the closed form of Lian et al. Table 1 computed here from the topology's Δ.

Run by CTest with GOSSIP_SIM, GOSSIP_TOPO and GOSSIP_SOURCE_DIR set; exits non-zero on the first
failure.
"""
import json
import os
import subprocess
import sys

SIM = os.environ["GOSSIP_SIM"]
TOPO = os.environ["GOSSIP_TOPO"]
SOURCE = os.environ["GOSSIP_SOURCE_DIR"]


def run(*cmd):
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    return p.stdout


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


# (file, nodes, Δ of its W(t)): undirected ring, 2D torus, directed exponential graph and the
# time-varying one-peer exponential graph (one peer per iteration).
TOPOLOGIES = [("ring8.pbtxt", 8, 2), ("torus4x4.pbtxt", 16, 4), ("exponential16.pbtxt", 16, 4),
              ("one_peer16.pbtxt", 16, 1)]
# (bandwidth, bits/s, latency, seconds, parameters): message bytes are 4 per float32 parameter.
# Both tools read units with common/units.h: bits or bytes per second, either spelling.
LINKS = [("1Gbps", 1e9, "1ms", 1e-3, 1_000_000), ("100Mbit/s", 1e8, "50us", 50e-6, 25_000_000),
         ("12.5MB/s", 1e8, "0.25ms", 250e-6, 3_000_000)]

checked = 0
for name, nodes, delta in TOPOLOGIES:
    path = os.path.join(SOURCE, "examples", name)
    for bandwidth, bps, latency, alpha, params in LINKS:
        what = f"{name}, {bandwidth}, {latency}, {params} parameters"
        message_bytes = 4 * params
        topo = json.loads(run(TOPO, "analyze", path, "--json", "--model-bytes", str(message_bytes),
                              "--bandwidth", bandwidth, "--latency", latency))
        sim = json.loads(run(SIM, "compare", "--topology", path, "--nodes", str(nodes),
                             "--problem", "least_squares", "--dim", "4", "--train-examples", "256",
                             "--test-examples", "64", "--batch", "4", "--iterations", "2",
                             "--eval-every", "1", "--compute-time", "10ms", "--model-params",
                             str(params), "--bandwidth", bandwidth, "--latency", latency,
                             "--json", "--quiet"))
        check(sim["config"]["message_bytes"] == message_bytes, f"{what}: sim message bytes")
        comm = {s["algorithm"]: s["comm_s"] for s in sim["series"]}
        check(set(comm) == {"dpsgd", "cpsgd-ps", "cpsgd-allreduce"}, f"{what}: series {comm}")
        check(topo["max_degree"] == delta, f"{what}: gossip-topo Δ {topo['max_degree']} != {delta}")
        B = bps / 8
        closed = {"dpsgd": alpha + delta * message_bytes / B,
                  "cpsgd-ps": 2 * (alpha + nodes * message_bytes / B),
                  "cpsgd-allreduce": 2 * (nodes - 1) * alpha
                  + 2 * ((nodes - 1) / nodes) * message_bytes / B}
        for algorithm, key in (("dpsgd", "dpsgd_seconds"), ("cpsgd-ps", "ps_seconds"),
                               ("cpsgd-allreduce", "allreduce_seconds")):
            # gossip-sim prints %.10g; gossip-topo prints 17 digits. Same model, same inputs: the
            # same double, so the same 10 digits.
            printed_topo = "%.10g" % topo[key]
            printed_sim = "%.10g" % comm[algorithm]
            check(printed_topo == printed_sim,
                  f"{what}: {algorithm}: gossip-topo {key} {topo[key]!r} vs gossip-sim comm_s "
                  f"{comm[algorithm]!r}")
            check(abs(topo[key] - closed[algorithm]) <= 1e-12 * closed[algorithm],
                  f"{what}: {algorithm}: {topo[key]!r} is not the closed form {closed[algorithm]!r}")
            checked += 1

print(f"OK: {checked} predicted seconds per iteration agree")
