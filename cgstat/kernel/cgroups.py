"""Read one cgroup's files into a raw Sample.

Finds once per Cgroup which folder serves each controller (v1: one per hierarchy; v2: the
one folder, where its parent enables the controller), reads them with the controller
modules (kernel/controllers/: cpu, memory, io, pids) and the cgroup2 folder's
{cpu,memory,io}.pressure, and says which controllers the cgroup has none of. Files some
kernels lack (memory.peak before 5.19, memory.swap.peak before 6.5, pids.peak,
memory.zswap.current without CONFIG_ZSWAP, cpu.max.burst before 5.14) read as None with no
problem reported: a file the kernel doesn't have is not an error.
"""

from __future__ import annotations

from itertools import combinations
from typing import Dict, List, Optional, Tuple

from cgstat.kernel.controllers.cpu import cpu_v1, cpu_v2
from cgstat.kernel.controllers.files import FileReader
from cgstat.kernel.controllers.io import io_v1, io_v2
from cgstat.kernel.controllers.memory import memory_v1, memory_v2
from cgstat.kernel.controllers.pids import pids_sample
from cgstat.kernel.controllers.pressure import pressure_sample
from cgstat.kernel.handles import KeptFiles
from cgstat.kernel.hierarchy import Layout
from cgstat.kernel.sample import (
    PRESSURE_RESOURCES,
    CpuSample,
    IoSample,
    MemorySample,
    PidsSample,
    PressureSample,
    Problem,
    Sample,
)
from cgstat.kernel.tree import Cgroup, Folder

_PRESSURE_FILES = tuple((resource, resource + ".pressure") for resource in PRESSURE_RESOURCES)
_NO_CPU = CpuSample()
_NO_MEMORY = MemorySample()
_NO_IO = IoSample(None)
_NO_PIDS = PidsSample()
_NO_PRESSURE: Dict[str, Optional[PressureSample]] = {resource: None for resource in PRESSURE_RESOURCES}

_NO_PSI = Problem("pressure", "unavailable", "no PSI files for this cgroup (cgroup v1, or kernel without PSI)")

_NOT_ABSENT = Problem("", "", "")  # in a plan's place of a controller the cgroup has; never reported
# A controller the cgroup has no folder for (v1), or that its parent does not enable (v2).
# One shared Problem per controller (the record names the cgroup; a copy per cgroup with
# its path in the text was kept per cgroup), and one shared tuple per set of controllers
# missing (16 at most), keyed by the controllers missing in this order.
_CONTROLLERS = ("cpu", "memory", "io", "pids")
_ABSENT = {c: Problem(c, "unavailable", f"no {c} cgroup at this path") for c in _CONTROLLERS}
_ABSENT_TUPLES: Dict[Tuple[str, ...], Tuple[Problem, ...]] = {
    missing: tuple(_ABSENT[c] if c in missing else _NOT_ABSENT for c in _CONTROLLERS)
    for n in range(len(_CONTROLLERS) + 1) for missing in combinations(_CONTROLLERS, n)
}

# (layout, cpuacct, cpu, unified, memory, blkio, pids folder, the "unavailable" problem of
# cpu, memory, io and pids) of one cgroup
_Plan = Tuple[Layout, Optional[Folder], Optional[Folder], Optional[Folder], Optional[Folder],
              Optional[Folder], Optional[Folder], Tuple[Problem, ...]]


def _plan(cg: Cgroup, layout: Layout) -> _Plan:
    """The cgroup's folder for each controller read, and the problems that say which it
    has none of, found once per Cgroup (the walk keeps a Cgroup from tick to tick while
    its folders, and so their file names, stay the same)."""
    plan: Optional[_Plan] = cg.memo
    if plan is not None and plan[0] is layout:
        return plan

    def folder_of(controller: str) -> Optional[Folder]:
        h = layout.find(controller)
        return cg.folder(h) if h is not None else None

    unified_h = layout.unified
    acct, cpu, mem, blk, pids = (folder_of(c) for c in ("cpuacct", "cpu", "memory", "blkio", "pids"))
    unified = cg.folder(unified_h) if unified_h else None
    if layout.kind == "v2":
        # v2 shows a controller's files only where the parent enables it in
        # cgroup.subtree_control: no marker file, no controller.
        files = unified.files if unified is not None else None
        missing = [c for c, marker in (("memory", "memory.current"), ("io", "io.stat"), ("pids", "pids.current"))
                   if files is not None and marker not in files]
    else:
        missing = [c for c, f in (("cpu", acct or cpu or unified), ("memory", mem), ("io", blk), ("pids", pids))
                   if f is None]
    # A tuple (cpu, memory, io, pids) rather than a dict: one per cgroup read, kept.
    absent = _ABSENT_TUPLES[tuple(missing)]
    plan = (layout, acct, cpu, unified, mem, blk, pids, absent)
    cg.remember(plan)
    return plan


def read_cgroup(cg: Cgroup, layout: Layout, time_s: float, wall_s: float, kept: KeptFiles) -> Sample:
    """One cgroup's files as a raw Sample, read through `kept` (the sampler's descriptor cache)."""
    problems: List[Problem] = []
    r = FileReader(problems, kept)
    _layout, acct, cpu_f, unified, mem_f, blk_f, pids_f, absent = _plan(cg, layout)

    if layout.kind == "v2":
        # A controller not enabled for this cgroup: null, with the reason (see _plan).
        cpu = cpu_v2(unified, r) if unified else _NO_CPU
        memory, io, pids = _NO_MEMORY, _NO_IO, _NO_PIDS
        if unified is not None:
            files = unified.files
            if "memory.current" in files:
                memory = memory_v2(unified, r)
            else:
                problems.append(absent[1])
            if "io.stat" in files:
                io = io_v2(unified, r)
            else:
                problems.append(absent[2])
            if "pids.current" in files:
                pids = pids_sample(unified, r, cpu.usage_seconds_total)
            else:
                problems.append(absent[3])
    else:
        if acct is None and cpu_f is None and unified is None:
            problems.append(absent[0])
        cpu = cpu_v1(acct, cpu_f, unified, r)
        memory = memory_v1(mem_f, r) if mem_f else _NO_MEMORY
        io = io_v1(blk_f, r) if blk_f else _NO_IO
        pids = pids_sample(pids_f, r, cpu.usage_seconds_total) if pids_f else _NO_PIDS
        if mem_f is None:
            problems.append(absent[1])
        if blk_f is None:
            problems.append(absent[2])
        if pids_f is None:
            problems.append(absent[3])

    pressure: Dict[str, Optional[PressureSample]] = _NO_PRESSURE  # read only (pipeline/build.py)
    any_pressure = False
    if unified is not None:
        pressure = {}
        for resource, name in _PRESSURE_FILES:
            value = None
            if name in unified.files:
                value = r.get(unified, name, pressure_sample)
                any_pressure = any_pressure or value is not None
            pressure[resource] = value
    if not any_pressure and not any(p.source.endswith(".pressure") for p in problems):
        problems.append(_NO_PSI)

    return Sample(cg.path, cg.paths, cg.inodes, time_s, wall_s, cpu, memory, io, pids,
                  pressure, tuple(problems), gone=r.gone)
