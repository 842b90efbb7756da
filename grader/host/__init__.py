"""The machine the grader runs on: its GPUs (probe, NVML list, health, locks), the CUDA toolchain,
private folders, locks between graders, safe file access, process groups, and fetching a student's
repository into a clone of the grader's own.
"""
