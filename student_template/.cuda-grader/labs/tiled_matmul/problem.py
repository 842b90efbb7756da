"""Inputs and the exact oracle for tiled_matmul (xp is numpy in the grader, cupy in the worker)."""


def generate(params, seed, xp):
    w = int(params["width"])
    rs = xp.random.RandomState(seed)
    m = (rs.random_sample((w, w)) * 2 - 1).astype(xp.float32)
    n = (rs.random_sample((w, w)) * 2 - 1).astype(xp.float32)
    return {"M": m, "N": n}


def expected(inputs, params):
    import numpy as np

    return {"P": inputs["M"].astype(np.float64) @ inputs["N"].astype(np.float64)}
