"""Loopback servers for the storage tests: a fault-injecting, GET-counting proxy in front of moto, and an
HTTP file server with Range support (that can be told to ignore Range, as the standard library's does).

Both run in threads of the test process, so rank and worker processes talk to them over sockets and
the counts they keep cover every process.
"""

from __future__ import annotations

import collections
import http.client
import http.server
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


@dataclass
class Fault:
    """Spoil the next ``times`` GET responses whose path contains ``match``.

    kind: ``error`` (503), ``truncate`` (close mid-body, Content-Length says more), ``short`` (a shorter
    body with a matching Content-Length), ``corrupt`` (one byte flipped), ``slow`` (wait ``delay`` s first).
    ``ranged``: None for any GET, True/False for ranged/whole GETs only.
    """

    match: str
    kind: str
    times: int = 1
    delay: float = 0.0
    ranged: bool | None = None


class _Counting(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small responses must not wait for delayed ACKs

    def log_message(self, *args) -> None:  # quiet
        pass

    def _record(self) -> None:
        path = unquote(urlsplit(self.path).path)
        ranged = "Range" in self.headers
        with self.server.guard:
            self.server.counts[(self.command, path, ranged)] += 1
            self.server.log.append((self.command, path))

    def _fault(self, ranged: bool) -> Fault | None:
        path = unquote(urlsplit(self.path).path)
        with self.server.guard:
            for fault in self.server.faults:
                if fault.times > 0 and fault.match in path and fault.ranged in (None, ranged):
                    fault.times -= 1
                    return fault
        return None

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes, *, head: bool = False) -> None:
        fault = self._fault("Range" in self.headers) if self.command == "GET" and status in (200, 206) else None
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.delay)
        if fault is not None and fault.kind == "error":
            status, headers, body = 503, [("Content-Type", "text/plain")], b"injected error"
        declared = [v for k, v in headers if k.lower() == "content-length"]
        send_len = int(declared[0]) if head and declared else len(body)
        if fault is not None and fault.kind == "corrupt" and body:
            body = body[: len(body) // 2] + bytes([body[len(body) // 2] ^ 0xFF]) + body[len(body) // 2 + 1 :]
        if fault is not None and fault.kind == "short":
            body = body[: len(body) // 2]
            send_len = len(body)
        truncate = fault is not None and fault.kind == "truncate"
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in _HOP and name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(send_len))
        if truncate:
            self.send_header("Connection", "close")
        self.end_headers()
        if head:
            return
        if truncate:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


class ProxyHandler(_Counting):
    """Forwards every request to ``server.upstream`` (host, port), counting and spoiling GETs."""

    def _forward(self) -> None:
        self._record()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            self._send(response.status, response.getheaders(), data, head=self.command == "HEAD")
        finally:
            conn.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


class RangeFileHandler(_Counting):
    """Serves ``server.directory`` with ``Range: bytes=a-b`` support (or ignores Range: ``server.ignore_range``)."""

    def _file(self) -> Path | None:
        rel = unquote(urlsplit(self.path).path).lstrip("/")
        path = (Path(self.server.directory) / rel).resolve()
        if Path(self.server.directory).resolve() not in path.parents or not path.is_file():
            return None
        return path

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        self._record()
        path = self._file()
        if path is None:
            self._send(404, [], b"not found", head=head)
            return
        data = path.read_bytes()
        spec = self.headers.get("Range")
        if spec and not self.server.ignore_range and spec.startswith("bytes="):
            first, _, last = spec[len("bytes=") :].partition("-")
            start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
            headers = [("Content-Range", f"bytes {start}-{end}/{len(data)}"), ("Accept-Ranges", "bytes")]
            self._send(206, headers, data[start : end + 1], head=head)
        else:
            self._send(200, [("Accept-Ranges", "none" if self.server.ignore_range else "bytes")], data, head=head)


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 (random port) with GET counts and injectable faults."""

    def __init__(self, handler: type, **attrs) -> None:
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = _quiet_disconnects(self.httpd.handle_error)
        self.httpd.counts = collections.Counter()
        self.httpd.log = []  # (method, path) of every request, in arrival order
        self.httpd.faults = []
        self.httpd.guard = threading.Lock()
        self.httpd.ignore_range = False
        for name, value in attrs.items():
            setattr(self.httpd, name, value)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def log(self) -> list[tuple[str, str]]:
        return self.httpd.log

    @property
    def faults(self) -> list[Fault]:
        return self.httpd.faults

    def set_ignore_range(self, value: bool) -> None:
        self.httpd.ignore_range = value

    def reset(self) -> None:
        with self.httpd.guard:
            self.httpd.counts.clear()
            self.httpd.log.clear()
            self.httpd.faults.clear()

    def gets(self, contains: str = "", *, ranged: bool | None = False) -> dict[str, int]:
        """GET counts per path containing ``contains`` (``ranged``: None for all, else only (non-)ranged)."""
        out: collections.Counter = collections.Counter()
        with self.httpd.guard:
            for (method, path, is_ranged), n in self.httpd.counts.items():
                if method == "GET" and contains in path and ranged in (None, is_ranged):
                    out[path] += n
        return dict(out)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _quiet_disconnects(handle_error):
    """Clients that hang up mid-response (on purpose, in these tests) are not errors."""

    def handle(request, client_address):
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        handle_error(request, client_address)

    return handle


def aws_env(endpoint: str) -> dict[str, str]:
    """The environment that points boto3 at ``endpoint`` with dummy credentials."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def apply_env(env: dict[str, str]) -> None:
    os.environ.update(env)
