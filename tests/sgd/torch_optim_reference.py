#!/usr/bin/python3
"""Independent reference for tests/sgd/torch_optim_test.cc: PyTorch's own optimizers and bfloat16
conversion on inputs the test writes, results written back for the test to compare.

usage: torch_optim_reference.py MODE DIR ARGS...
  adamw DIR LR BETA1 BETA2 EPS WD STEPS
      torch.optim.AdamW (foreach=False) from DIR/x0.f64 with the given gradients
      DIR/grads.f64 (STEPS x n, row t = the gradient of step t): DIR/traj32.f64 (float32 run)
      and DIR/traj64.f64 (float64 run), STEPS x n, row t = the parameters after step t.
  adamw_quadratic DIR LR BETA1 BETA2 EPS WD STEPS
      torch.optim.AdamW in float64 on f(x) = |Ax - b|^2 / (2m) from DIR/x0.f64, with A (m x n,
      row-major) in DIR/a.f64 and b in DIR/b.f64: DIR/traj64.f64.
  sgd DIR LR MOMENTUM NESTEROV STEPS
      torch.optim.SGD in float64 from DIR/x0.f64 with DIR/grads.f64 as the gradients:
      DIR/traj64.f64.
  bf16 DIR
      DIR/x.f32 converted by torch's float32 -> bfloat16 cast: DIR/words.u16."""
import os
import sys

import numpy as np
import torch


def path(d, name):
    return os.path.join(d, name)


def run(opt_factory, x0, grads, dtype):
    p = torch.nn.Parameter(torch.tensor(x0, dtype=dtype))
    opt = opt_factory([p])
    traj = []
    for g in grads:
        p.grad = torch.tensor(g, dtype=dtype)
        opt.step()
        traj.append(p.detach().to(torch.float64).numpy().copy())
    return np.array(traj)


def adamw_factory(args):
    lr, b1, b2, eps, wd = (float(a) for a in args[:5])
    return lambda params: torch.optim.AdamW(params, lr=lr, betas=(b1, b2), eps=eps,
                                            weight_decay=wd, foreach=False)


def main():
    d, mode, args = sys.argv[2], sys.argv[1], sys.argv[3:]
    if mode == "adamw":
        steps = int(args[5])
        x0 = np.fromfile(path(d, "x0.f64"))
        grads = np.fromfile(path(d, "grads.f64")).reshape(steps, -1)
        factory = adamw_factory(args)
        # The float32 run sees the gradients rounded to float32, exactly what the test feeds ours.
        run(factory, x0.astype(np.float32), grads.astype(np.float32),
            torch.float32).tofile(path(d, "traj32.f64"))
        run(factory, x0, grads, torch.float64).tofile(path(d, "traj64.f64"))
    elif mode == "adamw_quadratic":
        steps = int(args[5])
        x0 = np.fromfile(path(d, "x0.f64"))
        b = torch.tensor(np.fromfile(path(d, "b.f64")))
        a = torch.tensor(np.fromfile(path(d, "a.f64"))).reshape(b.numel(), -1)
        p = torch.nn.Parameter(torch.tensor(x0))
        opt = adamw_factory(args)([p])
        traj = []
        for _ in range(steps):
            opt.zero_grad()
            loss = ((a @ p - b) ** 2).sum() / (2 * b.numel())
            loss.backward()
            opt.step()
            traj.append(p.detach().numpy().copy())
        np.array(traj).tofile(path(d, "traj64.f64"))
    elif mode == "sgd":
        lr, momentum, nesterov, steps = float(args[0]), float(args[1]), args[2] == "1", int(args[3])
        x0 = np.fromfile(path(d, "x0.f64"))
        grads = np.fromfile(path(d, "grads.f64")).reshape(steps, -1)
        factory = lambda params: torch.optim.SGD(params, lr=lr, momentum=momentum,
                                                 nesterov=nesterov, foreach=False)
        run(factory, x0, grads, torch.float64).tofile(path(d, "traj64.f64"))
    elif mode == "bf16":
        x = torch.from_numpy(np.fromfile(path(d, "x.f32"), dtype=np.float32))
        x.to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint16).tofile(
            path(d, "words.u16"))
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
