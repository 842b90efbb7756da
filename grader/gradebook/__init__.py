"""A class's results: a student's row, grades.csv, Gradescope's results.json, summary.md and its plots, merging shards and comparing two runs."""
