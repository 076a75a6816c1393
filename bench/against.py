"""`--against REF` of the bench scripts: one module of cgstat as it is at a git REF, loaded
beside this checkout's, so that before and after are measured in one run, interleaved (a
loaded machine's noise falls on both alike).

The module at REF is read with `git show REF:PATH` and executed under a name of its own;
it imports the rest of cgstat from this checkout, so only a module whose imports still
resolve can be compared this way.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from types import ModuleType

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_at(ref: str, path: str, *older: str) -> ModuleType:
    """The module at `path` (relative to the repository) as it is at git `ref`, or at the
    first of `older` (where the module was before a move) that `ref` has."""
    for path in (path, *older):
        shown = subprocess.run(["git", "show", "%s:%s" % (ref, path)], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
        if shown.returncode == 0:
            break
    shown.check_returncode()
    text = shown.stdout
    folder = tempfile.mkdtemp(prefix="cgstat-bench-against-")
    name = "at_%s_%s" % ("".join(c if c.isalnum() else "_" for c in ref), os.path.basename(path)[:-3])
    file = os.path.join(folder, name + ".py")
    with open(file, "wb") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    os.remove(file)
    os.rmdir(folder)
    return module
