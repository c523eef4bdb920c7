#!/usr/bin/python3
"""PyTorch reference for bench/sgd_bench: one training step (forward, cross-entropy, backward,
SGD with momentum) of the same MLP on the same batch shape, timed the same way. Prints one line:
`samples_per_s <value> threads <n> blas_threads <n>`. Run by sgd_bench with /usr/bin/python3
(Debian python3-torch) on the cpu, and with `--device cuda` by the python that holds a CUDA build
of PyTorch on a GPU machine (sgd_bench --torch-python)."""
import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--sizes", default="784,256,128,10")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    sizes = [int(s) for s in a.sizes.split(",")]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    dev = torch.device(a.device)
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(a.batch, sizes[0], generator=gen).to(dev)
    y = torch.randint(0, sizes[-1], (a.batch,), generator=gen).to(dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(20):
        step()
    sync()
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        step()
        steps += 1
        if dev.type == "cuda" and steps % 16 == 0:
            sync()  # bound the queue so the clock check sees the device's pace
    sync()
    elapsed = time.perf_counter() - start
    print(f"samples_per_s {steps * a.batch / elapsed:.1f} threads {torch.get_num_threads()} "
          f"blas_threads {blas_threads()}")


def blas_threads():
    """Threads of the OpenBLAS that Debian's torch reaches through the BLAS alternative (torch's own
    set_num_threads does not set them; sgd_bench passes OPENBLAS_NUM_THREADS), or -1."""
    import ctypes
    try:
        lib = ctypes.CDLL("libblas.so.3")
        lib.openblas_get_num_threads.restype = ctypes.c_int
        return lib.openblas_get_num_threads()
    except (OSError, AttributeError):
        return -1


if __name__ == "__main__":
    main()
