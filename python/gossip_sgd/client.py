"""Client: a trainer's connection to gossipd's attach socket (protocol in docs/attach.md).

    client = Client("/run/gossip/node0.sock", num_params=model_size)
    x = client.params                      # numpy float32 view of the shared buffer
    for t in range(client.start_iteration, ...):
        ... local step, then write x_t into x ...
        client.post_and_get()              # x now holds sum_j W_ij x_j^t
    client.close()

The buffer is the memfd gossipd created, mapped into this process: posting copies nothing
through the socket. Between post() and the answer the buffer is the daemon's and must not be
touched.

An update session (`Client(..., update=True)`) hands the daemon the last step too: after post()
the parameters are read-only, the trainer writes u_t into `client.update` and calls
send_update(gamma); the answer holds sum_j W_ij x_j^t - gamma u_t, computed by the daemon in its
mixing pass (no copy of the parameters on either side). Every wait has a deadline (`timeout` seconds per call), so a call never hangs: a dead
daemon raises DaemonGone at once (EOF), a silent one GossipTimeout. After any GossipError the
client is closed. Not thread-safe: one thread uses a Client.
"""

import math
import mmap
import numbers
import os
import socket
import stat
import time

import numpy as np

from . import protocol as p
from .errors import (DaemonAborted, DaemonGone, DaemonUnavailable, GossipError, GossipTimeout,
                     InvalidArgument, ProtocolError, Refused, TrainingFinished)

ENV_SOCKET = "GOSSIP_ATTACH_SOCKET"

