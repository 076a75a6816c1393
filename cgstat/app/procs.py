"""`cgstat procs [WORKLOAD]`: the processes of one workload (or of every one shown), with
CPU over a window and PSS/USS from smaps_rollup, as a tree table, JSON lines or CSV."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from cgstat.app.story import matches
from cgstat.errors import CgstatError
from cgstat.contract.display import display_name
from cgstat.outputs import process_table as view
from cgstat.pipeline.processes import Options, ProcessWatcher, folder_of, listing_object
from cgstat.timestamps import rfc3339

if TYPE_CHECKING:
    from cgstat.pipeline.sampler import Sampler

# A one-shot may read every process's smaps_rollup (10,000 at ~50 µs: 0.5 s); past this
# the rest say "deferred" rather than hold the command up.
ONE_SHOT_BUDGET_S = 2.0


def collect(sampler: Sampler, query: Optional[str], window_s: float,
            options: Options = Options(budget_s=ONE_SHOT_BUDGET_S)) -> List[Dict[str, Any]]:
    """One object per workload that `query` names (every workload shown when None): its
    identity and its `processes` (CPU % over `window_s`; 0: no CPU %). Raises CgstatError
    when the query names none."""
    records: List[Dict[str, Any]] = [dict(r) for r in sampler.tick() if r.get("type") in ("cgroup", "pod")]
    # the workload found as `story` finds it (container name or ID prefix, unit, pod, cgroup path)
    chosen = [r for r in records if matches(r, query)] if query is not None else records
    if not chosen:
        raise CgstatError(f"no workload is called {query!r} (a container name or ID prefix, a unit, a pod "
                          "or a cgroup path; --all shows every cgroup)")
    watcher = ProcessWatcher(sampler.fs, options)
    folders = {str(r["cgroup"]): folder_of(sampler.layout, r) for r in chosen}
    if window_s > 0:
        watcher.begin_tick()
        for folder in folders.values():
            if folder is not None:
                watcher.read(folder, memory=False)
        watcher.end_tick()
        time.sleep(window_s)
        # the records again: GPU processes as NVML lists them now
        now = {str(r.get("cgroup")): dict(r) for r in sampler.tick() if r.get("type") in ("cgroup", "pod")}
        chosen = [now.get(str(r["cgroup"]), r) for r in chosen]
    watcher.begin_tick()
    out = []
    ts = rfc3339(time.time())
    for record in chosen:
        folder = folders[str(record["cgroup"])]
        item: Dict[str, Any] = {"type": "processes", "ts": ts, "host": record.get("host"),
                                "cgroup": record["cgroup"], "name": display_name(record),
                                "container": record.get("container")}
        if folder is None:
            item["processes"] = {"count": 0, "complete": False, "by": None, "processes": [], "groups": [],
                                 "error": {"source": "cgroup.procs", "error": "gone", "detail": "its folder is gone"}}
        else:
            gpu = record.get("gpu")
            item["processes"] = listing_object(watcher.read(folder, gpu if isinstance(gpu, dict) else None))
        out.append(item)
    watcher.end_tick()
    return out


def run_procs(sampler: Sampler, query: Optional[str], fmt: str, window_s: float) -> int:
    items = collect(sampler, query, window_s)
    try:
        if fmt == "jsonl":
            sys.stdout.buffer.write(view.jsonl(items))
        elif fmt == "csv":
            sys.stdout.write(view.csv_header() + view.csv_rows(items))
        else:
            sys.stdout.write(view.format_table(items))
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    return 0
