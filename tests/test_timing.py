"""The timing's pure parts: when sampling stops early."""

from __future__ import annotations


def test_a_kernel_far_slower_than_every_baseline_ends_the_sampling():
    from grader.timing import TOO_SLOW_FACTOR, far_too_slow

    baselines = [[2.0, 2.1], [3.0, 2.9]]
    assert not far_too_slow(3.0 * TOO_SLOW_FACTOR - 0.1, baselines)
    assert far_too_slow(3.0 * TOO_SLOW_FACTOR + 0.1, baselines)
    assert not far_too_slow(1e9, [[], []])  # nothing to compare with yet
