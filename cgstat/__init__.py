"""cgstat: what every container on a Linux host consumes, read from the kernel's cgroup files.

The Python API, in the spirit of psutil (docs/usage.md, "From Python"):
`cgstat.Sampler(match="docker")`, whose `tick()` returns the dicts `cgstat stream` writes
(the first tick: counters, rates null), then `close()`. It prints nothing:
`cgstat.Sampler(warner=cgstat.Warner())` writes its notices to stderr as the CLI does.
"""

__version__ = "0.2.0"
__all__ = ["Sampler", "Warner", "CgstatError", "__version__"]


def __getattr__(name):  # PEP 562: `import cgstat` stays cheap for the CLI's start-up
    if name == "Sampler":
        from cgstat.pipeline.sampler import Sampler

        return Sampler
    if name == "Warner":
        from cgstat.diagnostics import Warner

        return Warner
    if name == "CgstatError":
        from cgstat.errors import CgstatError

        return CgstatError
    raise AttributeError(f"module 'cgstat' has no attribute {name!r}")
