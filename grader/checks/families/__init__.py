"""The check families behind one protocol (``base.CheckFamily``) and found through one registry
(``registry.FAMILIES``): what each grades, in report order, which of its checks wait for
correctness or need the course's files, its part of a lab's README, and its tool runs (started
beside the correctness cases, shared across a repository's labs).
"""
