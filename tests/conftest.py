import os
import sys

# tests/ has helper modules (realcg.py) imported by plain name
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# real-cgroup fixtures (see realcg.py); each skips itself where the host can't run them
from realcg import (  # noqa: F401
    make_container,
    make_group,
    realcg_env,
    run_cgstat,
    runc_tool,
    workload_bin,
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "realcg: touches the real cgroup tree of this host (root, cgroup v1/hybrid; "
        "creates cgstat-test-* groups below its own cgroup and removes them)",
    )
