"""gossip_sgd: attach a trainer to gossipd and gossip its parameters (docs/attach.md).

    from gossip_sgd import Client               # numpy, any trainer
    from gossip_sgd.torch_optim import wrap     # PyTorch: step() = local step + gossip average
"""

from .client import ENV_SOCKET, Client
from .errors import (DaemonAborted, DaemonGone, DaemonUnavailable, GossipError, GossipTimeout,
                     InvalidArgument, ProtocolError, Refused, TrainingFinished)

__all__ = [
    "Client", "ENV_SOCKET", "GossipError", "DaemonUnavailable", "Refused", "DaemonGone",
    "DaemonAborted", "GossipTimeout", "ProtocolError", "TrainingFinished", "InvalidArgument",
]
