#!/usr/bin/python3
"""gossip-sim end to end: subcommands, exit codes, CSV columns, JSON, parameter dumps, errors.

Run by CTest with GOSSIP_SIM pointing at the binary; exits non-zero on the first failure.
"""
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

SIM = os.environ["GOSSIP_SIM"]
SMALL = ["--problem", "least_squares", "--nodes", "8", "--iterations", "60", "--eval-every", "20",
         "--train-examples", "1024", "--test-examples", "256", "--dim", "8", "--batch", "8",
         "--compute-time", "10ms", "--quiet"]


def sim(*args, ok=True):
    p = subprocess.run([SIM, *args], capture_output=True, text=True, timeout=120)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: gossip-sim {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    if not ok and p.returncode == 0:
        sys.exit(f"FAIL: gossip-sim {' '.join(args)} should have failed")
    return p


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


with tempfile.TemporaryDirectory() as tmp:
    help_text = sim("--help").stdout
    check("run" in help_text and "compare" in help_text and "sweep" in help_text, "--help lists subcommands")
    check("--bandwidth" in sim("compare", "--help").stdout, "compare --help lists --bandwidth")

    out = os.path.join(tmp, "c.csv")
    p = sim("compare", *SMALL, "--topology", "ring,exponential", "--csv", out, "--target-loss", "0.5")
    check("speedup of dpsgd (ring) over cpsgd-allreduce" in p.stdout, "summary names the speedups")
    rows = list(csv.DictReader(open(out)))
    algos = {(r["algorithm"], r["topology"]) for r in rows}
    check(algos == {("cpsgd-ps", ""), ("cpsgd-allreduce", ""), ("dpsgd", "ring"), ("dpsgd", "exponential")},
          f"series in CSV: {algos}")
    check(len(rows) == 4 * 4, f"4 series x 4 points, got {len(rows)}")
    for r in rows:
        check(float(r["sim_time_s"]) >= 0 and math.isfinite(float(r["train_loss"])), "finite values")
        check(r["test_accuracy"] == "nan", "least squares has no accuracy")
    ring = [r for r in rows if r["topology"] == "ring"]
    check(float(ring[-1]["train_loss"]) < float(ring[0]["train_loss"]), "loss decreases")

    # scripts/plot_sim.py on that CSV: three PNGs, in a directory it creates.
    plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "plot_sim.py")
    prefix = os.path.join(tmp, "plots", "sub", "c")
    p = subprocess.run(["/usr/bin/python3", plot, out, "--out", prefix], capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 0, f"plot_sim.py exited {p.returncode}: {p.stderr}")
    for suffix in ("_loss_iter.png", "_loss_time.png", "_consensus.png"):
        with open(prefix + suffix, "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", f"{suffix} is a PNG")
    p = subprocess.run(["/usr/bin/python3", plot, os.path.join(tmp, "missing.csv"), "--out", prefix],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode != 0 and "plot_sim:" in p.stderr and "Traceback" not in p.stderr,
          f"plot_sim.py on a missing file: {p.returncode} {p.stderr!r}")

    j = json.loads(sim("compare", *SMALL, "--json").stdout)
    check({s["algorithm"] for s in j["series"]} == {"cpsgd-ps", "cpsgd-allreduce", "dpsgd"}, "JSON series")
    check(j["config"]["nodes"] == 8 and j["config"]["compute_s"] == 0.01, "JSON config")

    dump = os.path.join(tmp, "params")
    sim("run", *SMALL, "--algorithm", "dpsgd", "--topology", "exponential", "--dump-params", dump)
    files = sorted(os.listdir(dump))
    check(files == [f"node_{i}.f32" for i in range(8)], f"dump files {files}")
    check(all(os.path.getsize(os.path.join(dump, f)) == 4 * 9 for f in files), "9 float32 per node")

    # --threads: the same CSV and the same dumped bits with 1 and 3 threads (the compute time is
    # given, so even the simulated seconds agree).
    outputs = []
    for threads in ("1", "3"):
        csv_path, dump_dir = os.path.join(tmp, f"t{threads}.csv"), os.path.join(tmp, f"t{threads}")
        sim("compare", *SMALL, "--topology", "ring,exponential", "--momentum", "0.5", "--threads",
            threads, "--csv", csv_path)
        sim("run", *SMALL, "--algorithm", "cpsgd", "--threads", threads, "--dump-params", dump_dir)
        outputs.append((open(csv_path).read(), [open(os.path.join(dump_dir, f), "rb").read()
                                                for f in sorted(os.listdir(dump_dir))]))
    check(outputs[0] == outputs[1], "--threads 1 and --threads 3 give the same CSV and parameters")
    p = sim("run", *SMALL, "--threads", "-1", ok=False)
    check(p.returncode == 2 and "threads" in p.stderr, f"--threads -1: {p.returncode} {p.stderr!r}")

    p = sim("sweep", *SMALL, "--param", "bandwidth", "--values", "10Mbps,1Gbps,100Gbps",
            "--model-params", "25M", "--json")
    s = json.loads(p.stdout)
    check([pt["value"] for pt in s["points"]] == ["10Mbps", "1Gbps", "100Gbps"], "sweep points")
    check(len(s["crossovers"]) == 2, f"one crossover line per C-PSGD scheme: {s['crossovers']}")

    # --allreduce-model gloo prices Gloo's ring (docs/sim.md): on a latency-bound link its 2(n-1)
    # segment pairs each wait out the latency, twice Table 1's 2(n-1) latencies.
    args = ("run", *SMALL, "--algorithm", "cpsgd-allreduce", "--bandwidth", "1000Gbps",
            "--latency", "5ms", "--json")
    t1 = json.loads(sim(*args).stdout)
    gl = json.loads(sim(*args, "--allreduce-model", "gloo").stdout)
    check(t1["config"]["allreduce_model"] == "table1" and gl["config"]["allreduce_model"] == "gloo",
          f"allreduce_model in the JSON config: {t1['config']} {gl['config']}")
    comm = [j["series"][0]["seconds_per_iteration"] - 0.01 for j in (t1, gl)]
    check(abs(comm[1] / comm[0] - 2) < 1e-3, f"gloo / table1 latency-bound: {comm}")

    # A topology file sets n when --nodes is not given; a --nodes that disagrees with it is refused.
    topo6 = os.path.join(tmp, "ring6.pbtxt")
    with open(topo6, "w") as f:
        f.write('name: "ring6"\ngenerator { kind: RING nodes: 6 }\n')
    k = SMALL.index("--nodes")
    no_n = SMALL[:k] + SMALL[k + 2:]
    p = sim("run", *no_n, "--algorithm", "dpsgd", "--topology", topo6)
    check("dpsgd (ring6)      6" in p.stdout, f"n taken from the file: {p.stdout!r}")
    p = sim("run", *SMALL, "--algorithm", "dpsgd", "--topology", topo6, ok=False)
    check("has 6 nodes, but --nodes is 8" in p.stderr, f"--nodes against the file: {p.stderr!r}")

    # A bad command line exits 2 (README: "2 usage/config error"), CLI11's own errors included;
    # a topology file that cannot be read is invalid input: 1.
    for bad, code in ((["compare", *SMALL, "--bandwidth", "fast"], 2),
                      (["compare", *SMALL, "--topology", "nonexistent.pbtxt"], 1),
                      (["run", *SMALL, "--algorithm", "sgd"], 2),
                      (["compare", "--problem", "imagenet", *SMALL[2:]], 2),
                      (["compare", *SMALL, "--straggler", "gaussian:1"], 2),
                      (["sweep", *SMALL, "--param", "colour", "--values", "1"], 2),
                      (["sweep", *SMALL, "--param", "bandwidth"], 2),
                      (["sweep", *SMALL, "--param", "bandwidth", "--values", "1Gbps,10Xbps"], 2),
                      (["sweep", *SMALL, "--param", "nodes", "--values", "8,2.5"], 2),
                      (["compare", *SMALL, "--payload-fraction", "0"], 2),
                      (["compare", *SMALL, "--cpu-share", "1.5"], 2),
                      (["compare", *SMALL, "--cpu-per-byte", "-1ns"], 2),
                      (["compare", *SMALL, "--message-overhead", "soon"], 2),
                      (["compare", *SMALL, "--allreduce-model", "nccl"], 2),
                      (["compare", *SMALL, "--bogus"], 2),
                      (["compare", *SMALL[:2], "--nodes", "abc"], 2),
                      # An unsigned seed read from "-1" was 2^64 - 1; an empty list entry was
                      # silently dropped; an unreachable target ran the whole experiment.
                      (["compare", *SMALL, "--seed", "-1"], 2),
                      (["compare", *SMALL, "--topology", "ring,,torus"], 2),
                      (["sweep", *SMALL, "--param", "bandwidth", "--values", "1Gbps,,10Gbps"], 2),
                      (["compare", *SMALL, "--target-loss", "-1"], 2),
                      # The problem's sizes are the command line's (was exit 1, after setup).
                      (["compare", *SMALL, "--dim", "0"], 2),
                      (["compare", *SMALL, "--noise", "-1"], 2),
                      # Outputs that cannot be written are refused before the run, not after.
                      (["compare", *SMALL, "--csv", "/nonexistent/dir/x.csv"], 2),
                      (["compare", *SMALL, "--csv", "/tmp"], 2),
                      (["run", *SMALL, "--dump-params", "/dev/null"], 2),
                      # push-sum runs every iteration: rounds are a usage error.
                      (["run", *SMALL, "--algorithm", "push_sum", "--local-steps", "4"], 2),
                      # Joins and leaves: NODE@ITER, D-PSGD only, a join before the leave.
                      (["run", *SMALL, "--algorithm", "dpsgd", "--join", "3@x"], 2),
                      (["run", *SMALL, "--algorithm", "dpsgd", "--leave", "3"], 2),
                      (["run", *SMALL, "--algorithm", "cpsgd", "--join", "3@5"], 2),
                      (["run", *SMALL, "--algorithm", "dpsgd", "--join", "3@9",
                        "--leave", "3@4"], 2),
                      ([], 2)):
        p = sim(*bad, ok=False)
        check(p.returncode == code, f"{bad} exited {p.returncode}, expected {code}: {p.stderr!r}")
        check("gossip-sim:" in p.stderr or "Error" in p.stderr or "error" in p.stderr
              or "required" in p.stderr or "expected" in p.stderr or "convert" in p.stderr,
              f"error message for {bad}: {p.stderr!r}")
        check("Traceback" not in p.stderr and p.stdout == "", f"nothing but the message for {bad}")

    # --config: gossipd's training config instead of the training flags. The same run as the
    # equivalent flags, to the bit (config/sgd_config.h is the one mapping); epochs count passes
    # over the mean shard as gossipd counts them; conflicts and bad overrides are errors.
    cfg = os.path.join(tmp, "train.pbtxt")
    with open(cfg, "w") as f:
        f.write('seed: 5\nmodel { kind: LEAST_SQUARES }\n'
                'data { dataset: SYNTHETIC_LEAST_SQUARES num_examples: 1024 dim: 8 test_examples: 256 }\n'
                'batch_size: 8\noptimizer { kind: MOMENTUM lr: 0.05 momentum: 0.5 }\n'
                'iterations: 60\neval_every: 20\n')
    flags = ["--problem", "least_squares", "--train-examples", "1024", "--test-examples", "256",
             "--dim", "8", "--noise", "0.1", "--batch", "8", "--lr", "0.05", "--momentum", "0.5",
             "--iterations", "60", "--eval-every", "20", "--seed", "5"]
    common = ["run", "--topology", "ring", "--nodes", "8", "--compute-time", "10ms", "--quiet"]
    sim(*common, "--config", cfg, "--dump-params", os.path.join(tmp, "by_config"))
    sim(*common, *flags, "--dump-params", os.path.join(tmp, "by_flags"))
    for i in range(8):
        a = open(os.path.join(tmp, "by_config", f"node_{i}.f32"), "rb").read()
        b = open(os.path.join(tmp, "by_flags", f"node_{i}.f32"), "rb").read()
        check(len(a) == 4 * 9 and a == b, f"node {i}: --config and the flags ran the same bits")
    j = json.loads(sim(*common, "--config", cfg, "--set", "iterations=0", "--set", "epochs=2",
                       "--json").stdout)
    # 2 passes over the mean shard (1024 / 8 = 128 examples) in batches of 8: 32 iterations.
    check(j["series"][0]["iterations"] == 32, f"epochs: {j['series'][0]['iterations']} iterations")
    for bad, code, says in (([*common, "--config", cfg, "--lr", "0.1"], 2, "--lr is set by --config"),
                            ([*common, "--set", "optimizer.lr=0.1"], 2, "give --config"),
                            ([*common, "--config", cfg, "--set", "optimizer.lr=-1"], 1,
                             "command line (optimizer.lr=-1): optimizer.lr"),
                            ([*common, "--config", os.path.join(tmp, "none.pbtxt")], 1, "none.pbtxt")):
        p = sim(*bad, ok=False)
        check(p.returncode == code and says in p.stderr,
              f"{bad} exited {p.returncode} (expected {code}) with {p.stderr!r}")

    # algorithm: ALLREDUCE in the config: gossipd runs C-PSGD over Gloo's ring, so `run` simulates
    # cpsgd-allreduce priced as Gloo's ring, says so, and refuses --algorithm dpsgd. The bits are
    # those of `--algorithm cpsgd-allreduce` with the same config (one C-PSGD).
    allreduce_cfg = os.path.join(tmp, "allreduce.pbtxt")
    with open(cfg) as f, open(allreduce_cfg, "w") as g:
        g.write(f.read() + "\nalgorithm: ALLREDUCE\n")
    p = sim(*common, "--config", allreduce_cfg, "--json", "--dump-params", os.path.join(tmp, "ar"))
    j = json.loads(p.stdout)
    check([s["algorithm"] for s in j["series"]] == ["cpsgd-allreduce"],
          f"ALLREDUCE config simulates cpsgd-allreduce: {[s['algorithm'] for s in j['series']]}")
    check(j["config"]["allreduce_model"] == "gloo", f"priced as Gloo's ring: {j['config']}")
    check("has algorithm ALLREDUCE: simulating C-PSGD (cpsgd-allreduce)" in p.stderr, p.stderr)
    sim(*common, "--config", allreduce_cfg, "--algorithm", "cpsgd-allreduce", "--dump-params",
        os.path.join(tmp, "ar_flag"))
    for i in range(8):
        a = open(os.path.join(tmp, "ar", f"node_{i}.f32"), "rb").read()
        b = open(os.path.join(tmp, "ar_flag", f"node_{i}.f32"), "rb").read()
        c = open(os.path.join(tmp, "by_config", f"node_{i}.f32"), "rb").read()
        check(a == b and a != c, f"node {i}: the ALLREDUCE config ran C-PSGD, not D-PSGD")
    j = json.loads(sim(*common, "--config", allreduce_cfg, "--allreduce-model", "table1",
                       "--json").stdout)
    check(j["config"]["allreduce_model"] == "table1", "--allreduce-model given wins")
    p = sim(*common, "--config", allreduce_cfg, "--algorithm", "dpsgd", ok=False)
    check(p.returncode == 2 and "--algorithm dpsgd: --config" in p.stderr and
          "algorithm: ALLREDUCE" in p.stderr, f"dpsgd with an ALLREDUCE config: {p.stderr!r}")
    p = sim(*common, "--config", cfg)
    check("has algorithm DPSGD: simulating D-PSGD (dpsgd)" in p.stderr, p.stderr)
    # Sizes and bandwidths carry a unit that fits them (the model's 9 floats were "0.00 MB").
    check(p.stdout.startswith("network: 1 Gbit/s, latency 1.00 ms; message 36 B;"), p.stdout)

    # One flag name per setting (config/flags.h): --batch-size, gossipd's name, sets what the older
    # --batch (still accepted, not listed) sets: the same bits; and --config names the spelling given.
    def dump(name, *flags):
        sim("run", "--algorithm", "dpsgd", "--topology", "ring", *flags, "--dump-params",
            os.path.join(tmp, name))
        return [open(os.path.join(tmp, name, f"node_{i}.f32"), "rb").read() for i in range(8)]
    at = SMALL.index("--batch")
    small = SMALL[:at] + SMALL[at + 2:]
    canonical = dump("batch_size", *small, "--batch-size", "5")
    check(canonical == dump("batch_alias", *small, "--batch", "5"), "--batch-size 5 == --batch 5")
    check(canonical != dump("batch_8", *small, "--batch-size", "8"), "--batch-size changes the run")
    run_help = sim("run", "--help").stdout
    check("--batch-size" in run_help and "(config: batch_size)" in run_help and
          "--batch " not in run_help, "run --help lists --batch-size, not --batch")
    for spelling in ("--batch", "--batch-size"):
        p = sim(*common, "--config", cfg, spelling, "4", ok=False)
        check(p.returncode == 2 and f"{spelling} is set by --config" in p.stderr, p.stderr)

    # The round flags (config/flags.h) run what the config's fields run, bit for bit: local-step
    # gossip with int8 CHOCO messages, and with Nesterov's outer step, bf16 and overlap.
    round_cfg = os.path.join(tmp, "rounds.pbtxt")
    for name, fields, round_flags in (
            ("int8", "local_steps: 4\ncompression { kind: INT8 }\n",
             ["--local-steps", "4", "--compression", "int8"]),
            ("nesterov", "local_steps: 5\nouter { kind: NESTEROV lr: 0.5 }\n"
                         "compression { kind: BF16 choco_step: 0.5 }\noverlap: true\n",
             ["--local-steps", "5", "--outer", "nesterov", "--outer-lr", "0.5", "--compression",
              "bf16", "--choco-step", "0.5", "--overlap"])):
        with open(cfg) as f, open(round_cfg, "w") as g:
            g.write(f.read() + fields)
        sim(*common, "--config", round_cfg, "--dump-params", os.path.join(tmp, "r_config_" + name))
        sim(*common, *flags, *round_flags, "--dump-params", os.path.join(tmp, "r_flags_" + name))
        for i in range(8):
            a = open(os.path.join(tmp, "r_config_" + name, f"node_{i}.f32"), "rb").read()
            b = open(os.path.join(tmp, "r_flags_" + name, f"node_{i}.f32"), "rb").read()
            c = open(os.path.join(tmp, "by_flags", f"node_{i}.f32"), "rb").read()
            check(len(a) == 4 * 9 and a == b and a != c,
                  f"{name}, node {i}: the round flags ran the config's bits (and not per-step's)")
        p = sim(*common, "--config", round_cfg, round_flags[0], round_flags[1], ok=False)
        check(p.returncode == 2 and "--local-steps is set by --config" in p.stderr, p.stderr)
    # Bad values exit 2 with the config's message naming the field.
    for bad, says in ((["--local-steps", "0"], "command line (local_steps=0): local_steps: must be >= 1"),
                      (["--outer", "nesterov", "--outer-momentum", "1"],
                       "outer.momentum: must be in (0, 1), got 1"),
                      (["--outer-lr", "nan", "--outer", "sgd"], "outer.lr: must be finite and > 0"),
                      (["--outer-lr", "0.5"], "outer.lr: set outer.kind SGD or NESTEROV"),
                      (["--compression", "int4"], "compression.kind"),
                      (["--block-floats", "100"], "compression.block_floats: must be a power of two"),
                      (["--choco-step", "0"], "compression.choco_step: must be in (0, 1]")):
        p = sim("compare", *SMALL, *bad, ok=False)
        check(p.returncode == 2 and says in p.stderr and p.stdout == "", f"{bad}: {p.stderr!r}")
    p = sim("run", *SMALL, "--algorithm", "cpsgd-allreduce", "--choco-step", "0.5", ok=False)
    check(p.returncode == 2 and "compression.choco_step: CHOCO-SGD is D-PSGD's" in p.stderr, p.stderr)
    help_text = sim("compare", "--help").stdout
    check("--local-steps" in help_text and "(config: local_steps)" in help_text and
          "(config: overlap: true)" in help_text, "compare --help lists the round flags")

    # compare with rounds: per-step C-PSGD and D-PSGD beside DiLoCo and local-step gossip, with time
    # to target and bytes per node; H = 10 and int8 send about 40x fewer bytes than per-step gossip.
    j = json.loads(sim("compare", *SMALL, "--topology", "one_peer_exponential", "--local-steps", "10",
                       "--compression", "int8", "--bandwidth", "10Mbps", "--model-params", "235146",
                       "--target-loss", "0.5", "--json").stdout)
    got = [(s["algorithm"], s["rounds"]) for s in j["series"]]
    check(got == [("cpsgd-ps", ""), ("cpsgd-allreduce", ""), ("dpsgd", ""),
                  ("cpsgd-allreduce", "H=10 none int8"), ("dpsgd", "H=10 none int8")], f"{got}")
    per_step, local = j["series"][2], j["series"][4]
    ratio = per_step["bytes_per_node"] / local["bytes_per_node"]
    check(38 < ratio < 40, f"bytes per node per-step / H=10 int8: {ratio}")
    check(local["time_to_target_s"] < per_step["time_to_target_s"] / 10,
          f"time to target: {local['time_to_target_s']} vs {per_step['time_to_target_s']}")

    # Sweeps over H and compression: one row per value and series, a new run per value.
    sweep_csv = os.path.join(tmp, "h.csv")
    sim("sweep", *SMALL, "--param", "local_steps", "--values", "1,5,20", "--csv", sweep_csv)
    rows = list(csv.DictReader(open(sweep_csv)))
    check({(r["sweep_value"], r["rounds"]) for r in rows if r["algorithm"] == "dpsgd"} ==
          {("1", ""), ("5", "H=5 none none"), ("20", "H=20 none none")}, "local_steps sweep series")
    sim("sweep", *SMALL, "--local-steps", "5", "--param", "compression", "--values", "none,bf16,int8",
        "--csv", sweep_csv)
    rows = list(csv.DictReader(open(sweep_csv)))
    check({r["rounds"] for r in rows} == {"H=5 none none", "H=5 none bf16", "H=5 none int8"},
          f"compression sweep: {({r['rounds'] for r in rows})}")
    for bad, says in ((["--param", "local_steps", "--values", "1,0"], "local_steps: must be >= 1"),
                      (["--param", "compression", "--values", "none,int4"], "compression.kind")):
        p = sim("sweep", *SMALL, *bad, ok=False)
        check(p.returncode == 2 and says in p.stderr, f"{bad}: {p.stderr!r}")
print("ok")
