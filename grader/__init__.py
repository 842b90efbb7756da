"""Grades student CUDA kernels for labs on GPU memory architecture."""

__version__ = "0.1.0"
