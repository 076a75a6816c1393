"""The v1 join (kernel/join.py) as a pure function: trees and member paths in, cgroups out.

Each row: the anchor hierarchy's folders, the memory hierarchy's, where a member process of
each anchor cgroup sits in memory (/proc/<pid>/cgroup), and every cgroup the join gives
with its folders (hierarchy, path). No filesystem: folders are made in memory.
"""

import itertools

import pytest

from cgstat.kernel.hierarchy import Hierarchy, Layout
from cgstat.kernel.join import join_trees
from cgstat.kernel.tree import Folder

CPU = Hierarchy("cpu,cpuacct", 1, frozenset({"cpu", "cpuacct"}), "/sys/fs/cgroup/cpu,cpuacct")
MEM = Hierarchy("memory", 1, frozenset({"memory"}), "/sys/fs/cgroup/memory")
V1 = Layout("v1", (CPU, MEM))
_inodes = itertools.count(100)


def _tree(h, paths):
    return {p: Folder(h, p, h.mount_dir + p, next(_inodes), frozenset()) for p in ["/"] + paths}


def _members(table):
    """member_paths for the join: anchor path -> the member's memory path (None: no member)."""
    asked = []

    def member_paths(folder):
        asked.append(folder.path)
        where = table.get(folder.path)
        return None if where is None else {CPU.name: folder.path, MEM.name: where}

    return member_paths, asked


def _shape(cgroups):
    return {cg.path: tuple((f.hierarchy.name[:3], f.path) for f in cg.folders) for cg in cgroups}


ROWS = [
    ("same paths, no members: each cgroup joins its own path",
     ["/a", "/a/b"], ["/a", "/a/b"], {},
     {"/": (("cpu", "/"), ("mem", "/")), "/a": (("cpu", "/a"), ("mem", "/a")),
      "/a/b": (("cpu", "/a/b"), ("mem", "/a/b"))}),
    ("a runtime's relative path: the member says where, the parents follow their children",
     ["/x", "/x/docker", "/x/docker/c1"], ["/base", "/base/x", "/base/x/docker", "/base/x/docker/c1"],
     {"/x/docker/c1": "/base/x/docker/c1"},
     {"/": (("cpu", "/"), ("mem", "/")), "/x": (("cpu", "/x"), ("mem", "/base/x")),
      "/x/docker": (("cpu", "/x/docker"), ("mem", "/base/x/docker")),
      "/x/docker/c1": (("cpu", "/x/docker/c1"), ("mem", "/base/x/docker/c1")),
      "/base": (("mem", "/base"),)}),  # joined to nothing: a cgroup of its own
    ("a member in a shared memory cgroup is no join, though a folder of that path exists",
     ["/job"], ["/job"], {"/job": "/"},
     {"/": (("cpu", "/"), ("mem", "/")), "/job": (("cpu", "/job"),)}),
    ("a member in another workload's folder (another name) is no join",
     ["/a", "/b"], ["/a", "/b"], {"/a": "/b"},
     {"/": (("cpu", "/"), ("mem", "/")), "/a": (("cpu", "/a"),), "/b": (("cpu", "/b"), ("mem", "/b"))}),
    ("a member's path missing from the tree (gone meanwhile): the cgroup's own path",
     ["/a"], ["/a"], {"/a": "/elsewhere/a"},
     {"/": (("cpu", "/"), ("mem", "/")), "/a": (("cpu", "/a"), ("mem", "/a"))}),
    ("rule 2 downwards: an empty child of a cgroup joined elsewhere takes its name below that",
     ["/x", "/x/svc"], ["/base", "/base/x", "/base/x/svc"], {"/x": "/base/x"},
     {"/": (("cpu", "/"), ("mem", "/")), "/x": (("cpu", "/x"), ("mem", "/base/x")),
      "/x/svc": (("cpu", "/x/svc"), ("mem", "/base/x/svc")), "/base": (("mem", "/base"),)}),
    ("rule 2 upwards: the parent of the most joined children, when it has the cgroup's name",
     ["/p", "/p/a", "/p/b", "/p/c"], ["/m", "/m/p", "/m/p/a", "/m/p/b", "/q", "/q/c"],
     {"/p/a": "/m/p/a", "/p/b": "/m/p/b", "/p/c": "/q/c"},
     {"/": (("cpu", "/"), ("mem", "/")), "/p": (("cpu", "/p"), ("mem", "/m/p")),
      "/p/a": (("cpu", "/p/a"), ("mem", "/m/p/a")), "/p/b": (("cpu", "/p/b"), ("mem", "/m/p/b")),
      "/p/c": (("cpu", "/p/c"), ("mem", "/q/c")), "/m": (("mem", "/m"),), "/q": (("mem", "/q"),)}),
    ("an empty cgroup whose memory folder is its path below another base (its processes ended before a "
     "read): that folder",
     ["/job"], ["/sandbox", "/sandbox/s1", "/sandbox/s1/job"], {},
     {"/": (("cpu", "/"), ("mem", "/")), "/job": (("cpu", "/job"), ("mem", "/sandbox/s1/job")),
      "/sandbox": (("mem", "/sandbox"),), "/sandbox/s1": (("mem", "/sandbox/s1"),)}),
    ("two folders of its path below other bases: none is a guess worth making",
     ["/job"], ["/a", "/a/job", "/b", "/b/job"], {},
     {"/": (("cpu", "/"), ("mem", "/")), "/job": (("cpu", "/job"),), "/a": (("mem", "/a"),),
      "/a/job": (("mem", "/a/job"),), "/b": (("mem", "/b"),), "/b/job": (("mem", "/b/job"),)}),
    ("a folder of its path below another base, but its member sits in a shared memory cgroup: no join",
     ["/job"], ["/s", "/s/job"], {"/job": "/"},
     {"/": (("cpu", "/"), ("mem", "/")), "/job": (("cpu", "/job"),), "/s": (("mem", "/s"),),
      "/s/job": (("mem", "/s/job"),)}),
    ("no folder at all in memory: that controller's figures are null",
     ["/only-cpu"], [], {},
     {"/": (("cpu", "/"), ("mem", "/")), "/only-cpu": (("cpu", "/only-cpu"),)}),
]


