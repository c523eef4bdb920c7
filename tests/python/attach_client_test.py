"""Tests of gossip_sgd.Client against the real C++ AttachServer (tests/attach/attach_peer): values
against a numpy replay of the ring, refusals with their texts, and the daemon dying, hanging or
missing (the client raises within its timeout, never hangs). Run: ATTACH_PEER=... python3 this."""

import os
import signal
import socket
import threading
import time
import unittest

import numpy as np

import attach_helpers as h
from gossip_sgd import (Client, DaemonGone, DaemonUnavailable, GossipError, GossipTimeout, Refused,
                        TrainingFinished)
from gossip_sgd import protocol as p


class ClientTest(h.PeerTestCase):
    def test_mixed_values_equal_a_numpy_replay_of_the_ring(self):
        nodes, n, lr, iterations, start = 5, 1500, 0.1, 8, 3
        peer = self.peer("--nodes", nodes, "--lr", lr, "--iterations", iterations,
                         "--start-iteration", start)
        client = Client(peer.socket, n, timeout=20)
        self.assertEqual((client.node_id, client.num_nodes), (0, nodes))
        self.assertEqual((client.start_iteration, client.iteration), (start, start))
        self.assertFalse(client.buffer_initialized)
        self.assertEqual(client.params.dtype, np.float32)
        self.assertEqual(client.params.shape, (n,))

        x0 = np.random.default_rng(7).standard_normal(n).astype(np.float32)
        expected = h.ring_reference(x0, nodes, lr, iterations)
        target0 = h.targets(nodes, n)[0]
        x = x0.copy()
        for i in range(iterations):
            client.params[:] = h.local_step(x, target0, lr)
            mixed = client.post_and_get()
            # Same float32 operations in the same order on both sides: bit for bit.
            np.testing.assert_array_equal(mixed, expected[i], err_msg=f"iteration {start + i}")
            x = mixed.copy()
        self.assertEqual(client.iteration, start + iterations)
        # The daemon served its iterations and said BYE.
        with self.assertRaises(TrainingFinished):
            client.post_and_get()
        self.assertTrue(client.closed)
        self.assertEqual(peer.finish()[0], 0)

    def test_update_session_gets_the_mixed_row_minus_gamma_u_from_a_numpy_replay(self):
        nodes, n, lr, iterations = 4, 1000, 0.1, 5
        peer = self.peer("--nodes", nodes, "--lr", lr, "--iterations", iterations)
        client = Client(peer.socket, n, timeout=20, update=True)
        self.assertEqual(client.update.shape, (n,))
        self.assertEqual(client.update.dtype, np.float32)
        with self.assertRaises(GossipError):
            client.send_update(0.5)  # nothing posted yet
        rng = np.random.default_rng(3)
        t = h.targets(nodes, n)
        y = [rng.standard_normal(n).astype(np.float32)] + [np.zeros(n, np.float32)] * (nodes - 1)
        client.params[:] = y[0]
        w = np.float32(1) / np.float32(3)
        for i in range(iterations):
            client.post()
            if i == 0:
                with self.assertRaises(GossipError):
                    client.wait_mixed()  # UPDATE is due first; refused before anything is sent
            u = rng.standard_normal(n).astype(np.float32)
            gamma = np.float32(0.25 + i)
            client.update[:] = u
            client.send_update(gamma)
            got = client.wait_mixed()
            y = [y[0]] + [h.local_step(y[j], t[j], lr) for j in range(1, nodes)]
            y = [(w * y[j] + w * y[(j - 1) % nodes]) + w * y[(j + 1) % nodes]
                 for j in range(nodes)]
            y[0] = y[0] - gamma * u
            np.testing.assert_array_equal(got, y[0], err_msg=f"iteration {i}")
        with self.assertRaises(TrainingFinished):
            client.post()
            client.send_update(0.0)
            client.wait_mixed()
        self.assertEqual(peer.finish()[0], 0)

    def test_size_mismatch_is_refused_with_both_sizes(self):
        peer = self.peer("--expect-params", 100)
        with self.assertRaises(Refused) as cm:
            Client(peer.socket, 99, timeout=10)
        self.assertIn("99", str(cm.exception))
        self.assertIn("100", str(cm.exception))
        code, err = peer.finish()
        self.assertEqual(code, 1)
        self.assertIn("parameter count mismatch", err)

    def raw_hello(self, hello_bytes):
        """Sends a hand-made HELLO; returns the ERROR's (code, text)."""
        peer = self.peer()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(peer.socket)
            s.sendall(hello_bytes)
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        magic, version, msg_type, size = p.HEADER.unpack_from(data)
        self.assertEqual((magic, version, msg_type), (p.MAGIC, p.VERSION, p.ERROR_TYPE))
        (code,) = p.ERROR_CODE.unpack_from(data, p.HEADER.size)
        return code, data[p.HEADER.size + 4:p.HEADER.size + size].decode()

    def test_another_protocol_version_is_refused_naming_both(self):
        code, text = self.raw_hello(p.encode_hello(10, version=1))
        self.assertEqual(code, p.ERROR_REFUSED)
        self.assertIn("version 1;", text)
        self.assertIn(f"version {p.VERSION}", text)

    def test_another_dtype_is_refused_by_name(self):
        code, text = self.raw_hello(p.encode_hello(10, dtype="float64"))
        self.assertEqual(code, p.ERROR_REFUSED)
        self.assertIn("float64", text)
        self.assertIn("float32", text)

    def test_daemon_killed_mid_iteration_raises_long_before_the_timeout(self):
        peer = self.peer("--hang-at", 2, "--iterations", 10)
        client = Client(peer.socket, 64, timeout=60)
        client.post_and_get()
        client.post_and_get()
        killer = threading.Timer(0.3, lambda: peer.proc.send_signal(signal.SIGKILL))
        killer.start()
        begin = time.monotonic()
        with self.assertRaises(DaemonGone) as cm:
            client.post_and_get()
        killer.join()
        self.assertLess(time.monotonic() - begin, 20)
        self.assertIn("MIXED(2)", str(cm.exception))
        self.assertTrue(client.closed)
        with self.assertRaises(GossipError):
            client.post_and_get()

    def test_daemon_exiting_without_a_word_raises(self):
        peer = self.peer("--exit-at", 1, "--iterations", 10)
        client = Client(peer.socket, 64, timeout=60)
        client.post_and_get()
        with self.assertRaises(DaemonGone):
            client.post_and_get()

    def test_silent_daemon_raises_at_the_timeout(self):
        peer = self.peer("--hang-at", 0)
        client = Client(peer.socket, 64, timeout=1.0)
        begin = time.monotonic()
        with self.assertRaises(GossipTimeout) as cm:
            client.post_and_get()
        waited = time.monotonic() - begin
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertGreaterEqual(waited, 0.9)
        self.assertLess(waited, 10)

    def test_no_daemon_raises_unavailable(self):
        begin = time.monotonic()
        with self.assertRaises(DaemonUnavailable) as cm:
            Client("/nonexistent/gossipd.sock", 10, connect_timeout=0.3)
        self.assertLess(time.monotonic() - begin, 10)
        self.assertIn("/nonexistent/gossipd.sock", str(cm.exception))

    def test_environment_names_the_socket_and_close_says_bye(self):
        peer = self.peer("--iterations", 10)
        os.environ["GOSSIP_ATTACH_SOCKET"] = peer.socket
        self.addCleanup(os.environ.pop, "GOSSIP_ATTACH_SOCKET")
        with Client(num_params=32, timeout=20) as client:
            client.post_and_get()
        code, err = peer.finish()
        self.assertEqual(code, 1)  # the peer wanted 10 iterations and was told BYE after 1
        self.assertIn("BYE", err)


if __name__ == "__main__":
    unittest.main()
