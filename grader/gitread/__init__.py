"""Reading a git repository the grader did not create: its config and refs read by the grader itself
(through caps, no link followed), its objects through a repository of the grader's own, so that git
never reads a student's configuration.
"""
