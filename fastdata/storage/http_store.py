"""``http://`` and ``https://`` through urllib3.

``http://`` and ``https://`` through urllib3 (:class:`HTTPStore`): read-only, retried on 5xx, and a ranged read
must be answered with 206 (a server that ignores ``Range`` raises rather than being read whole).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from typing_extensions import override

from fastdata.storage.store import CHUNK, RemoteIOError, Store, _check_range


class HTTPStore(Store):
    """``http(s)://host/path`` through urllib3; read-only. Ranged reads must be answered with 206."""

    def _make_client(self) -> Any:
        import urllib3

        retries = urllib3.Retry(
            total=4, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504), allowed_methods=("GET", "HEAD")
        )
        return urllib3.PoolManager(
            num_pools=4, maxsize=32, retries=retries, timeout=urllib3.Timeout(connect=10, read=60)
        )

    def _request(self, method: str, rel: str, headers: dict[str, str] | None = None, preload: bool = True) -> Any:
        from urllib3.exceptions import HTTPError

        url = self.location.child(rel)
        try:
            response = self.client().request(method, url, headers=headers, preload_content=preload)
        except HTTPError as exc:
            raise RemoteIOError(f"{url}: {exc}") from exc
        if response.status == 404:
            response.release_conn()
            raise FileNotFoundError(f"{url} does not exist")
        if response.status not in (200, 206):
            response.release_conn()
            raise RemoteIOError(f"{url}: HTTP {response.status}")
        return response

    @override
    def read(self, rel: str, start: int | None = None, length: int | None = None) -> bytes:
        if start is None:
            return b"".join(self.stream(rel))
        if length is None:
            raise ValueError(f"{self.location.child(rel)}: a ranged read needs a length with its start")
        from urllib3.exceptions import HTTPError

        response = self._request("GET", rel, {"Range": f"bytes={start}-{start + length - 1}"}, preload=False)
        try:
            if response.status == 200:  # do not read a whole object that was meant to be a slice
                _check_range(self.location.child(rel), 200, 0, length)
            data = response.read()
        except HTTPError as exc:
            raise RemoteIOError(f"{self.location.child(rel)}: body ended early or failed ({exc})") from exc
        finally:
            response.release_conn()
        _check_range(self.location.child(rel), response.status, len(data), length)
        return data

    @override
    def stream(self, rel: str) -> Iterator[bytes]:
        from urllib3.exceptions import HTTPError

        response = self._request("GET", rel, preload=False)
        try:
            yield from response.stream(CHUNK)  # urllib3 raises when the body is shorter than Content-Length
        except HTTPError as exc:
            raise RemoteIOError(f"{self.location.child(rel)}: body ended early or failed ({exc})") from exc
        finally:
            response.release_conn()

    @override
    def size(self, rel: str) -> int | None:
        try:
            response = self._request("HEAD", rel)
        except FileNotFoundError:
            return None
        length = response.headers.get("Content-Length")
        return int(length) if length is not None else None
