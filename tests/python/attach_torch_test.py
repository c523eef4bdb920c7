"""Tests of gossip_sgd.torch_optim (GossipOptimizer / wrap) against the real C++ AttachServer
(tests/attach/attach_peer). The model's loss is the ring's quadratic for node 0, so a torch SGD
step is the step the numpy replay of the ring takes: the parameters after each step() must match
it. `--device cuda` runs the same through the pinned-memory staging path and exits 77 (skipped)
where there is no CUDA device. Run: ATTACH_PEER=... python3 this [--device cpu|cuda]."""

import sys
import unittest

import numpy as np
import torch

import attach_helpers as h
from gossip_sgd.torch_optim import GossipOptimizer, wrap

DEVICE = "cpu"


class Model(torch.nn.Module):
    """644 parameters in three tensors of different shapes (one not contiguous-friendly 3-D)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(30, 20)
        self.extra = torch.nn.Parameter(torch.randn(3, 4, 2))

    def flat(self):
        return torch.cat([q.reshape(-1) for q in self.parameters()])


class TorchTest(h.PeerTestCase):
    def test_step_is_the_local_step_then_the_ring_average(self):
        nodes, lr, iterations = 4, 0.1, 6
        torch.manual_seed(3)
        model = Model().to(DEVICE)
        n = sum(q.numel() for q in model.parameters())
        peer = self.peer("--nodes", nodes, "--lr", lr, "--iterations", iterations,
                         "--expect-params", n)
        x0 = model.flat().detach().cpu().numpy().copy()
        expected = h.ring_reference(x0, nodes, lr, iterations)
        target0 = torch.from_numpy(h.targets(nodes, n)[0]).to(DEVICE)

        opt = wrap(model, torch.optim.SGD(model.parameters(), lr=lr), socket_path=peer.socket,
                   timeout=30)
        self.assertEqual(opt.num_params, n)
        if DEVICE == "cpu":
            # Zero copy: each parameter is a view of its slice of the shared buffer, in order.
            base = opt.client.params.ctypes.data
            offsets = [q.data_ptr() - base for q in model.parameters()]
            sizes = [q.numel() for q in model.parameters()]
            self.assertEqual(offsets, [4 * sum(sizes[:i]) for i in range(len(sizes))])
        for i in range(iterations):
            opt.zero_grad()
            loss = 0.5 * ((model.flat() - target0) ** 2).sum()
            loss.backward()
            opt.step()
            got = model.flat().detach().cpu().numpy()
            # torch's SGD kernel may fuse p - lr * g into one FMA; the replay rounds twice.
            np.testing.assert_allclose(got, expected[i], rtol=2e-6, atol=2e-6,
                                       err_msg=f"iteration {i}")
            self.assertEqual(model.linear.weight.device.type, DEVICE)
        opt.close()
        self.assertEqual(peer.finish()[0], 0)

    def test_initial_parameters_from_the_daemon_are_loaded_before_the_first_step(self):
        model = Model().to(DEVICE)
        n = sum(q.numel() for q in model.parameters())
        peer = self.peer("--iterations", 1, "--expect-params", n, "--initial", 0.25)
        opt = GossipOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                              socket_path=peer.socket, timeout=30)
        self.assertTrue(opt.client.buffer_initialized)
        for q in model.parameters():
            self.assertTrue(torch.all(q == 0.25).item())
        opt.close()

    def test_a_client_of_another_size_is_refused_here(self):
        model = Model()
        peer = self.peer("--iterations", 1)
        from gossip_sgd import Client
        client = Client(peer.socket, 10, timeout=30)
        self.addCleanup(client.close)
        with self.assertRaises(ValueError) as cm:
            wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), client=client)
        self.assertIn("644", str(cm.exception))


if __name__ == "__main__":
    if "--device" in sys.argv:
        i = sys.argv.index("--device")
        DEVICE = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("attach_torch_test: no CUDA device (or torch without CUDA); skipped")
        sys.exit(77)
    unittest.main()
