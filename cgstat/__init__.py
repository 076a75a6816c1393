"""cgstat: what every container on a Linux host consumes, read from the kernel's cgroup files.

The Python API, in the spirit of psutil:

    import cgstat
    sampler = cgstat.Sampler(match="docker")   # host_root="/", all=False, match=None
    sampler.tick()                             # first tick: counters, rates null
    records = sampler.tick()                   # the same dicts `cgstat stream` writes
    sampler.close()

It prints nothing: `cgstat.Sampler(warner=cgstat.Warner())` writes its notices (what it
shows, what it can't read) to stderr as the CLI does.
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
