#!/usr/bin/python3
"""Reference for bench/topo_bench: scipy.sparse.linalg.eigsh on the same mixing matrix.

Usage: topo_reference.py DIR   (DIR holds n.txt, i.bin, j.bin, w.bin written by topo_bench:
int32 row and column indices and float64 weights of W, x_i <- sum_j W_ij x_j).

Prints one JSON line: {"status": "ok" | "error", "rho": ..., "gap": ..., "lambda2": ...,
"lambda_n": ..., "seconds": ...}. What a scipy user would do: the two largest algebraic
eigenvalues (1 and lambda_2) and the smallest (lambda_n) with eigsh's default Lanczos (ARPACK),
tol=0 (machine precision); rho = max(lambda_2, -lambda_n). The caller caps the run at 180 s.
"""
import json
import sys
import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh, ArpackNoConvergence


def main():
    d = sys.argv[1]
    n = int(open(f"{d}/n.txt").read())
    i = np.fromfile(f"{d}/i.bin", dtype=np.int32)
    j = np.fromfile(f"{d}/j.bin", dtype=np.int32)
    w = np.fromfile(f"{d}/w.bin", dtype=np.float64)
    W = sp.csr_matrix((w, (i, j)), shape=(n, n))
    t0 = time.perf_counter()
    try:
        top = eigsh(W, k=2, which="LA", tol=0, return_eigenvectors=False)
        bottom = eigsh(W, k=1, which="SA", tol=0, return_eigenvectors=False)
    except ArpackNoConvergence as e:
        print(json.dumps({"status": "error", "error": "ARPACK did not converge",
                          "seconds": time.perf_counter() - t0}))
        return
    secs = time.perf_counter() - t0
    lam2 = float(np.sort(top)[0])
    lamn = float(bottom[0])
    rho = max(lam2, -lamn)
    print(json.dumps({"status": "ok", "rho": rho, "gap": 1.0 - rho, "lambda2": lam2,
                      "lambda_n": lamn, "seconds": secs}))


if __name__ == "__main__":
    main()
