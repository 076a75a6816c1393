"""Debugging aid: boot a guest and keep it, then run commands in it from another shell.

    python -m tests.guest.shell boot [KIND]      # trixie, bookworm or bookworm-v1 (vm.KINDS);
                                                  # prints the agent socket; Ctrl-C ends it
    python -m tests.guest.shell run SOCK CMD...   # one command, its output and status
    python -m tests.guest.shell pytest SOCK ARGS...  # a pytest selection in the guest
    python -m tests.guest.shell put SOCK FILE...     # copy checkout files in again
"""
from __future__ import annotations

import os
import sys
import time

from tests.guest import vm


def main(argv):
    if argv[0] == "boot":
        kind = argv[1] if len(argv) > 1 else "trixie"
        logdir = os.path.join("/tmp/cgstat-guest-logs", "shell-%s-%d" % (kind, os.getpid()))
        g = vm.Guest(kind, logdir)
        try:
            g.boot(os.path.join(logdir, "build.log"))
            print("booted %s in %s: agent socket %s (logs %s)" % (kind, g.times, g.sock_path, logdir),
                  flush=True)
            g.sock.close()
            g.sock = None
            while g.proc.poll() is None:
                time.sleep(1)
        finally:
            g.close()
        return 0
    g = vm.attach(argv[1])
    try:
        return _command(g, argv)
    finally:
        g.detach()


def _command(g, argv):
    if argv[0] == "run":
        r = g.run(argv[2:], timeout_s=float(os.environ.get("T", "300")))
        sys.stdout.write(r.out)
        sys.stderr.write(r.err)
        return r.rc
    if argv[0] == "put":  # checkout files (paths relative to the repository) into the guest
        for f in argv[2:]:
            with open(os.path.join(vm.REPO, f), "rb") as fh:
                g.put("/opt/job/src/" + f, fh.read())
        return 0
    if argv[0] == "pytest":
        run = g.pytest(argv[2:], timeout_s=float(os.environ.get("T", "900")))
        print(run.result.out[-20000:])
        print(run.summary())
        return 0 if run.count("failed") == 0 else 1
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
