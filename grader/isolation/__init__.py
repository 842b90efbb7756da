"""Where student code runs and what crosses the boundary: the sandbox, the worker processes and their
replies, tool runs, the build, the trusted worker, and the options of a grading run.
"""
