"""Inputs and the exact oracle for corner_turning (xp is numpy in the grader, cupy in the worker).

N is handed to the student as the column-major buffer of a width x width matrix: the buffer is
a (width, width) array whose row c holds column c of the matrix, so N_mat = buf.T.
"""


def generate(params, seed, xp):
    w = int(params["width"])
    rs = xp.random.RandomState(seed)
    m = (rs.random_sample((w, w)) * 2 - 1).astype(xp.float32)
    # buf[c, r] = N_mat[r, c]: the column-major storage of N_mat, element (r, c) at c * w + r
    n = (rs.random_sample((w, w)) * 2 - 1).astype(xp.float32)
    return {"M": m, "N": n}


def expected(inputs, params):
    import numpy as np

    w = int(params["width"])
    n_mat = inputs["N"].reshape(w, w).T  # read the column-major buffer back as the matrix
    return {"P": inputs["M"].astype(np.float64) @ n_mat.astype(np.float64)}
