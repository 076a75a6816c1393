"""The ``guest`` fixture: one booted Debian guest per kind, one at a time, for the session.

Kinds (tests/guest/vm.py KINDS): ``trixie`` (Debian 13, kernel 6.12, systemd 257, pure cgroup
v2), ``bookworm`` (Debian 12, kernel 6.1, systemd 252, pure v2) and ``bookworm-v1`` (Debian 12
booted with systemd.unified_cgroup_hierarchy=0: the hybrid layout). ``CGSTAT_GUEST_SUITES``
lists the kinds to boot (default: all three). The fixture's guest says ``kind``, ``suite``
and ``layout`` ("v2" or "hybrid").

Which tests: ``CGSTAT_GUEST_SET=ci`` (what tests/run sets) keeps only the tests marked
``guest_ci``, the CI set: ``@pytest.mark.guest_ci`` on every kind, ``@pytest.mark.guest_ci(
"trixie", ...)`` on those kinds only. Unset or ``all``: every test on every kind.

The stage is left out where CGSTAT_GUEST=0 or where this machine can't build or boot guests
(not root, no mmdebstrap/qemu/mke2fs): its tests are deselected, and one line at the end
says so, how many and why. A failed test
keeps the guest's console, journal and the harness's history under CGSTAT_GUEST_LOGS
(default /tmp/cgstat-guest-logs/) and says where. At the end, one line per guest: the tests
run here and the pytest runs inside it, passed / failed / skipped, every skip's reason, and
the boot's times.
"""
from __future__ import annotations

import os
import time

import pytest

from tests.guest import image as images
from tests.guest.vm import KINDS, Guest, GuestError, attach

SUITES = os.environ.get("CGSTAT_GUEST_SUITES", " ".join(KINDS)).split()
SET = os.environ.get("CGSTAT_GUEST_SET", "all")
LOGS = os.environ.get("CGSTAT_GUEST_LOGS", "/tmp/cgstat-guest-logs")
_booted = {}  # kind -> Guest, for the summary
_not_run = []  # how many guest tests a machine that can't boot guests left out
_builds = []  # image builds started at collection
_stage_t0 = time.monotonic()


def _skip_reason():
    if os.environ.get("CGSTAT_GUEST", "1") in ("0", "no", "false"):
        return "CGSTAT_GUEST=0: the guest stage is switched off"
    return images.why_not()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "guest_ci(*kinds): in the guest stage's CI set (CGSTAT_GUEST_SET=ci), on "
        "every guest or on the kinds named")


def _kind_of(item):
    spec = getattr(item, "callspec", None)
    return spec.params.get("guest") if spec is not None else None


def pytest_collection_modifyitems(config, items):
    unknown = [k for k in SUITES if k not in KINDS]
    if unknown:
        raise pytest.UsageError("CGSTAT_GUEST_SUITES: unknown guest %s (known: %s)" % (
            " ".join(unknown), " ".join(KINDS)))
    why = _skip_reason()
    keep, drop = [], []
    for item in items:
        if not item.nodeid.startswith("tests/guest/"):
            keep.append(item)
            continue
        mark = item.get_closest_marker("guest_ci")
        kind = _kind_of(item)
        if why is None and (SET != "ci" or (
                mark is not None and (not mark.args or kind is None or kind in mark.args))):
            keep.append(item)
        else:
            drop.append(item)
    if why is not None:  # said once, at the end, with the count (not a skip per test)
        _not_run.append(len(drop))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if why is None and not config.option.collectonly:
        kinds = {_kind_of(i) for i in keep}
        _prebuild(list(dict.fromkeys(KINDS[k].suite for k in SUITES if k in kinds)))


