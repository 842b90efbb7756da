"""Inputs and the exact oracle for boundary_checks (xp is numpy in the grader, cupy in the worker)."""


def generate(params, seed, xp):
    m, n, k = int(params["m"]), int(params["n"]), int(params["k"])
    rs = xp.random.RandomState(seed)
    a = (rs.random_sample((m, n)) * 2 - 1).astype(xp.float32)
    b = (rs.random_sample((n, k)) * 2 - 1).astype(xp.float32)
    return {"M": a, "N": b}


def expected(inputs, params):
    import numpy as np

    return {"P": inputs["M"].astype(np.float64) @ inputs["N"].astype(np.float64)}
