"""The sink kinds a run may add beside its own output: the built-in ones (the store, the
OTLP push) and the plug-ins, loaded once from the `cgstat.sinks` entry points (Python 3.8
and later) and from the modules named in CGSTAT_PLUGINS (comma-separated, any Python);
each registers its kind when imported (pipeline/sinks.register; docs/sinks.md)."""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any, Callable, List, Mapping

import cgstat.outputs.otlp.options  # noqa: F401  (registers the OTLP push)
import cgstat.outputs.store  # noqa: F401  (registers the store)
from cgstat.pipeline.sinks import Sink, SinkContext, SinkKind, registered
from cgstat.diagnostics import say

PLUGINS_ENV = "CGSTAT_PLUGINS"
ENTRY_POINTS = "cgstat.sinks"

_loaded = False


def sink_kinds() -> List[SinkKind]:
    """Every kind registered, the plug-ins loaded first (once)."""
    global _loaded
    if not _loaded:
        _loaded = True
        for name in os.environ.get(PLUGINS_ENV, "").split(","):
            if name.strip():
                _load(name.strip(), functools.partial(importlib.import_module, name.strip()))
        for entry in _entry_points():
            _load(entry.name, entry.load)
    return registered()


def make_sinks(given: Mapping[str, Any], context: SinkContext) -> List[Sink]:
    """The sinks of the kinds whose first option is in `given` (option key -> value)."""
    return [kind.make({o.key: given.get(o.key) for o in kind.options}, context)
            for kind in sink_kinds() if kind.wanted(given)]


def _entry_points() -> List[Any]:
    try:
        from importlib import metadata
    except ImportError:  # Python 3.7: CGSTAT_PLUGINS only (importlib_metadata is no dependency)
        return []
    found = metadata.entry_points()
    if hasattr(found, "select"):  # Python 3.10 and later
        return list(found.select(group=ENTRY_POINTS))
    return list(found.get(ENTRY_POINTS, []))  # type: ignore[attr-defined, unused-ignore]


def _load(name: str, load: Callable[[], Any]) -> None:
    """A plug-in that fails to load is said, and the run goes on without it."""
    try:
        load()
    except Exception as exc:  # whatever a third party's module raises
        say(f"plug-in {name} not loaded: {exc.__class__.__name__}: {exc}")
