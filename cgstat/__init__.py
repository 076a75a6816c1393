"""cgstat: what every container on a Linux host consumes, read from the kernel's cgroup files."""

__version__ = "0.1.0"
