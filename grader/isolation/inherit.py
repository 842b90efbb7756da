"""What a grading process started by the grader (a class's lane) takes from its parent.

A lane is a fresh Python process (``spawn``): without this it would find the labs again from its
own defaults (no ``--labs``: the course checkout it happens to be installed in, or a student's
bundle in the current folder), draw graded inputs from a secret of its own, and show its sandboxes
the other students' folders of a class. The parent captures what it resolved, once, and the lane
makes it its run's context (:mod:`grader.context`) before grading anything; its options
(``GradeOptions``) travel with each job.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..context import GpuTurns, LabsLocation, LabsSearch, RunContext, current, enter
from ..labspec import paths
from . import sandbox


@dataclass(frozen=True)
class Inherited:
    labs: LabsLocation  # where the parent found the labs, and how
    secret: str  # the parent's run secret (GRADER_SECRET, in the environment, still comes first)
    kept_out: tuple[str, ...] = ()  # folders the parent keeps out of its sandboxes (a class's students)


def capture() -> Inherited:
    """The parent's state, to hand to a process it starts (the labs folder as an absolute path:
    ``--labs labs`` means the parent's ``labs``, wherever the child's current folder is)."""
    found = paths.locate_labs()
    if found.path is not None:
        found = dataclasses.replace(found, path=found.path.absolute())
    return Inherited(found, current().secret, sandbox.kept_out_now())


def adopt(state: Inherited, turns: GpuTurns | None = None) -> RunContext:
    """In the started process, before anything else: its run's context, for good (the labs and the
    secret of the parent, and ``turns``, the GPU's where it shares it), and the parent's folders
    kept out of its sandboxes."""
    run = RunContext(labs=LabsSearch(pinned=state.labs), secret=state.secret, turns=turns, kept_out=state.kept_out)
    enter(run)
    return run
