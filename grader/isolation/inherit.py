"""What a grading process started by the grader (a class's lane) takes from its parent.

A lane is a fresh Python process (``spawn``): without this it would find the labs again from its
own defaults (no ``--labs``: the course checkout it happens to be installed in, or a student's
bundle in the current folder), draw graded inputs from a secret of its own, and show its sandboxes
the other students' folders of a class. The parent captures what it resolved, once, and the lane
adopts it before grading anything; its options (``GradeOptions``) travel with each job.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..labspec import paths
from . import options, sandbox


@dataclass(frozen=True)
class Inherited:
    labs: paths.LabsLocation  # where the parent found the labs, and how
    secret: str  # the parent's run secret (GRADER_SECRET, in the environment, still comes first)
    kept_out: tuple[str, ...] = ()  # folders the parent keeps out of its sandboxes (a class's students)


def capture() -> Inherited:
    """The parent's state, to hand to a process it starts (the labs folder as an absolute path:
    ``--labs labs`` means the parent's ``labs``, wherever the child's current folder is)."""
    found = paths.locate_labs()
    if found.path is not None:
        found = dataclasses.replace(found, path=found.path.absolute())
    return Inherited(found, options.run_secret(), sandbox.kept_out_now())


def adopt(state: Inherited) -> None:
    """In the started process, before anything else: the labs and the secret of the parent."""
    paths.pin(state.labs)
    options.use_run_secret(state.secret)
    sandbox.keep_out(state.kept_out)
