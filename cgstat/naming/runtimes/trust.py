"""The trust rules for reading runtime state: who may name what, whose files, how, how long
(the rules are spelled out above CONFIG_MAX). Much of this state is written by users and
containers while the agent runs as root. Reads /etc/passwd and lists /home (homes), and the
state files the runtime modules name.
"""

from __future__ import annotations

import os
import time
from typing import Any, Collection, Dict, Iterable, List, Optional, Set

import orjson

from cgstat.kernel.hostfs import HostFS, ReadError, list_dir_fd, open_dir_under, read_under, read_untrusted
from cgstat.naming.runtimes.entry import ContainerEntry, Key

# - Who may name what. systemd delegates /user.slice/user-<UID>.slice/user@<UID>.service to
#   user UID, who may create any cgroup below it with any name (naming/paths.user_subtree_uid).
#   A cgroup with a `user@<UID>.service` component is named ONLY from that user's own stores,
#   in the homes `homes_of` gives; system state (Docker, rootful Podman, CRI-O, containerd,
#   kubelet, the Docker API) names ONLY cgroups outside users' subtrees. Entries are cached
#   per (uid, ID), so a user's store never names another user's container.
# - Whose files. Every folder from a user's home down to a store, and the store file, must
#   be owned by that user, by root or by the agent's own user (`owners_for`), never a link.
# - How files are opened: hostfs.read_untrusted / open_dir_under only (O_NOFOLLOW below a
#   fixed base, O_NONBLOCK, fstat must say regular file, sizes capped before reading).
# - How long: each lookup pass has a `Budget`; a denied folder is noted once (`LookupPass`).
CONFIG_MAX = 4 * 1024 * 1024  # config.v2.json, OCI config.json, daemon.json, passwd, an API answer


class Budget:
    """A deadline for one lookup pass; remembers that it ran out (said once per pass)."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        self.ran_out = False

    def left(self) -> bool:
        if time.monotonic() >= self.deadline:
            self.ran_out = True
        return not self.ran_out


class LookupPass:
    """What one lookup pass found, and which state folders we were not allowed to read."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.found: Dict[Key, ContainerEntry] = {}
        self.denied: Dict[str, str] = {}  # folder -> runtime, for the one-time warning

    def refused(self, base: str, what: str, exc: ReadError) -> None:
        """Note a denied read against `base`: a 0700 store costs one warning, not one per ID."""
        if exc.code == "permission_denied":
            self.denied.setdefault(base, what)

    def read(self, base: str, parts: Iterable[str], what: str,
             owners: Optional[Collection[int]] = None) -> Any:
        """A state file's JSON, or None when absent, refused or junk."""
        try:
            return orjson.loads(read_under(base, parts, CONFIG_MAX, owners))
        except ReadError as exc:
            self.refused(base, what, exc)
            return None
        except orjson.JSONDecodeError:
            return None

    def subdirs(self, base: str, parts: Iterable[str], what: str,
                owners: Optional[Collection[int]] = None) -> List[str]:
        """Sub-folders (no links) of base/parts, [] when absent or refused."""
        try:
            fd = open_dir_under(base, parts, owners)
        except ReadError as exc:
            self.refused(base, what, exc)
            return []
        try:
            return list_dir_fd(fd, base)
        except ReadError as exc:
            self.refused(base, what, exc)
            return []
        finally:
            os.close(fd)

    def names(self, base: str, what: str) -> List[str]:
        """Every entry name of a folder (links included: kubelet names are links), never
        following one."""
        try:
            fd = open_dir_under(base, [])
        except ReadError as exc:
            self.refused(base, what, exc)
            return []
        try:
            with os.scandir(fd) as it:
                return [e.name for e in it]
        except OSError:
            return []
        finally:
            os.close(fd)


def owners_for(uid: int) -> Set[int]:
    """Who may own the folders and files of user uid's stores: that user, root (recorded
    fixtures are checked out owned by root; a user can't create root-owned files), or the
    agent's own user."""
    return {uid, 0, os.geteuid()}


def passwd_homes(fs: HostFS) -> Optional[Dict[int, List[str]]]:
    """uid -> home folders from /etc/passwd; None when there is no /etc/passwd."""
    try:
        text = read_untrusted(fs.path("/etc/passwd"), CONFIG_MAX).decode("utf-8", "replace")
    except ReadError:
        return None
    homes: Dict[int, List[str]] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= 6 and parts[2].isdigit() and parts[5].startswith("/") and parts[5] != "/":
            homes.setdefault(int(parts[2]), []).append(parts[5].rstrip("/"))
    return homes


def homes_of(fs: HostFS, uid: int, passwd: Optional[Dict[int, List[str]]]) -> List[str]:
    """Host paths of the home folders of uid: its /etc/passwd entries; without one, the
    /home/* folders uid owns; with no /etc/passwd at all (a recorded tree), root-owned
    /home/* folders too (a user can't make one)."""
    if passwd and uid in passwd:
        return sorted(set(passwd[uid]))
    owned, root_owned = [], []
    try:
        with os.scandir(fs.path("/home")) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)  # lstat: a link is no home
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if st.st_uid == uid:
                        owned.append("/home/" + entry.name)
                    elif st.st_uid == 0:
                        root_owned.append("/home/" + entry.name)
    except OSError:
        return []
    if owned:
        return sorted(owned)
    return sorted(root_owned) if passwd is None else []
