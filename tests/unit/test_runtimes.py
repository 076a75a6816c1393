"""The runtime interface and registry: each runtime's declared paths classify as that
runtime, the lookup follows the registry's order and each runtime's `replaces`, and a
runtime is asked only about the cgroups whose state it trusts."""

import re

import pytest

from cgstat.kernel.hostfs import HostFS
from cgstat.naming.paths import classify
from cgstat.naming.runtimes import registry
from cgstat.naming.runtimes.entry import ContainerEntry
from cgstat.naming.runtimes.identities import Identities
from cgstat.naming.runtimes.runtime import SYSTEM, USER, Runtime

CID = "a" * 64
OTHER = "b" * 64


def test_the_registry_order_is_the_lookup_order():
    assert [cls.name for cls in registry.RUNTIMES] == ["docker", "containerd", "cri-o", "podman", "lxc", "slurm"]
    names = [cls.name for cls in registry.RUNTIMES]
    assert len(set(names)) == len(names)
    for cls in registry.RUNTIMES:
        for p in cls.scopes:
            assert re.compile(p).groups == 1, (cls.name, p)  # group 1 is the ID


@pytest.mark.parametrize("path, runtime, cid", [
    (f"/system.slice/docker-{CID}.scope", "docker", CID),
    (f"/docker/{CID}", "docker", CID),
    (f"/kubepods.slice/kubepods-pod0123456789abcdef0123456789abcdef.slice/cri-containerd-{CID}.scope",
     "containerd", CID),
    (f"/system.slice/nerdctl-{CID}.scope", "containerd", CID),
    (f"/nerdctl/{CID}", "containerd", CID),
    (f"/kubepods.slice/crio-{CID}.scope", "cri-o", CID),
    (f"/machine.slice/libpod-{CID}.scope", "podman", CID),
    (f"/libpod_parent/libpod-{CID}", "podman", CID),
    ("/lxc.payload.web1", "lxc", "web1"),
    ("/lxc/web1", "lxc", "web1"),
])
def test_each_runtimes_declared_paths_classify_as_it(path, runtime, cid):
    info = classify(path)
    assert (info.kind, info.runtime, info.id) == ("container", runtime, cid)


@pytest.mark.parametrize("path", [f"/kubepods.slice/crio-conmon-{CID}.scope", f"/machine.slice/libpod-conmon-{CID}.scope",
                                  "/lxc.monitor.web1", "/libpod_parent/conmon"])
def test_declared_monitors_are_no_container(path):
    assert classify(path).kind == "monitor"


class Fake(Runtime):
    """A runtime whose state is a dict; notes what it was asked."""

    def __init__(self, name, trusts, system=None, users=None, replaces_any=True):
        self.name = name
        self.trusts = frozenset(trusts)
        self.system = system or {}
        self.users = users or {}
        self.replaces_any = replaces_any
        self.asked = []

    def begin(self, ctx):
        return "places"

    def system_entry(self, ctx, places, cid):
        assert places == "places"
        self.asked.append(("system", cid))
        return self.system.get(cid)

    def replaces(self, earlier, found):
        return self.replaces_any or earlier is None

    def user_entries(self, ctx, home, ids, owners):
        self.asked.append(("user", tuple(sorted(ids))))
        return {cid: self.users[cid] for cid in ids if cid in self.users}


def _names(runtimes, paths, tmp_path):
    (tmp_path / "home" / "u1000").mkdir(parents=True)  # the user's home, found by owner
    ids = Identities(HostFS(str(tmp_path)), runtimes=runtimes)
    infos = [classify(p) for p in paths]
    ids.refresh_if_new(infos)
    return [ids.container(i)["name"] for i in infos]


def test_a_later_runtime_replaces_an_earlier_ones_entry_only_where_it_says(tmp_path):
    first = Fake("first", {SYSTEM}, system={CID: ContainerEntry("first", name="from-first"),
                                            OTHER: ContainerEntry("first", name="first-other")})
    second = Fake("second", {SYSTEM}, system={CID: ContainerEntry("second", name="from-second"),
                                              OTHER: ContainerEntry("second", name="second-other")},
                  replaces_any=False)
    third = Fake("third", {SYSTEM}, system={OTHER: ContainerEntry("third", name="from-third")})
    names = _names([first, second, third], [f"/docker/{CID}", f"/docker/{OTHER}"], tmp_path)
    assert names == ["from-first", "from-third"]
    assert first.asked == second.asked == [("system", CID), ("system", OTHER)]  # in order, per ID


def test_a_runtime_is_asked_only_about_the_cgroups_it_trusts(tmp_path):
    system_only = Fake("sys", {SYSTEM}, system={CID: ContainerEntry("sys", name="system-name")})
    user_too = Fake("both", {SYSTEM, USER}, users={CID: ContainerEntry("both", name="users-own")})
    paths_only = Fake("paths", set(), system={CID: ContainerEntry("paths", name="never")})
    user_path = f"/user.slice/user-1000.slice/user@1000.service/app.slice/docker-{CID}.scope"
    names = _names([system_only, user_too, paths_only], [user_path], tmp_path)
    assert names == ["users-own"]  # the system's state never names a user's cgroup
    assert system_only.asked == [] and paths_only.asked == []
    assert user_too.asked == [("user", (CID,))]


def test_a_new_runtimes_records_pass_the_shipped_schema():
    """The schema takes a runtime's name from no list of its own: a runtime added to the
    registry (one module) names containers the shipped schema accepts."""
    from tests.helpers.contract import SCHEMA
    from tests.helpers.fieldtable import example
    from cgstat.contract import fields
    import jsonschema

    record = example(fields.RECORD)
    record["container"]["runtime"] = "a-runtime-not-yet-written"
    jsonschema.Draft7Validator(SCHEMA).validate(record)
    for cls in registry.RUNTIMES:
        record["container"]["runtime"] = cls.name
        jsonschema.Draft7Validator(SCHEMA).validate(record)
    record["container"]["runtime"] = 7
    assert list(jsonschema.Draft7Validator(SCHEMA).iter_errors(record))
