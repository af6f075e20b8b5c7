"""``s3://`` through boto3.

``s3://`` through boto3 (:class:`S3Store`): credentials, region and endpoint come from the standard environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_S3`` for MinIO, R2, moto...), exactly as the AWS CLI reads them; one client per process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from typing_extensions import override

from fastdata.storage.store import CHUNK, RemoteIOError, Store, _check_range

S3_HINT = "reading s3:// needs boto3: `pip install 'fastdata[s3]'` (or `pip install boto3`)"

_BOTO_LOADER: Any = None  # botocore's model loader, kept so that forked processes skip re-parsing the models


class S3Store(Store):
    """``s3://bucket/prefix`` through boto3 (sync, one client per process)."""

    def _make_client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise ImportError(S3_HINT) from exc
        import botocore.session

        global _BOTO_LOADER
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        config = Config(
            retries={"max_attempts": 4, "mode": "standard"},
            max_pool_connections=32,
            connect_timeout=10,
            read_timeout=60,
        )
        core = botocore.session.get_session()  # a fresh session: credentials, locks and sockets of this process
        # the parsed service models (plain data) of the parent: 17 ms, not 75 ms, per worker
        if _BOTO_LOADER is not None:
            core.register_component("data_loader", _BOTO_LOADER)
        client = boto3.session.Session(botocore_session=core).client("s3", region_name=region, config=config)
        _BOTO_LOADER = core.get_component("data_loader")
        return client

    def _call(self, rel: str, method: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        key = self.location.key(rel)
        try:
            return getattr(self.client(), method)(Bucket=self.location.bucket, Key=key, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(f"{self.location.child(rel)} does not exist") from None
            raise RemoteIOError(f"{self.location.child(rel)}: {exc}") from exc
        except BotoCoreError as exc:
            raise RemoteIOError(f"{self.location.child(rel)}: {exc}") from exc

    @override
    def read(self, rel: str, start: int | None = None, length: int | None = None) -> bytes:
        if start is None:
            return b"".join(self.stream(rel))
        if length is None:
            raise ValueError(f"{self.location.child(rel)}: a ranged read needs a length with its start")
        response = self._call(rel, "get_object", Range=f"bytes={start}-{start + length - 1}")
        data = self._body(rel, lambda: response["Body"].read())
        _check_range(self.location.child(rel), response["ResponseMetadata"]["HTTPStatusCode"], len(data), length)
        return data

    @override
    def stream(self, rel: str) -> Iterator[bytes]:
        body = self._call(rel, "get_object")["Body"]
        try:
            chunks = body.iter_chunks(CHUNK)
            while True:
                chunk = self._body(rel, lambda: next(chunks, None))
                if chunk is None:
                    return
                yield chunk
        finally:
            body.close()

    def _body(self, rel: str, read: Any) -> Any:
        from botocore.exceptions import BotoCoreError
        from urllib3.exceptions import HTTPError

        try:
            return read()
        except (BotoCoreError, HTTPError, OSError) as exc:
            raise RemoteIOError(f"{self.location.child(rel)}: body ended early or failed ({exc})") from exc

    @override
    def size(self, rel: str) -> int | None:
        try:
            return int(self._call(rel, "head_object")["ContentLength"])
        except FileNotFoundError:
            return None
        except RemoteIOError as exc:
            if "404" in str(exc) or "Not Found" in str(exc):
                return None
            raise

    @override
    def upload(self, rel: str, path: str | os.PathLike) -> None:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client().upload_file(os.fspath(path), self.location.bucket, self.location.key(rel))
        except (S3UploadFailedError, BotoCoreError, ClientError) as exc:
            raise RemoteIOError(f"uploading {path} to {self.location.child(rel)} failed: {exc}") from exc

    @override
    def put(self, rel: str, data: bytes) -> None:
        self._call(rel, "put_object", Body=data)

    @override
    def delete(self, rel: str) -> None:
        self._call(rel, "delete_object")
