"""The ``guest`` fixture: one booted Debian guest per suite for the whole session.

Suites: ``CGSTAT_GUEST_SUITES`` (default ``trixie``: Debian 13, pure cgroup v2 under systemd
257), space-separated; ``bookworm`` is Debian 12 (kernel 6.1, systemd 252). The guest stage is
skipped, with the reason, where CGSTAT_GUEST=0 or where this machine can't build or boot
guests (not root, no mmdebstrap/qemu). A failed test keeps the guest's console, journal and
the harness's history under CGSTAT_GUEST_LOGS (default /tmp/cgstat-guest-logs/) and says where.
"""
from __future__ import annotations

import os
import time

import pytest

from tests.guest import image as images
from tests.guest.vm import Guest, GuestError, attach

SUITES = os.environ.get("CGSTAT_GUEST_SUITES", "trixie").split()
LOGS = os.environ.get("CGSTAT_GUEST_LOGS", "/tmp/cgstat-guest-logs")
_booted = {}  # suite -> Guest, for the summary
_stage_t0 = time.monotonic()


def _skip_reason():
    if os.environ.get("CGSTAT_GUEST", "1") in ("0", "no", "false"):
        return "CGSTAT_GUEST=0: the guest stage is switched off"
    return images.why_not()


@pytest.fixture(scope="session", params=SUITES)
def guest(request):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    suite = request.param
    if os.environ.get("CGSTAT_GUEST_ATTACH"):  # a guest kept up by `python -m guest.shell boot`
        g = attach(os.environ["CGSTAT_GUEST_ATTACH"], suite)
        _booted[suite] = g
        yield g
        return
    logdir = os.path.join(LOGS, "%s-%s" % (suite, time.strftime("%Y%m%dT%H%M%S")))
    g = Guest(suite, logdir)
    _booted[suite] = g
    try:
        g.boot(os.path.join(logdir, "build.log"))
    except (GuestError, OSError, TimeoutError, RuntimeError, AssertionError) as exc:
        g.keep_logs("boot failed: %r" % (exc,))
        g.close()
        pytest.fail("the %s guest did not come up: %s (logs: %s)" % (suite, exc, logdir), pytrace=False)
    try:
        yield g
    finally:
        if getattr(g, "failed", False):
            g.keep_logs("a test failed")
        g.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    g = item.funcargs.get("guest") if hasattr(item, "funcargs") else None
    if rep.failed and isinstance(g, Guest):
        g.failed = True
        g.keep_logs("%s failed" % item.nodeid)
        rep.sections.append(("guest logs", "console, journal and history kept in %s" % g.logdir))
    if call.when == "call" and isinstance(g, Guest):
        g.outcomes = getattr(g, "outcomes", {})
        g.outcomes[rep.outcome] = g.outcomes.get(rep.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    if not _booted:
        why = _skip_reason()
        if why:
            tr.write_line("guest stage: skipped (%s)" % why)
        return
    for suite, g in _booted.items():
        counts = getattr(g, "outcomes", {})
        inner = getattr(g, "inner", {})
        tr.write_line("guest %s (%s, %s): %d passed, %d failed, %d skipped; in-guest pytest: %s; "
                      "times %s" % (suite, (g.image.info().get("kernel") if g.image else "?"), g.accel,
                                    counts.get("passed", 0), counts.get("failed", 0),
                                    counts.get("skipped", 0),
                                    ", ".join("%s %s" % kv for kv in inner.items()) or "none",
                                    g.times))
    tr.write_line("guest stage: %.0f s" % (time.monotonic() - _stage_t0))
