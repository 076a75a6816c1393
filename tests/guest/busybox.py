"""A busybox image for each runtime in the guest (no network there: made from the guest's
own busybox-static, imported once per boot)."""
from __future__ import annotations

IMAGE = "cgstat-live-busybox:1"
APPLETS = "sh sleep dd cat head true ls mkdir ping tr"
_TREE = ("set -e; d=$(mktemp -d); mkdir -p $d/bin $d/tmp $d/proc $d/sys $d/dev $d/etc; "
         "cp /bin/busybox $d/bin/; for a in %s; do ln -s busybox $d/bin/$a; done; " % APPLETS)


def tarball(guest, path="/tmp/cgstat-busybox.tar"):
    """The root tree as a tar file (for podman/docker import)."""
    guest.sh("test -s %s || { %s tar -C $d -cf %s .; rm -rf $d; }" % (path, _TREE, path), timeout_s=120, check=True)
    return path


def docker_image(guest):
    t = tarball(guest)
    guest.sh("docker image inspect %s >/dev/null 2>&1 || docker import %s %s >/dev/null" % (IMAGE, t, IMAGE),
             timeout_s=180, check=True)
    return IMAGE


def podman_image(guest, user=None):
    """Imported for root, or for `user` (rootless: its own store)."""
    t = tarball(guest)
    guest.sh("chmod 0644 %s" % t)
    cmd = "podman image exists %s || podman import %s %s >/dev/null" % (IMAGE, t, IMAGE)
    guest.sh(as_user(user, cmd) if user else cmd, timeout_s=240, check=True)
    return "localhost/" + IMAGE


def as_user(user, script):
    """A shell script run as `user` in its systemd user session (lingering: user@UID.service)."""
    return ("uid=$(id -u %s); runuser -u %s -- env XDG_RUNTIME_DIR=/run/user/$uid "
            "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus HOME=/home/%s sh -c %s"
            % (user, user, user, "'" + script.replace("'", "'\\''") + "'"))
