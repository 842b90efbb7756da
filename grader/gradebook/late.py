"""A course's late policy, in one small YAML file, and what it takes off a late student's score.

    late_days: 3           # how many days after a student's deadline late work is still collected (0-366)
    penalty_per_day: 10    # percent of the score taken for each day (or part of one) late (0-100)
    grace_minutes: 15      # a collection this soon after a deadline counts as on time (a job's delay; 0-1440)

Lateness is measured from when ``cuda-grader collect`` first found the graded commit, never from
what the commit says about its own date: a student can set that to anything.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from ..labspec.specload import read_yaml, unknown_key

DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class LatePolicy:
    late_days: int = 0
    penalty_per_day: float = 0.0  # percent
    grace_minutes: float = 15.0

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


#: The largest value of each key, and what it counts: a greater one means nothing to a course, and
#: pushes a deadline past what a date can hold (after the year 9999).
BOUNDS = {"late_days": (366, "at most 366 days"), "penalty_per_day": (100, "a percentage of 100 or less"),
          "grace_minutes": (24 * 60, "at most 1440 minutes (a day)")}


def load_policy(path: Path) -> LatePolicy:
    """The policy in ``path``; every error names the file, the key and the value."""
    data = read_yaml(path)
    fields = {f.name: f for f in dataclasses.fields(LatePolicy)}
    values: dict[str, float | int] = {}
    for key, value in data.items():
        if key not in fields:
            raise SpecError(unknown_key(str(key), list(fields)), path=path, key=str(key))
        most, expected = BOUNDS[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:  # NaN too
            shown = repr(value) if isinstance(value, (int, float, str)) else f"a {type(value).__name__}"
            raise SpecError(f"expected a number of 0 or more, got {shown[:60]}", path=path, key=key)
        if value > most:
            raise SpecError(f"expected {expected}, got {value!r}", path=path, key=key)
        if key == "late_days" and value != int(value):
            raise SpecError(f"expected a whole number of days, got {value!r}", path=path, key=key)
        values[key] = int(value) if key == "late_days" else float(value)
    return LatePolicy(**values)  # type: ignore[arg-type]
