"""The submitted files of one commit, copied out of a student's repository into a scratch folder.

Only the labs' files are taken, read from git's object store (no checkout: nothing of the
student's repository changes and none of its hooks or filters runs). A link, a folder or a
submodule at a lab's path is recreated as such, so the grader refuses it with the same message
as in a work tree; a file over the size limit is cut just past the limit (refused as too large),
as is one whose size git cannot tell: a blob that ``cuda-grader collect``'s size filter left on
the server is not in the clone.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..host.safeio import SOURCE_LIMIT_BYTES
from ..isolation import gitinfo


def export(repo: Path, commit: str, rels: list[str], dest: Path) -> Path:
    """Copy what ``commit`` holds at each of ``rels`` to the same place below ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    entries = gitinfo.tree_entries(repo, commit, ["labs", *rels])
    if "labs" in entries and entries["labs"].kind == "tree":
        (dest / "labs").mkdir(exist_ok=True)
    for rel in rels:
        entry = entries.get(rel)
        if entry is None:
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.is_link:
            link = gitinfo.blob(repo, entry.oid) or b"?"
            os.symlink(os.fsdecode(link[:4096]), target)
        elif entry.is_file:
            fits = 0 <= entry.size <= SOURCE_LIMIT_BYTES
            data = gitinfo.blob(repo, entry.oid) if fits else b"\0" * (SOURCE_LIMIT_BYTES + 1)
            if data is not None:
                target.write_bytes(data)
        else:  # a tree or a submodule where the file belongs
            target.mkdir(exist_ok=True)
    return dest