@pytest.mark.parametrize("why,anchor,memory,members,expected", ROWS, ids=[r[0] for r in ROWS])
def test_join_table(why, anchor, memory, members, expected):
    trees = {CPU.name: _tree(CPU, anchor), MEM.name: _tree(MEM, memory)}
    member_paths, _ = _members(members)
    joined = join_trees(V1, trees, member_paths, {})
    assert _shape(joined.cgroups) == expected
    paths = [cg.path for cg in joined.cgroups]
    assert paths[:len(anchor) + 1] == sorted(["/"] + anchor)  # anchor paths first, sorted
    assert paths[len(anchor) + 1:] == sorted(paths[len(anchor) + 1:])


def test_joins_found_through_members_are_kept_and_reused_without_asking_again():
    trees = {CPU.name: _tree(CPU, ["/x", "/x/c1"]), MEM.name: _tree(MEM, ["/b", "/b/x", "/b/x/c1"])}
    member_paths, asked = _members({"/x/c1": "/b/x/c1"})
    first = join_trees(V1, trees, member_paths, {})
    c1 = trees[CPU.name]["/x/c1"]
    assert first.joins == {(c1.inode, MEM.name): ("/b/x/c1", trees[MEM.name]["/b/x/c1"].inode)}
    asked.clear()
    again = join_trees(V1, trees, member_paths, first.joins, first.cgroups)
    assert "/x/c1" not in asked  # the kept join, no membership read
    assert again.joins == first.joins
    assert all(a is b for a, b in zip(again.cgroups, first.cgroups))  # the same folders: the same objects


def test_a_kept_join_to_a_recreated_folder_is_asked_again_and_dropped_when_gone():
    trees = {CPU.name: _tree(CPU, ["/c1"]), MEM.name: _tree(MEM, ["/b", "/b/c1"])}
    member_paths, asked = _members({"/c1": "/b/c1"})
    first = join_trees(V1, trees, member_paths, {})
    trees[MEM.name]["/b/c1"] = Folder(MEM, "/b/c1", MEM.mount_dir + "/b/c1", next(_inodes), frozenset())
    asked.clear()
    again = join_trees(V1, trees, member_paths, first.joins, first.cgroups)
    assert asked == ["/c1"]
    key = (trees[CPU.name]["/c1"].inode, MEM.name)
    assert again.joins[key] == ("/b/c1", trees[MEM.name]["/b/c1"].inode)
    c1 = next(cg for cg in again.cgroups if cg.path == "/c1")
    assert c1.folders[1] is trees[MEM.name]["/b/c1"] and c1 is not first.cgroups[1]
    del trees[CPU.name]["/c1"]  # the cgroup removed: its join is forgotten
    gone = join_trees(V1, trees, _members({})[0], again.joins)
    assert key not in gone.joins and gone.joins == {}


def test_one_hierarchy_is_one_folder_per_cgroup_and_asks_no_member():
    unified = Hierarchy("unified", 2, frozenset(), "/sys/fs/cgroup")
    tree = _tree(unified, ["/a", "/a/b"])
    member_paths, asked = _members({"/a": "/a"})
    joined = join_trees(Layout("v2", (unified,)), {unified.name: tree}, member_paths, {})
    assert [(cg.path, cg.folders) for cg in joined.cgroups] == [(p, (tree[p],)) for p in ("/", "/a", "/a/b")]
    assert asked == [] and joined.joins == {}
