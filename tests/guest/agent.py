"""The guest's half of the harness: runs the host's requests, one at a time.

Baked into the guest image and started by cgstat-guest-agent.service. It reads one JSON
request per line from the virtio-serial port /dev/virtio-ports/cgstat.agent (qemu joins
the port to a unix socket on the host) and answers each with one JSON line:

    {"op": "ping"}                                   -> {"ok": true, "uptime_s": ...}
    {"op": "run", "argv": [...], "timeout_s": N,     -> {"ok": true, "rc": ..., "out": b64,
     "env": {...}, "cwd": "..."}                         "err": b64, "timed_out": bool}
    {"op": "put", "path": ..., "data": b64, "mode": N}    -> {"ok": true}
    {"op": "get", "path": ...}                       -> {"ok": true, "data": b64}

A command runs in a session of its own; on its timeout the whole session is killed
(SIGKILL to the process group), so nothing the host started outlives its budget. Python
stdlib only: this runs on the guest's own python3, not on cgstat's virtualenv.
"""
import base64
import json
import os
import signal
import subprocess
import sys
import time

PORT = "/dev/virtio-ports/cgstat.agent"


def _b64(data):
    return base64.b64encode(data or b"").decode()


def run(req):
    argv = req["argv"]
    env = dict(os.environ)
    env.update(req.get("env") or {})
    timeout = float(req.get("timeout_s", 60))
    started = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, cwd=req.get("cwd") or "/",
                         start_new_session=True)
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
    return {"ok": True, "rc": p.returncode, "out": _b64(out), "err": _b64(err),
            "timed_out": timed_out, "seconds": round(time.monotonic() - started, 3)}


def handle(req):
    op = req.get("op")
    if op == "ping":
        with open("/proc/uptime") as f:
            return {"ok": True, "uptime_s": float(f.read().split()[0])}
    if op == "run":
        return run(req)
    if op == "put":
        path = req["path"]
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(req["data"]))
        os.chmod(path, int(req.get("mode", 0o644)))
        return {"ok": True}
    if op == "get":
        with open(req["path"], "rb") as f:
            return {"ok": True, "data": _b64(f.read())}
    return {"ok": False, "error": "unknown op %r" % (op,)}


def main():
    while not os.path.exists(PORT):
        time.sleep(0.2)
    fd = os.open(PORT, os.O_RDWR)
    buf = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:  # the host side is not connected (yet, or any more)
            time.sleep(0.1)
            continue
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if not line.strip():
                continue
            req = {}
            try:
                req = json.loads(line)
                resp = handle(req)
            except Exception as exc:  # noqa: BLE001 - every failure goes back to the host
                resp = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
            resp["id"] = req.get("id") if isinstance(req, dict) else None
            data = (json.dumps(resp) + "\n").encode()
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]


if __name__ == "__main__":
    sys.exit(main())
