"""Grading a submission and a repository: the plan of a lab's checks, one lab's flow, a repository's
flow, the timing rehearsal, and the identity of what was graded.
"""
