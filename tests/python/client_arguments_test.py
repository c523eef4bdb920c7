"""gossip_sgd.Client against a hostile caller and a hostile daemon: every error is one of the
package's documented exceptions (gossip_sgd.errors), never a bare OSError, ValueError, KeyError,
struct.error or OverflowError; argument errors are InvalidArgument (also a ValueError) naming the
argument, raised before anything is sent; a NaN or infinite connect_timeout never retries forever.
The daemon side is a small fake here (one WELCOME, then silence), so each case controls exactly
what the client receives. Run: python3 this."""

import os
import socket
import struct
import tempfile
import threading
import time
import unittest

import attach_helpers  # noqa: F401  (puts the tree's python/ on sys.path)
from gossip_sgd import Client, DaemonUnavailable, GossipError, InvalidArgument, ProtocolError
from gossip_sgd import protocol as p


class FakeDaemon:
    """Listens on a socket in a fresh directory; answers one HELLO with a WELCOME describing
    `buffer_bytes` of a memfd (update_offset after the parameters for an update session), then
    records what the client sends until it closes."""

    def __init__(self, buffer_bytes=None, update=False):
        self.dir = tempfile.TemporaryDirectory(prefix="fake_gossipd_")
        self.socket = os.path.join(self.dir.name, "gossipd.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket)
        self.listener.listen(1)
        self.buffer_bytes = buffer_bytes
        self.update = update
        self.received = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        with conn:
            hello = b""
            while len(hello) < p.HEADER.size + p.HELLO.size:
                hello += conn.recv(64)
            n, _, _ = p.HELLO.unpack_from(hello, p.HEADER.size)
            size = self.buffer_bytes if self.buffer_bytes is not None else 8 * n
            fd = os.memfd_create("fake-gossipd")
            os.ftruncate(fd, 8 * n)
            welcome = p.WELCOME.pack(n, p.DTYPES["float32"], 0, size, 0, 0, 0, 1,
                                     4 * n if self.update else 0, 1, 0)
            conn.sendmsg([p.encode(p.WELCOME_TYPE, welcome)],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
            os.close(fd)
            while True:
                data = conn.recv(4096)
                if not data:
                    break
                self.received += data

    def close(self):
        self.listener.close()
        self.thread.join(timeout=5)
        self.dir.cleanup()


class ArgumentTest(unittest.TestCase):
    def assert_invalid(self, name, call):
        """`call` raises InvalidArgument, a GossipError and a ValueError, naming `name`."""
        with self.assertRaises(InvalidArgument) as cm:
            call()
        self.assertIsInstance(cm.exception, GossipError)
        self.assertIsInstance(cm.exception, ValueError)
        self.assertIn(name, str(cm.exception))

    def test_timeouts_that_are_no_finite_seconds_are_refused_at_once(self):
        for bad in (float("nan"), float("inf"), -float("inf"), -1, "5", None, True, 1j):
            with self.subTest(connect_timeout=bad):
                begin = time.monotonic()
                self.assert_invalid("connect_timeout", lambda: Client(
                    "/nonexistent/gossipd.sock", 10, connect_timeout=bad))
                self.assertLess(time.monotonic() - begin, 1)  # no retrying, ever
            with self.subTest(timeout=bad):
                self.assert_invalid("timeout", lambda: Client(
                    "/nonexistent/gossipd.sock", 10, timeout=bad, connect_timeout=0))
        self.assert_invalid("timeout", lambda: Client("/nonexistent/gossipd.sock", 10, timeout=0))
        # 0 s of connect retries is one attempt.
        with self.assertRaises(DaemonUnavailable):
            Client("/nonexistent/gossipd.sock", 10, connect_timeout=0)

    def test_counts_that_are_no_whole_positive_numbers_are_refused(self):
        for bad in ("abc", "10", 1.5, 10.0, True, None, 0, -3, 2**64, [10]):
            with self.subTest(num_params=bad):
                self.assert_invalid("num_params", lambda: Client(
                    "/nonexistent/gossipd.sock", bad, connect_timeout=0))

    def test_paths_no_unix_socket_can_have_are_refused(self):
        for bad in ("", "/tmp/a\0b", "/tmp/" + "x" * 200, 42):
            with self.subTest(socket_path=bad):
                self.assert_invalid("socket_path", lambda: Client(bad, 10, connect_timeout=0))
        saved = os.environ.pop("GOSSIP_ATTACH_SOCKET", None)
        try:
            self.assert_invalid("GOSSIP_ATTACH_SOCKET", lambda: Client(num_params=10))
        finally:
            if saved is not None:
                os.environ["GOSSIP_ATTACH_SOCKET"] = saved

    def test_a_path_that_is_no_socket_is_unavailable_at_once(self):
        with tempfile.TemporaryDirectory() as d:
            regular = os.path.join(d, "file")
            open(regular, "w").close()
            for path, says in ((regular, "not a socket"), (d, "a directory")):
                begin = time.monotonic()
                with self.assertRaises(DaemonUnavailable) as cm:
                    Client(path, 10, connect_timeout=30)
                self.assertLess(time.monotonic() - begin, 1)
                self.assertIn(says, str(cm.exception))

    def test_post_and_send_update_check_their_arguments_before_sending(self):
        daemon = FakeDaemon(update=True)
        self.addCleanup(daemon.close)
        client = Client(daemon.socket, 16, timeout=5, connect_timeout=5, update=True)
        for bad in ("0", 1, 0.0, True):
            with self.subTest(iteration=bad):
                self.assert_invalid("iteration", lambda: client.post(bad))
        client.post()
        for bad in (float("nan"), float("inf"), 1e40, "0.1", None):
            with self.subTest(gamma=bad):
                self.assert_invalid("gamma", lambda: client.send_update(bad))
        self.assertFalse(client.closed)  # an argument error leaves the session as it was
        client.send_update(0.5)
        client.close()
        daemon.thread.join(timeout=5)
        # HELLO was read by the daemon; after it: POST, one UPDATE (gamma 0.5), BYE; nothing else.
        types = []
        data = daemon.received
        while data:
            _, _, msg_type, size = p.HEADER.unpack_from(data)
            types.append(p.TYPE_NAMES[msg_type])
            if msg_type == p.UPDATE_TYPE:
                self.assertEqual(p.UPDATE.unpack_from(data, p.HEADER.size)[1], 0.5)
            data = data[p.HEADER.size + size:]
        self.assertEqual(types, ["POST", "UPDATE", "BYE"])

    def test_a_welcome_whose_buffer_cannot_be_mapped_is_a_protocol_error(self):
        daemon = FakeDaemon(buffer_bytes=2**62)
        self.addCleanup(daemon.close)
        with self.assertRaises(ProtocolError) as cm:
            Client(daemon.socket, 16, timeout=5, connect_timeout=5)
        self.assertIn("cannot map", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
