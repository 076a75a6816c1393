"""The sink kinds a run may add beside its own output: the built-in ones (the store, the
OTLP push) and the plug-ins, loaded once, when a command that takes them runs, from the
modules named in CGSTAT_PLUGINS (comma-separated) and the installed distributions'
`cgstat.sinks` entry points; each registers its kind when imported (pipeline/sinks.register;
docs/sinks.md)."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from typing import Any, Callable, List, Mapping, Tuple

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
        for name, target in _entry_points():
            _load(name, _entry(target))
    return registered()


def make_sinks(given: Mapping[str, Any], context: SinkContext) -> List[Sink]:
    """The sinks of the kinds whose first option is in `given` (option key -> value)."""
    return [kind.make({o.key: given.get(o.key) for o in kind.options}, context)
            for kind in sink_kinds() if kind.wanted(given)]


def _entry_points() -> List[Tuple[str, str]]:
    """(name, "module[:attr]") of every `cgstat.sinks` entry point of the installed
    distributions: their entry_points.txt read straight from sys.path's folders, as
    importlib.metadata would find them, without its imports (2 MiB of a run's peak RSS)
    and on Python 3.7 too."""
    found: List[Tuple[str, str]] = []
    for folder in sys.path:
        try:
            names = sorted(os.listdir(folder or "."))
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(folder or ".", name, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            section = None
            for line in text.splitlines():
                line = line.strip()
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1].strip()
                elif section == ENTRY_POINTS and "=" in line and not line.startswith(("#", ";")):
                    key, _, value = line.partition("=")
                    found.append((key.strip(), value.strip()))
    return found


def _entry(target: str) -> Callable[[], Any]:
    """The loader of an entry point's "module[:attr]" (the attribute looked up, as
    importlib.metadata's load() does: a registration may sit in the module)."""
    def load() -> Any:
        module, _, attr = target.partition(":")
        loaded = importlib.import_module(module.strip())
        for part in attr.strip().split(".") if attr.strip() else ():
            loaded = getattr(loaded, part)
        return loaded
    return load


def _load(name: str, load: Callable[[], Any]) -> None:
    """A plug-in that fails to load is said, and the run goes on without it."""
    try:
        load()
    except Exception as exc:  # whatever a third party's module raises
        say(f"plug-in {name} not loaded: {exc.__class__.__name__}: {exc}")
