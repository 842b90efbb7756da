"""Inputs and the exact oracle for memory_types (xp is numpy in the grader, cupy in the worker)."""


def generate(params, seed, xp):
    n, w = int(params["n"]), int(params["mask_width"])
    rs = xp.random.RandomState(seed)
    data = (rs.random_sample(n) * 2 - 1).astype(xp.float32)
    mask = (rs.random_sample(w) * 2 - 1).astype(xp.float32)
    return {"in": data, "mask": mask}


def expected(inputs, params):
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    x = inputs["in"].astype(np.float64)
    mask = inputs["mask"].astype(np.float64)
    r = len(mask) // 2
    padded = np.concatenate([np.zeros(r), x, np.zeros(r)])
    return {"out": sliding_window_view(padded, len(mask)) @ mask}
