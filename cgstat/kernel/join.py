"""The v1 join: one workload's folders across hierarchies, as one cgroup per anchor path.

On v1 (and hybrid) a workload has one folder per hierarchy, and the paths need not match:
a runtime given a relative cgroup path creates it below its own cgroup in each hierarchy
(`cpu:/x/docker/<id>` but `memory:/base/x/docker/<id>`). The kernel's own answer to "where
is this workload in hierarchy H" is /proc/<pid>/cgroup of a member process, so that joins
folders, not equal path strings. A pure function: reads nothing, the caller passes what
members say (kernel/membership.py reads cgroup.procs and /proc/<pid>/cgroup).
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

from cgstat.kernel.hierarchy import Hierarchy, Layout
from cgstat.kernel.tree import Cgroup, Folder

Trees = Dict[str, Dict[str, Folder]]  # hierarchy name -> printable path -> folder
# (anchor folder inode, hierarchy name) -> (target path, target inode): joins found through processes
Joins = Dict[Tuple[int, str], Tuple[str, int]]
MemberPaths = Callable[[Folder], Optional[Dict[str, str]]]  # hierarchy name -> a member's path


class Joined(NamedTuple):
    cgroups: List[Cgroup]  # anchor paths first (sorted), then folders joined to none (sorted)
    joins: Joins  # the process-derived joins still in use, for the next join


def join_trees(layout: Layout, trees: Trees, member_paths: MemberPaths, joins: Joins,
               previous: Iterable[Cgroup] = ()) -> Joined:
    """The cgroups of these trees. `joins`: what the last join found through processes
    (read, not changed); `previous`: the last join's cgroups, returned again where their
    folders are the same objects (a rejoin then allocates little, and what readers
    derived from a Cgroup, its plan and inodes, stays).

    Rules, per cgroup P of the anchor hierarchy and other hierarchy H:
    1. P has member processes: take H's path Q from a member's /proc/<pid>/cgroup. Q is
       used when it is P itself or ends in the same folder name (the same workload under
       another base); a member sitting in an unrelated or shared H cgroup (H not
       delegated) is not a join, since that cgroup's figures are not this workload's.
    2. P has no members (a slice, a pod parent, an empty container cgroup): the H folder
       holding most of P's joined children, when it is P itself or has P's folder name
       (the same subtree under another base); else P itself when it exists; else, when
       P's parent is joined to another path in H, the folder of P's name below that one.
       Joins climb from the deepest cgroups up, then the last rule runs from the top down.
    3. P has no members and no folder of its own path in H: the one H folder joined to
       nothing whose path is P's below another base (`/base/P`, as a runtime given a
       relative path makes it). A workload whose processes ended before cgstat first read
       it (one that lived less than a tick) has no member to say where it is, and its
       parent is joined to itself (the root): only the path says it.
    4. Otherwise P has no folder in H, and that controller's figures are null.
    H folders joined to nothing are cgroups of their own, keyed by their H path. Joins
    found through processes are kept by (folder inode), so membership is read once per
    new cgroup.
    """
    anchor = layout.anchor
    anchor_tree = trees[anchor.name]
    others = [h for h in layout.hierarchies if h is not anchor]
    old = {cg.path: cg for cg in previous}

    def cgroup(path: str, folders: Tuple[Folder, ...]) -> Cgroup:
        was = old.get(path)
        if was is None or len(was.folders) != len(folders) or any(
                a is not b for a, b in zip(was.folders, folders)):
            return Cgroup(path, folders)
        return was

    if not others:
        return Joined([cgroup(p, (f,)) for p, f in sorted(anchor_tree.items())], joins)

    # hierarchy name -> anchor path -> its folder there
    found: Dict[str, Dict[str, Folder]] = {anchor.name: anchor_tree}
    claimed: Dict[str, Set[str]] = {}
    live: Joins = {}
    parent_of = {p: p.rsplit("/", 1)[0] or "/" for p in anchor_tree if p != "/"}
    # Deepest first, so that rule 2 can look at joined descendants.
    order = sorted(anchor_tree, key=lambda p: (-p.count("/"), p))
    for h in others:
        tree = trees[h.name]
        joined: Dict[str, Folder] = {}
        taken: Set[str] = set()
        # anchor path -> H parents of its children's targets (for rule 2)
        child_parents: Dict[str, List[str]] = {}
        for path in order:
            target = _target(anchor_tree[path], h, tree, child_parents.get(path), joins, live, member_paths)
            if target is None:
                continue
            joined[path] = target
            taken.add(target.path)
            if path != "/":
                parent = parent_of[path]
                up = child_parents.get(parent)
                if up is None:
                    up = child_parents[parent] = []
                up.append(target.path.rsplit("/", 1)[0] or "/")
        # Rule 2, downwards: a cgroup still without a folder in H whose parent is joined
        # to another path there takes the folder of its own name below that one.
        for path in reversed(order):
            if path == "/" or path in joined:
                continue
            parent = parent_of[path]
            above = joined.get(parent)
            if above is None or above.path == parent:
                continue
            candidate = tree.get(above.path.rstrip("/") + "/" + _leaf(path))
            if candidate is not None and candidate.path not in taken:
                joined[path] = candidate
                taken.add(candidate.path)
        _join_by_suffix(anchor_tree, h, tree, order, joined, taken, member_paths)
        found[h.name] = joined
        claimed[h.name] = taken

    result = []
    columns = [found[h.name] for h in layout.hierarchies]
    for path in sorted(anchor_tree):
        folders = tuple([f for f in [c.get(path) for c in columns] if f is not None])
        result.append(cgroup(path, folders))
    # Folders of other hierarchies that joined no anchor cgroup: their own records.
    leftovers: Dict[str, List[Folder]] = {}
    for h in others:
        taken = claimed[h.name]
        for path, folder in trees[h.name].items():
            if path in taken or path in anchor_tree:
                continue
            leftovers.setdefault(path, []).append(folder)
    for path in sorted(leftovers):
        result.append(cgroup(path, tuple(leftovers[path])))
    return Joined(result, live)


def _target(folder: Folder, h: Hierarchy, tree: Dict[str, Folder], child_parents: Optional[List[str]],
            joins: Joins, live: Joins, member_paths: MemberPaths) -> Optional[Folder]:
    """The folder of H that anchor `folder` joins (rules 1 and 2 upwards), or None."""
    path = folder.path
    if path == "/":
        return tree.get("/")
    key = (folder.inode, h.name)
    # This join's answer first: two anchor folders may claim one inode (a recorded tree's
    # manifest says what it likes).
    cached = live.get(key) or joins.get(key)
    if cached is not None:
        target = tree.get(cached[0])
        if target is not None and target.inode == cached[1]:
            live[key] = cached
            return target
    members = member_paths(folder)
    member = members.get(h.name) if members else None
    if member is not None:
        target = tree.get(member)
        if target is not None and (member == path or _leaf(member) == _leaf(path)):
            live[key] = (target.path, target.inode)
            return target
        if target is not None:
            return None  # members sit in another H cgroup: its figures aren't ours
    if child_parents:
        # Rule 2: where most joined children sit in H, if that is this cgroup there.
        best = max(sorted(set(child_parents)), key=child_parents.count)
        if best in tree and (best == path or _leaf(best) == _leaf(path)):
            return tree[best]
    return tree.get(path)


def _join_by_suffix(anchor_tree: Dict[str, Folder], h: Hierarchy, tree: Dict[str, Folder], order: List[str],
                    joined: Dict[str, Folder], taken: Set[str], member_paths: MemberPaths) -> None:
    """Rule 3: each anchor cgroup still without an H folder, with no member saying where
    it is in H, takes the one H folder joined to nothing whose path ends in its own
    (`/base` + its path); none when there are two (which would be a guess)."""
    missing = [p for p in order if p != "/" and p not in joined]
    if not missing:
        return
    by_leaf: Dict[str, List[str]] = {}
    for q in tree:
        if q not in taken and q != "/":
            by_leaf.setdefault(_leaf(q), []).append(q)
    for path in missing:
        near = [q for q in by_leaf.get(_leaf(path), ()) if q != path and q.endswith(path) and q not in taken]
        if len(near) != 1:
            continue
        members = member_paths(anchor_tree[path])
        if members and members.get(h.name) is not None:
            continue  # its members sit elsewhere in H (rule 1 said no): not this folder
        joined[path] = tree[near[0]]
        taken.add(near[0])


def _leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]
