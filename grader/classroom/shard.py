"""``--shard i/n``: a deterministic slice of the class, so that many machines share one roster.

Students are sorted by id and dealt round-robin: shard ``i`` (1-based) gets the ``i``-th, the
``i+n``-th, ... The slice depends only on the roster's ids, never on the order of its lines or on
the machine, and the shards differ in size by at most one student.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ..errors import GraderError


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def select(self, ids: Sequence[str]) -> set[str]:
        """The ids of this shard, out of every id of the class."""
        return {sid for k, sid in enumerate(sorted(ids)) if k % self.count == self.index - 1}


def parse(text: str) -> Shard:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m:
        raise GraderError(f"--shard: expected I/N (for example 2/4), got {text!r}")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1 or not 1 <= index <= count:
        raise GraderError(f"--shard {text}: I must be between 1 and N (shards are numbered from 1)")
    return Shard(index, count)
