"""Shared by every module of the fault-scenario driver: the exit codes, the shape of the cluster
(8 nodes on a 2 x 4 torus), the tolerances of the W(t) checks, where Fashion-MNIST and the
repository are, the Failed and Skipped exceptions, and log()."""

import os
import re
import time

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_SKIP = 0, 1, 2, 77
N = 8  # nodes: 2 x 4 torus
ROWS, COLS = 2, 4
TOL = 1e-12
MH_SETTLE = 5  # a W in force this many exchanges must be Metropolis-Hastings of its graph
FMNIST = "/usr/share/datasets/fashion-mnist"
# tests/fault/scenarios/faultlib/ -> the repository root
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


class Failed(Exception):
    """A check failed; the message says which and why."""


class Skipped(Exception):
    """The scenario cannot run here (exit 77)."""


def local_steps(config_text):
    """H of a training config: its `local_steps` (1 without). Under rounds a node exchanges once per
    H iterations, with one W for the whole round [rH, rH + H)."""
    m = re.search(r"\blocal_steps:\s*(\d+)", config_text or "")
    return int(m.group(1)) if m else 1


def now_ms():
    return int(time.time() * 1000)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
