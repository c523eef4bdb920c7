"""Shared by the attach tests: start tests/attach/attach_peer (the real AttachServer answering as
node 0 of a simulated ring) and replay that ring in numpy as the independent reference."""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))  # import gossip_sgd from the tree

PEER = os.environ.get("ATTACH_PEER", "")


class Peer:
    """attach_peer on a socket in a fresh directory; waits until it listens."""

    def __init__(self, *args):
        if not os.path.exists(PEER):
            raise RuntimeError(f"set $ATTACH_PEER to the attach_peer executable (got {PEER!r})")
        self.dir = tempfile.TemporaryDirectory(prefix="attach_py_")
        self.socket = os.path.join(self.dir.name, "gossipd.sock")
        self.proc = subprocess.Popen([PEER, "--socket", self.socket, *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening"):
            self.proc.kill()
            raise RuntimeError(f"attach_peer did not start: {line!r} {self.proc.stderr.read()}")

    def finish(self, timeout=30):
        """Exit code and stderr of the peer."""
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()
        self.dir.cleanup()


class PeerTestCase(unittest.TestCase):
    """A test case whose peer() starts a Peer that is closed when the test ends."""

    def peer(self, *args):
        peer = Peer(*args)
        self.addCleanup(peer.close)
        return peer


def targets(nodes, num_params):
    """target_j[k] = j + k / num_params in float32, as attach_peer computes it."""
    k = np.arange(num_params, dtype=np.float32) / np.float32(num_params)
    return [np.float32(j) + k for j in range(nodes)]


def local_step(y, target, lr):
    """The quadratic's gradient step y - lr (y - target), float32."""
    return y - np.float32(lr) * (y - target)


def ring_reference(x0, nodes, lr, iterations):
    """Node 0's parameters after each iteration of the ring D-PSGD that attach_peer runs, when
    node 0 (the trainer) starts at x0 and takes the same quadratic step with target_0."""
    n = x0.size
    t = targets(nodes, n)
    y = [x0.astype(np.float32).copy()] + [np.zeros(n, np.float32) for _ in range(nodes - 1)]
    w = np.float32(1) / np.float32(3)
    rows = []
    for _ in range(iterations):
        y = [local_step(y[j], t[j], lr) for j in range(nodes)]
        y = [(w * y[j] + w * y[(j - 1) % nodes]) + w * y[(j + 1) % nodes] for j in range(nodes)]
        rows.append(y[0].copy())
    return rows
