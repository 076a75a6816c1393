# real-cgroup fixtures (see helpers/realcg.py); each skips itself where the host can't run them
from tests.helpers.realcg import (  # noqa: F401
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
