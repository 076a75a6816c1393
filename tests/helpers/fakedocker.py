"""Stand-ins for dockerd's API socket (a unix socket under a fake host root)."""

import json
import socket
import threading


class _Listener(threading.Thread):
    """Accepts connections on a unix socket and hands each to `serve` (in this thread)."""

    def __init__(self, path, backlog=64):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(backlog)

    def run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed by the test
            self.serve(conn)

    def serve(self, conn):
        raise NotImplementedError


class SilentDocker(_Listener):
    """Accepts connections and never answers (a hung dockerd)."""

    def __init__(self, path):
        super().__init__(path)
        self.conns = []

    def serve(self, conn):
        self.conns.append(conn)  # held open, never read, never answered


class FakeDocker(_Listener):
    """Answers GET /containers/<id>/json with `body`, like dockerd; records request lines."""

    def __init__(self, path, body):
        super().__init__(path, backlog=4)
        self.body = body
        self.requests = []

    def serve(self, conn):
        with conn:
            req = conn.recv(65536).decode()
            self.requests.append(req.split("\r\n", 1)[0])
            body = json.dumps(self.body).encode()
            status = "200 OK" if "/containers/" in req else "404 Not Found"
            conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
