"""One module per check family, with the tool it drives and how its runs are batched across a
repository's labs: compiled code (sass), correctness, sanitizers, counters, timing and speed.
"""