# sockaddr_un.sun_path holds 108 bytes, the terminating NUL included.
_MAX_SOCKET_PATH_BYTES = 107
_MAX_COUNT = 2**63 - 1  # HELLO carries the count as a u64; the daemon refuses what it cannot map
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _count(name, value):
    """`value` as a positive int (an integer type, not bool, str or float); else InvalidArgument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgument(f"{name} must be a whole number >= 1, got {value!r} "
                              f"({type(value).__name__})")
    if not 1 <= int(value) <= _MAX_COUNT:
        raise InvalidArgument(f"{name} must be in 1..{_MAX_COUNT}, got {int(value)}")
    return int(value)


def _seconds(name, value, zero_ok):
    """`value` as finite seconds, > 0 (or >= 0 when `zero_ok`); else InvalidArgument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgument(f"{name} must be a number of seconds, got {value!r} "
                              f"({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
        raise InvalidArgument(f"{name} must be a finite number of seconds "
                              f"{'>= 0' if zero_ok else '> 0'}, got {v!r}")
    return v


def _socket_path(value):
    """The attach socket's path as str: given, or $GOSSIP_ATTACH_SOCKET; else InvalidArgument."""
    if value is None:
        value = os.environ.get(ENV_SOCKET)
        if not value:
            raise InvalidArgument(f"socket_path: none given and ${ENV_SOCKET} is not set")
        name = f"${ENV_SOCKET}"
    else:
        name = "socket_path"
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise InvalidArgument(f"{name} must be a path, got {value!r} ({type(value).__name__})")
    path = os.fsdecode(os.fspath(value))
    if not path:
        raise InvalidArgument(f"{name} is empty")
    if "\0" in path:
        raise InvalidArgument(f"{name} {path!r} contains a NUL byte")
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH_BYTES:
        raise InvalidArgument(f"{name} {path!r} is {len(os.fsencode(path))} bytes; a Unix socket "
                              f"path holds at most {_MAX_SOCKET_PATH_BYTES}")
    return path


class Client:
    """A trainer attached to one gossipd.

    socket_path: the daemon's attach socket (default: $GOSSIP_ATTACH_SOCKET).
    num_params: how many float32 parameters the trainer gossips (checked by the daemon).
    timeout: seconds any one call may wait for the daemon (the handshake, each post_and_get);
        it must cover the daemon's exchange with its neighbours. Finite and > 0.
    connect_timeout: seconds to keep retrying while nobody listens yet (a trainer may start
        before its daemon); then DaemonUnavailable. Finite and >= 0.
    update: an update session (send_update() after each post()); `client.update` is then a
        second float32 view, where u_t goes.
    An argument of the wrong type or out of range (a NaN or infinite timeout, a count that is not a
    whole number, a path no Unix socket can have) raises InvalidArgument (a ValueError) naming it,
    before any connection is made.
    """

    def __init__(self, socket_path=None, num_params=None, *, timeout=300.0, connect_timeout=30.0,
                 update=False):
        self._sock = None
        self._mmap = None
        self._posted = None
        self._updated = False
        self.params = None
        self.update = None
        self.with_update = bool(update)
        self.socket_path = _socket_path(socket_path)
        num_params = _count("num_params", num_params)
        self.timeout = _seconds("timeout", timeout, zero_ok=False)
        connect_timeout = _seconds("connect_timeout", connect_timeout, zero_ok=True)
        self._connect(connect_timeout)
        try:
            self._handshake(num_params)
        except BaseException:
            self._drop()
            raise

    # ---- public API

    def post(self, iteration=None):
        """Tells the daemon that the buffer holds x_t of `iteration` (default: the next one)."""
        self._check_open()
        if self._posted is not None:
            raise GossipError(f"post({iteration}) while POST({self._posted}) is not answered")
        if iteration is None:
            iteration = self.iteration
        if isinstance(iteration, bool) or not isinstance(iteration, numbers.Integral) or \
                iteration != self.iteration:
            raise InvalidArgument(f"iteration: the next iteration is {self.iteration}, not "
                                  f"{iteration!r}")
        self._send(p.encode_iteration(p.POST_TYPE, iteration), f"POST({iteration})")
        self._posted = iteration
        self._updated = False

    def send_update(self, gamma):
        """Update sessions: `client.update` holds u_t; the daemon subtracts gamma * u_t."""
        self._check_open()
        if not self.with_update:
            raise GossipError("send_update() outside an update session (Client(update=True))")
        if self._posted is None or self._updated:
            raise GossipError("send_update() needs one post() before it")
        if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or \
                not math.isfinite(float(gamma)) or abs(float(gamma)) > _FLOAT32_MAX:
            raise InvalidArgument(f"gamma must be a finite float32 step size, got {gamma!r}")
        self._send(p.encode_update(self._posted, float(gamma)), f"UPDATE({self._posted})")
        self._updated = True

    def wait_mixed(self):
        """Waits for the daemon's MIXED; returns the buffer, which now holds the gossip average."""
        self._check_open()
        if self._posted is None:
            raise GossipError("wait_mixed() without a post()")
        if self.with_update and not self._updated:
            raise GossipError("wait_mixed() without send_update() in an update session")
        what = f"MIXED({self._posted})"
        msg_type, payload, fds = self._read(time.monotonic() + self.timeout, what)
        for fd in fds:  # gossipd passes none after WELCOME
            os.close(fd)
        if msg_type != p.MIXED_TYPE or len(payload) != p.ITERATION.size:
            self._protocol_error(f"expected {what}, got {p.TYPE_NAMES.get(msg_type, msg_type)}")
        (iteration,) = p.ITERATION.unpack(payload)
        if iteration != self._posted:
            self._protocol_error(f"expected {what}, got MIXED({iteration})")
        self._posted = None
        self.iteration += 1
        return self.params

    def post_and_get(self, iteration=None):
        """post() then wait_mixed(): one gossip step. Returns the buffer (numpy view)."""
        self.post(iteration)
        return self.wait_mixed()

    def torch_view(self):
        """The buffer as a CPU torch.float32 tensor sharing its memory."""
        import torch
        return torch.from_numpy(self.params)

    def fail(self, message):
        """Tells the daemon that the trainer stops because of `message`, then closes."""
        if self._sock is not None:
            try:
                self._sock.sendall(p.encode_error(p.ERROR_ABORTED, str(message)))
            except OSError:
                pass
        self._drop()

    def close(self):
        """Ends the session cleanly (BYE). Safe to call twice."""
        if self._sock is not None:
            try:
                self._sock.sendall(p.encode(p.BYE_TYPE))
            except OSError:
                pass
        self._drop()

    @property
    def closed(self):
        return self._sock is None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None and not isinstance(exc, GossipError):
            self.fail(f"trainer raised {exc_type.__name__}: {exc}")
        else:
            self.close()
        return False

    def __del__(self):
        self._drop()

    # ---- internals

    def _connect(self, connect_timeout):
        deadline = time.monotonic() + connect_timeout
        try:
            mode = os.stat(self.socket_path).st_mode
        except OSError:
            mode = None  # not there yet: the daemon may still be starting
        if mode is not None and not stat.S_ISSOCK(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a socket"
            raise DaemonUnavailable(f"{self.socket_path} is {kind}: no gossipd listens there")
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.socket_path)
                self._sock = sock
                return
            except (FileNotFoundError, ConnectionRefusedError) as e:
                sock.close()
                if time.monotonic() >= deadline:
                    raise DaemonUnavailable(
                        f"no gossipd listens on {self.socket_path} ({e.strerror}) after "
                        f"{connect_timeout:g} s") from None
                time.sleep(0.05)
            except OSError as e:
                sock.close()
                raise DaemonUnavailable(f"cannot connect to {self.socket_path}: {e}") from None

    def _handshake(self, num_params):
        flags = p.HELLO_UPDATE if self.with_update else 0
        self._send(p.encode_hello(num_params, flags=flags), "HELLO")
        msg_type, payload, fds = self._read(time.monotonic() + self.timeout, "WELCOME")
        try:
            if msg_type != p.WELCOME_TYPE or len(payload) != p.WELCOME.size or len(fds) != 1:
                self._protocol_error(
                    f"expected WELCOME with one file descriptor, got "
                    f"{p.TYPE_NAMES.get(msg_type, msg_type)} with {len(fds)}")
            (n, dtype, flags, buffer_bytes, offset, start, node_id, num_nodes, update_offset,
             local_steps, _) = p.WELCOME.unpack(payload)

            def fits(at):
                return at % 4 == 0 and at + 4 * n <= buffer_bytes

            if n != num_params or dtype != p.DTYPES["float32"] or not fits(offset) or \
                    (self.with_update and (update_offset == 0 or not fits(update_offset))):
                self._protocol_error(f"WELCOME does not fit the HELLO: {n} parameters of dtype "
                                     f"{dtype} at offset {offset} (update {update_offset}) in "
                                     f"{buffer_bytes} bytes")
            try:
                self._mmap = mmap.mmap(fds[0], buffer_bytes, mmap.MAP_SHARED,
                                       mmap.PROT_READ | mmap.PROT_WRITE)
            except (OSError, ValueError, OverflowError) as e:
                self._protocol_error(f"cannot map the {buffer_bytes} bytes of the buffer WELCOME "
                                     f"passed: {e}")
        finally:
            for fd in fds:
                os.close(fd)
        self.num_params = n
        self.params = np.frombuffer(self._mmap, dtype=np.float32, count=n, offset=offset)
        if self.with_update:
            self.update = np.frombuffer(self._mmap, dtype=np.float32, count=n,
                                        offset=update_offset)
        self.buffer_initialized = bool(flags & p.FLAG_BUFFER_INITIALIZED)
        self.start_iteration = start
        self.iteration = start  # the next iteration to post
        self.node_id = node_id
        self.num_nodes = num_nodes
        # The trainer's own steps per round (training config local_steps; docs/attach.md).
        self.local_steps = max(1, local_steps)

    def _check_open(self):
        if self._sock is None:
            raise GossipError(f"the attach session on {self.socket_path} is closed")

    def _drop(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        # Views of the buffer held by the caller keep the mapping alive; it goes with the last.
        self.params = None
        self.update = None
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                pass
            self._mmap = None

    def _protocol_error(self, text):
        try:
            self._sock.sendall(p.encode_error(p.ERROR_PROTOCOL, text))
        except OSError:
            pass
        self._drop()
        raise ProtocolError(f"{self.socket_path}: {text}")

    def _send(self, data, what):
        try:
            self._sock.settimeout(self.timeout)
            self._sock.sendall(data)
        except socket.timeout:
            self._drop()
            raise GossipTimeout(f"gossipd did not take {what} within {self.timeout:g} s") from None
        except OSError as e:
            # The daemon may have said why before it closed (BYE at the end of training, ERROR
            # when it left the group): what it sent is still readable, and is the better answer.
            self._raise_pending(what)
            self._drop()
            raise DaemonGone(f"gossipd at {self.socket_path} is gone ({e.strerror or e}) when the "
                             f"trainer sent {what}") from None

    def _raise_pending(self, what):
        """Raises what a message already received says (BYE, ERROR); returns if there is none."""
        try:
            self._sock.setblocking(False)
            if not self._sock.recv(1, socket.MSG_PEEK):
                return
        except OSError:
            return
        self._read(time.monotonic() + 1.0, f"the answer to {what}")
        self._protocol_error(f"unexpected message from gossipd instead of the answer to {what}")

    def _recv_some(self, count, deadline, what, fds):
        """Up to `count` bytes; file descriptors that come with them are appended to `fds`."""
        left = deadline - time.monotonic()
        if left <= 0:
            self._drop()
            raise GossipTimeout(f"no {what} from gossipd at {self.socket_path} within "
                                f"{self.timeout:g} s")
        self._sock.settimeout(left)
        try:
            data, ancdata, _, _ = self._sock.recvmsg(count, socket.CMSG_SPACE(4))
        except socket.timeout:
            self._drop()
            raise GossipTimeout(f"no {what} from gossipd at {self.socket_path} within "
                                f"{self.timeout:g} s") from None
        except InterruptedError:
            return b""
        except OSError as e:
            self._drop()
            raise DaemonGone(f"gossipd at {self.socket_path} is gone ({e.strerror or e}) while the "
                             f"trainer waited for {what}") from None
        for level, kind, raw in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(raw) - len(raw) % 4
                fds.extend(np.frombuffer(raw[:usable], dtype=np.int32).tolist())
        if not data:
            for fd in fds:
                os.close(fd)
            self._drop()
            raise DaemonGone(f"gossipd at {self.socket_path} closed the connection (it exited or "
                             f"died) while the trainer waited for {what}")
        return data

    def _recv_exact(self, count, deadline, what, fds):
        buf = b""
        while len(buf) < count:
            buf += self._recv_some(count - len(buf), deadline, what, fds)
        return buf

    def _read(self, deadline, what):
        """One message as (type, payload, fds). ERROR and BYE raise."""
        fds = []
        magic, version, msg_type, size = p.HEADER.unpack(
            self._recv_exact(p.HEADER.size, deadline, what, fds))
        if magic != p.MAGIC or size > p.MAX_PAYLOAD_BYTES:
            self._protocol_error(f"bad message header (magic {magic:#x}, {size} payload bytes) "
                                 f"while waiting for {what}")
        payload = self._recv_exact(size, deadline, what, fds) if size else b""
        if msg_type == p.ERROR_TYPE and len(payload) >= p.ERROR_CODE.size:
            for fd in fds:
                os.close(fd)
            (code,) = p.ERROR_CODE.unpack_from(payload)
            text = payload[p.ERROR_CODE.size:].decode("utf-8", errors="replace")
            self._drop()
            kind = {p.ERROR_REFUSED: Refused, p.ERROR_PROTOCOL: ProtocolError}.get(code,
                                                                                   DaemonAborted)
            raise kind(f"gossipd at {self.socket_path}: {text}")
        if msg_type == p.BYE_TYPE:
            self._drop()
            raise TrainingFinished(f"gossipd at {self.socket_path} ended training (BYE) while "
                                   f"the trainer waited for {what}")
        if version != p.VERSION:
            self._protocol_error(f"gossipd sent protocol version {version}; this client speaks "
                                 f"version {p.VERSION}")
        return msg_type, payload, fds
