"""The hardware-counter family: the checks judged on Nsight Compute's counts (``ncu``), a
repository's cases profiled in one session (``batch``), a failing check's source lines (``lines``),
the timed case's DRAM traffic for the roofline (``traffic``), the record of which kernels ran
(``launched``), and the trusted replayer that reads the student's counts without their host code
(``replay``, the default source).
"""
