"""LXC: named from its cgroup paths alone (the container's name is in the path).

Paths: lxc.payload.<name> (lxc.monitor.<name> is its monitor), older /lxc/<name>. No
state is read: nothing to trust.
"""

from __future__ import annotations

from cgstat.naming.runtimes.runtime import Runtime


class LxcRuntime(Runtime):
    name = "lxc"
    scopes = (r"^lxc\.payload\.(.+)$",)
    named_parents = ("lxc",)
    monitors = (r"^lxc\.monitor\..+$",)
