"""A course's late policy, in one small YAML file, and what it takes off a late student's score.

    late_days: 3           # how many days after a student's deadline late work is still collected (0-366)
    penalty_per_day: 10    # percent of the score taken for each day (or part of one) late (0-100)
    grace_minutes: 15      # a collection this soon after a deadline counts as on time (a job's delay; 0-1440)
    graded_commit: best    # latest (default) or best: which collected commit counts (below)

Lateness is measured from when ``cuda-grader collect`` first found the graded commit, never from
what the commit says about its own date: a student can set that to anything.

``graded_commit`` says which commit counts when a student's work changed after their deadline:
``latest``, the last one collected before the cut-off (late, and priced as such); or ``best``,
whichever of the on-time commit (the last one collected by the deadline) and that late one scores
higher once the late one's penalty is taken: allowing late days then never lowers a grade. With
``latest``, the grade says that an on-time commit exists. The roster ``collect`` writes carries both
commits (``commit``, ``ontime_commit``) and this choice (``graded_commit``); ``grade-class`` grades
both where the choice is ``best``.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import SpecError
from ..labspec.specload import read_yaml, unknown_key

DAY = datetime.timedelta(days=1)
#: The values of ``graded_commit``: the last commit collected before the cut-off, or the better of it and the on-time one.
GRADED_COMMIT = ("latest", "best")


@dataclass(frozen=True)
class LatePolicy:
    late_days: int = 0
    penalty_per_day: float = 0.0  # percent
    grace_minutes: float = 15.0
    graded_commit: str = "latest"  # one of GRADED_COMMIT

    @property
    def grace(self) -> datetime.timedelta:
        return datetime.timedelta(minutes=self.grace_minutes)

    def cutoff(self, deadline: datetime.datetime) -> datetime.datetime:
        """The last moment work is collected for a student with ``deadline``."""
        return deadline + self.late_days * DAY + self.grace

    def days_late(self, deadline: datetime.datetime, first_seen: datetime.datetime) -> int:
        """Whole days (a part of one counts) between the deadline and when the work was first collected."""
        late = first_seen - deadline - self.grace
        return 0 if late <= datetime.timedelta(0) else math.ceil(late / DAY)

    def penalty(self, days: int) -> float:
        """The fraction of the score taken for ``days`` late (all of it past the allowed days)."""
        if days > self.late_days:
            return 1.0
        return min(1.0, days * self.penalty_per_day / 100)

    def ontime_commit(self, collections: Sequence[Mapping[str, str]], deadline: datetime.datetime) -> str:
        """The commit of the last collection at or before ``deadline`` and its grace ("" when none):
        ``collections`` as ``collected.json`` keeps them (``commit``, ``at`` in ISO 8601)."""
        on_time = [c["commit"] for c in collections if _time(c["at"]) <= deadline + self.grace]
        return on_time[-1] if on_time else ""

    def roster_columns(self, collections: Sequence[Mapping[str, str]], deadline: datetime.datetime,
                       graded: str) -> dict[str, str]:
        """The roster's ``ontime_commit`` (empty when none, or when it is the ``graded`` commit
        itself) and ``graded_commit`` columns for one student."""
        ontime = self.ontime_commit(collections, deadline)
        return {"ontime_commit": "" if ontime == graded else ontime, "graded_commit": self.graded_commit}


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))


def _number(key: str, value: Any, path: Path) -> float | int:
    most, expected = BOUNDS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:  # NaN too
        shown = repr(value) if isinstance(value, (int, float, str)) else f"a {type(value).__name__}"
        raise SpecError(f"expected a number of 0 or more, got {shown[:60]}", path=path, key=key)
    if value > most:
        raise SpecError(f"expected {expected}, got {value!r}", path=path, key=key)
    if key == "late_days" and value != int(value):
        raise SpecError(f"expected a whole number of days, got {value!r}", path=path, key=key)
    return int(value) if key == "late_days" else float(value)


#: The largest value of each key, and what it counts: a greater one means nothing to a course, and
#: pushes a deadline past what a date can hold (after the year 9999).
BOUNDS = {"late_days": (366, "at most 366 days"), "penalty_per_day": (100, "a percentage of 100 or less"),
          "grace_minutes": (24 * 60, "at most 1440 minutes (a day)")}


def load_policy(path: Path) -> LatePolicy:
    """The policy in ``path``; every error names the file, the key and the value."""
    data = read_yaml(path)
    fields = {f.name: f for f in dataclasses.fields(LatePolicy)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            raise SpecError(unknown_key(str(key), list(fields)), path=path, key=str(key))
        if key == "graded_commit":
            if value not in GRADED_COMMIT:
                raise SpecError(f"expected {' or '.join(GRADED_COMMIT)}, got {value!r}", path=path, key=key)
            values[key] = value
        else:
            values[key] = _number(key, value, path)
    return LatePolicy(**values)
