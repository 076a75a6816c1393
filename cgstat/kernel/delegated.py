"""Users' delegated subtrees: where one starts, and the cap on the folders walked below it.

systemd runs each user's manager as user@<UID>.service and delegates that subtree to the
user (systemd.resource-control(5) Delegate=; "Control Group APIs and Delegation"): the user
may create any number of cgroups below it, with any name. The first such path component is
the delegation point (a folder of that name deeper down was made by the user). Reads
nothing: the walk (kernel/walk.py) asks which names start a subtree and what to admit.
"""

from __future__ import annotations

import heapq
import re
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from cgstat.text import quote

if TYPE_CHECKING:
    from cgstat.kernel.tree import Listing

DELEGATED = re.compile(r"^user@[0-9]+\.service$")  # a delegation point's folder name
MAX_USER_CGROUPS = 1000  # folders walked below one user@<UID>.service, per hierarchy

Child = Tuple[str, str, int]  # (folder name, local path, inode), as the walk lists them


class SubtreeCaps:
    """The cap on folders admitted below each delegated subtree during one walk of one
    hierarchy: once `cap` folders of a subtree are in, it admits no more; the folders seen
    and left out are counted into `left_out` (subtree path -> count). Which folders are
    admitted does not depend on listing order: each listing admits its smallest names."""

    __slots__ = ("cap", "used", "left_out")

    def __init__(self, cap: Optional[int], left_out: Optional[Dict[str, int]]):
        self.cap = cap  # None: no cap (admit() is then never asked)
        self.used: Dict[str, int] = {}  # subtree -> folders admitted so far
        self.left_out = left_out

    def admit(self, subtree: str, listing: Listing) -> List[Child]:
        """The sub-folders of one listing in `subtree` that are admitted, largest name
        first (the walk pops them from a stack: smallest first). The listing is read whole,
        holding no more than the admitted ones however long it is."""
        assert self.cap is not None
        budget = max(0, self.cap - self.used.get(subtree, 0))
        dirs = listing.dirs()
        children = heapq.nsmallest(budget, dirs) if budget else []
        for _ in dirs:  # the rest: file names and a count
            pass
        self.used[subtree] = self.used.get(subtree, 0) + len(children)
        dropped = listing.dirs_seen - len(children)
        if dropped and self.left_out is not None:
            self.left_out[subtree] = self.left_out.get(subtree, 0) + dropped
        children.reverse()
        return children


def capped_message(subtree: str, left_out: int, cap: int) -> str:
    """The warning for a delegated subtree whose folders were not all walked."""
    return (f"{quote(subtree)} holds more than {cap} cgroups: {left_out} of them (and "
            f"what lies below those) are left out of every tick (--max-user-cgroups)")
