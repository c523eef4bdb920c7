"""PyTorch integration: an optimizer whose step() is the local step followed by the gossip average.

    model = Net().to(device)
    opt = wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))   # connects to gossipd
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()          # local step, then params <- sum_j W_ij params_j (D-PSGD)
    opt.close()

With `local_steps: H` in the daemon's training config, step() takes H local steps between rounds:
the H-th call posts the parameters and gets the round's result (the outer optimizer and the
compression run in gossipd); the daemon's `iterations` then counts rounds.

All gossiped parameters are flattened, in order, into the one float32 buffer shared with gossipd
(every node must build the same model, so that offset k means the same weight everywhere).
Parameters of another floating dtype are converted to float32 in the buffer and back. Buffers
(e.g. BatchNorm running statistics) are not gossiped; they stay local.

CPU float32 parameters are moved into the shared buffer once, at construction: each becomes a
view of its slice (`param.data`), so the optimizer's step writes straight into the buffer and a
gossip step copies nothing (parameters of other dtypes are copied in and out). CUDA parameters
are gathered into one flat device tensor, copied to a pinned host staging tensor (one
device-to-host transfer), then into the shared buffer; the mixed values return the same way. All
parameters must be on one device.
"""

import torch

from .client import Client
from .errors import InvalidArgument


class GossipOptimizer:
    """Wraps `optimizer`; step() runs it and then gossips `params` through `client`.

    params: the tensors to gossip (default: every parameter of the optimizer's groups, in order).
    client: a connected Client (default: one made from `socket_path` and **client_args with the
        parameters' total count).
    If the daemon hands over initialised parameters (resuming a checkpoint), they are loaded into
    the model here, before the first step.
    """

    def __init__(self, optimizer, params=None, client=None, socket_path=None, **client_args):
        self.optimizer = optimizer
        if params is None:
            params = [q for group in optimizer.param_groups for q in group["params"]]
        self.params = list(params)
        if not self.params:
            raise InvalidArgument("params: no parameters to gossip")
        devices = {q.device for q in self.params}
        if len(devices) != 1:
            raise InvalidArgument(f"params: all gossiped parameters must be on one device, got "
                                  f"{devices}")
        self.device = devices.pop()
        self.num_params = sum(q.numel() for q in self.params)
        if client is None:
            client = Client(socket_path, self.num_params, **client_args)
        elif client.num_params != self.num_params:
            raise InvalidArgument(f"client: it gossips {client.num_params} parameters, the model has "
                                  f"{self.num_params}")
        self.client = client
        # The daemon's local_steps H (training config; WELCOME carries it): step() runs the wrapped
        # optimizer every call and a round every H-th (the daemon's iterations count rounds).
        self.local_steps = getattr(client, "local_steps", 1)
        self._steps = 0
        self._shared = client.torch_view()  # CPU float32, the memfd itself
        # Which parameters are views of the shared buffer (CPU float32): nothing to copy for them.
        self._aliased = [False] * len(self.params)
        if self.device.type == "cuda":
            self._flat = torch.empty(self.num_params, dtype=torch.float32, device=self.device)
            self._staging = torch.empty(self.num_params, dtype=torch.float32, pin_memory=True)
        else:
            self._flat = self._shared
            self._staging = None
            self._alias_cpu_parameters(keep_buffer=client.buffer_initialized)
        if client.buffer_initialized:
            self._load_from_shared()

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)

    def step(self, closure=None):
        """The local step of the wrapped optimizer; every local_steps-th call also a round (the
        daemon's gossip or DiLoCo average, with its outer step and compression). Returns the
        step's loss."""
        loss = self.optimizer.step() if closure is None else self.optimizer.step(closure)
        self._steps += 1
        if self._steps % self.local_steps == 0:
            self.gossip()
        return loss

    @torch.no_grad()
    def _alias_cpu_parameters(self, keep_buffer):
        offset = 0
        for i, q in enumerate(self.params):
            n = q.numel()
            if q.dtype == torch.float32:
                view = self._shared[offset:offset + n].view(q.shape)
                if not keep_buffer:
                    view.copy_(q)
                q.data = view
                self._aliased[i] = True
            offset += n

    @torch.no_grad()
    def gossip(self):
        """Posts the parameters to gossipd and replaces them by the mixed values."""
        offset = 0
        for q, aliased in zip(self.params, self._aliased):
            n = q.numel()
            if not aliased:
                self._flat[offset:offset + n].copy_(q.reshape(-1))
            offset += n
        if self._staging is not None:
            self._staging.copy_(self._flat, non_blocking=True)
            torch.cuda.current_stream(self.device).synchronize()
            self._shared.copy_(self._staging)
        self.client.post_and_get()
        self._load_from_shared()

    @torch.no_grad()
    def _load_from_shared(self):
        if self._staging is not None:
            self._staging.copy_(self._shared)
            self._flat.copy_(self._staging, non_blocking=True)
        offset = 0
        for q, aliased in zip(self.params, self._aliased):
            n = q.numel()
            if not aliased:
                q.copy_(self._flat[offset:offset + n].view_as(q))
            offset += n

    def close(self):
        """Ends the session cleanly (BYE)."""
        self.client.close()


def wrap(model, optimizer, **kwargs):
    """GossipOptimizer over all of `model`'s parameters (model.parameters() order)."""
    return GossipOptimizer(optimizer, params=list(model.parameters()), **kwargs)
