"""Exceptions of gossip_sgd: every failure of the attach protocol is a GossipError.

A trainer that catches GossipError stops cleanly whatever went wrong; the subclasses say what:

  DaemonUnavailable  no gossipd listens on the socket (not started, wrong path, another trainer
                     already attached)
  Refused            gossipd refused the handshake: protocol version, dtype or parameter count
                     (the daemon's text names both sides)
  DaemonGone         gossipd closed the connection or died (EOF, reset) mid-session
  DaemonAborted      gossipd stopped and said why (left the group, a neighbour failed, a signal)
  GossipTimeout      no answer within the client's timeout (also a TimeoutError)
  ProtocolError      a malformed or unexpected message (either side)
  TrainingFinished   gossipd ended training (BYE); not a failure, but no more iterations
  InvalidArgument    an argument of the API is of the wrong type or out of range (names it; also
                     a ValueError); raised before anything is sent, the client stays as it was
"""


class GossipError(Exception):
    """Base class of every gossip_sgd error."""


class DaemonUnavailable(GossipError):
    """Nobody listens on the attach socket."""


class Refused(GossipError):
    """The daemon refused the handshake (version, dtype or parameter count)."""


class DaemonGone(GossipError):
    """The daemon closed the connection or died."""


class DaemonAborted(GossipError):
    """The daemon stopped and sent its reason."""


class GossipTimeout(GossipError, TimeoutError):
    """No answer from the daemon within the timeout."""


class ProtocolError(GossipError):
    """A malformed or unexpected message."""


class TrainingFinished(GossipError):
    """The daemon ended training with BYE: there are no more iterations."""


class InvalidArgument(GossipError, ValueError):
    """An argument of the API is of the wrong type or out of its range; the text names it."""