def _prebuild(suites):
    """Build the images the session will boot, all at once, from the start: the first guest
    waits for its own, the others are ready when their turn comes (a fresh machine builds
    Debian 12's while Debian 13's guest runs). Downloads and dpkg, not emulation."""
    import threading

    for suite in suites:
        if images.cached(suite) is not None:
            continue
        log = os.path.join(LOGS, "build-%s-%s-%d.log" % (suite, time.strftime("%Y%m%dT%H%M%S"), os.getpid()))

        def build(suite=suite, log=log):
            try:
                images.build(suite, log)
            except Exception:  # noqa: BLE001 - the guest's own boot builds again and says why
                pass

        t = threading.Thread(target=build, name="build-" + suite, daemon=True)
        t.start()
        _builds.append(t)


@pytest.fixture(scope="session", params=SUITES)
def guest(request):
    why = _skip_reason()
    if why:
        pytest.skip(why)
    kind = request.param
    if os.environ.get("CGSTAT_GUEST_ATTACH"):  # a guest kept up by `python -m tests.guest.shell boot`
        g = attach(os.environ["CGSTAT_GUEST_ATTACH"], kind)
        _booted[kind] = g
        try:
            yield g
        finally:
            g.detach()
        return
    logdir = os.path.join(LOGS, "%s-%s-%d" % (kind, time.strftime("%Y%m%dT%H%M%S"), os.getpid()))
    g = Guest(kind, logdir)
    _booted[kind] = g
    try:
        g.boot(os.path.join(logdir, "build.log"))
    except (GuestError, OSError, TimeoutError, RuntimeError, AssertionError) as exc:
        g.keep_logs("boot failed: %r" % (exc,))
        g.close()
        g.boot_error = str(exc)
        pytest.fail("the %s guest did not come up: %s (logs: %s)" % (kind, exc, logdir), pytrace=False)
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
    kind = _kind_of(item)
    g = _booted.get(kind)
    if g is None or not isinstance(g, Guest):
        return
    if rep.failed:
        g.failed = True
        if g.proc is not None:
            g.keep_logs("%s failed" % item.nodeid)
            rep.sections.append(("guest logs", "console, journal and history kept in %s" % g.logdir))
    # one outcome per test: its call, or its setup where that failed or skipped
    if rep.when == "call" or (rep.when == "setup" and rep.outcome != "passed"):
        g.outcomes = getattr(g, "outcomes", {})
        g.outcomes[rep.outcome] = g.outcomes.get(rep.outcome, 0) + 1


def record_inner(guest, name, run):
    """Keep an in-guest pytest run's result for the summary (its skips with their reasons)."""
    inner = guest.__dict__.setdefault("inner", {})
    inner[name] = run


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    if not _booted:
        why = _skip_reason()
        if why:
            tr.write_line("guest stage: skipped, %d tests not run: %s" % (sum(_not_run), why))
        return
    for kind, g in _booted.items():
        counts = dict(getattr(g, "outcomes", {}))
        inner = getattr(g, "inner", {})
        for run in inner.values():
            for c in run.cases:
                counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
        info = g.image.info() if g.image else {}
        tr.write_line("guest %s (Debian %s, kernel %s, %s, %s): %d passed, %d failed, %d skipped "
                      "(in-guest pytest: %s); times %s%s" % (
                          kind, g.suite, info.get("kernel", "?"), g.layout, g.accel,
                          counts.get("passed", 0), counts.get("failed", 0), counts.get("skipped", 0),
                          "; ".join("%s %s" % (n, r.summary()) for n, r in inner.items()) or "none",
                          g.times, "; BOOT FAILED: %s" % g.boot_error if getattr(g, "boot_error", None) else ""))
        for name, run in inner.items():
            for c in run.cases:
                if c["outcome"] == "skipped":
                    tr.write_line("  %s in-guest skip %s: %s" % (kind, c["name"], c["text"].strip()))
    tr.write_line("guest stage: %.0f s" % (time.monotonic() - _stage_t0))


def pytest_sessionfinish(session, exitstatus):
    for t in _builds:  # a build left half-done would keep its folder in the cache
        t.join()
    # a machine that can't boot guests ran none of the stage: not a failure (said above)
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and _not_run:
        session.exitstatus = pytest.ExitCode.OK
