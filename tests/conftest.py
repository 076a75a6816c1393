# real-cgroup fixtures (see helpers/realcg.py); each skips itself where the host can't run them
from tests.helpers.realcg import (  # noqa: F401
    _realcg_hier,
    make_container,
    make_group,
    realcg_env,
    run_cgstat,
    runc_tool,
    workload_bin,
)


# what a run leaves behind fails it (see helpers/leftovers.py)
from tests.helpers.leftovers import (  # noqa: E402,F401
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "realcg: touches the real cgroup tree of this host (root, cgroup v1/hybrid; "
        "creates cgstat-test-<run>-* groups below its own cgroup and removes them)",
    )
