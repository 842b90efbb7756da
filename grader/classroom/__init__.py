"""Grading a whole class: roster, scheduling over the CPU and every GPU, gradebook exports,
resume, shards and their merge, and the difference between two runs."""
