#!/usr/bin/python3
"""Independent reference for tests/sgd/torch_reference_test.cc: loss and gradient of a gossip_sgd
model computed by PyTorch autograd in float64 from the flat layout of sgd/model_spec.h
(per layer: W column-major out x in, then b).

usage: torch_grad_reference.py DIR KIND L2 SIZES   (SIZES like 7,6,3)
reads DIR/params.f64, DIR/x.f64 (B x in, row-major), DIR/y.f64 (labels or targets);
writes DIR/grad.f64 and DIR/loss.txt."""
import os
import sys

import numpy as np
import torch


def main():
    d, kind, l2, sizes = sys.argv[1], sys.argv[2], float(sys.argv[3]), [int(s) for s in sys.argv[4].split(",")]
    flat = torch.tensor(np.fromfile(os.path.join(d, "params.f64"), dtype=np.float64), requires_grad=True)
    x = torch.tensor(np.fromfile(os.path.join(d, "x.f64"), dtype=np.float64)).reshape(-1, sizes[0])
    y = torch.tensor(np.fromfile(os.path.join(d, "y.f64"), dtype=np.float64))
    h, off, penalty = x, 0, 0.0
    for layer in range(len(sizes) - 1):
        n_in, n_out = sizes[layer], sizes[layer + 1]
        w = flat[off:off + n_in * n_out].reshape(n_in, n_out).T  # column-major out x in
        off += n_in * n_out
        b = flat[off:off + n_out]
        off += n_out
        h = h @ w.T + b
        if layer + 2 < len(sizes):
            h = torch.relu(h)
        penalty = penalty + 0.5 * l2 * (w * w).sum()
    assert off == flat.numel()
    if kind == "least_squares":
        loss = 0.5 * ((h[:, 0] - y) ** 2).mean()
    elif kind == "logistic":
        loss = torch.nn.functional.binary_cross_entropy_with_logits(h[:, 0], y)
    else:
        loss = torch.nn.functional.cross_entropy(h, y.long())
    loss = loss + penalty
    loss.backward()
    flat.grad.numpy().tofile(os.path.join(d, "grad.f64"))
    with open(os.path.join(d, "loss.txt"), "w") as f:
        f.write(repr(loss.item()))


if __name__ == "__main__":
    main()
