"""The object store under the RSM (Aiven's StorageBackend: FileSystemStorage, S3Storage), one
class over obstore's synchronous API for both: a LocalStore rooted at `storage.root`, or an
S3Store (path-style or virtual hosts, custom endpoint, static or ambient credentials).

Keys are '/'-separated object names. Calls block (they are made from worker threads) and are
thread-safe: obstore's stores are shared Rust clients with their own connection pool; they
release the GIL while waiting.

Errors: every obstore failure becomes RemoteStorageError naming the operation and key; a missing
object on a read becomes RemoteResourceNotFoundError; deleting a missing object is not an error
(Aiven's delete is idempotent, as Kafka requires of deleteLogSegmentData).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import obstore
from obstore.exceptions import NotFoundError
from obstore.store import LocalStore, S3Store

from pybroker.log.remote.remote_storage_manager import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from pybroker.log.remote.storage.config import FileSystemConfig, S3Config

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig

T = TypeVar("T")


class ObjectStorage:
    def __init__(self, backend: FileSystemConfig | S3Config) -> None:
        self._put_mode: Any = None
        self._part_size = 8 * 1024 * 1024
        self._store: LocalStore | S3Store
        if isinstance(backend, FileSystemConfig):
            backend.root.mkdir(parents=True, exist_ok=True)
            # automatic_cleanup: a delete removes the directories it empties (Aiven's
            # FileSystemStorage does the same), so deleted topics leave no empty trees
            self._store = LocalStore(backend.root, automatic_cleanup=True)
            if not backend.overwrite_enabled:
                self._put_mode = "create"
            self.description = f"file://{backend.root}"
        else:
            self._store = _s3_store(backend)
            self._part_size = backend.multipart_part_size
            self.description = f"s3://{backend.bucket} at {backend.endpoint_url or 'AWS ' + backend.region}"

    def put(self, key: str, data: bytes | Iterable[bytes]) -> None:
        """Upload one object atomically: bytes in one request, an iterable as a multipart upload
        (obstore aborts the upload if the iterable raises)."""
        def call() -> None:
            if isinstance(data, bytes | bytearray | memoryview):
                obstore.put(self._store, key, data, mode=self._put_mode, use_multipart=False)
            else:
                obstore.put(self._store, key, iter(data), mode=self._put_mode, use_multipart=True,
                            chunk_size=self._part_size, max_concurrency=2)
        self._call("upload", key, call)

    def get(self, key: str) -> bytes:
        return self._call("fetch", key, lambda: bytes(obstore.get(self._store, key).bytes()))

    def get_ranges(self, key: str, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        """The byte ranges [start, end) of one object, fetched concurrently (obstore coalesces
        close ranges into one request)."""
        if not starts:
            return []
        return self._call("fetch", key, lambda: [bytes(b) for b in obstore.get_ranges(
            self._store, key, starts=list(starts), ends=list(ends))])

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            try:
                self._call("delete", key, lambda k=key: obstore.delete(self._store, k))  # type: ignore[misc]
            except RemoteResourceNotFoundError:
                pass  # already gone: deletion is idempotent

    def list(self, prefix: str) -> list[str]:
        def call() -> list[str]:
            out: list[str] = []
            for batch in obstore.list(self._store, prefix):
                out.extend(meta["path"] for meta in batch)
            return out
        return self._call("list", prefix, call)

    def _call(self, op: str, key: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except NotFoundError as e:
            raise RemoteResourceNotFoundError(f"{key} not found in {self.description}") from e
        except FileNotFoundError as e:  # LocalStore on a vanished root
            raise RemoteResourceNotFoundError(f"{key} not found in {self.description}") from e
        except Exception as e:  # obstore's BaseError family, OSError, a reader's error
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise RemoteStorageError(f"{op} of {key} in {self.description} failed: {first}") from e


def _s3_store(c: S3Config) -> S3Store:
    path_style = c.path_style_access if c.path_style_access is not None else c.endpoint_url is not None
    client: ClientConfig = {
        "connect_timeout": timedelta(milliseconds=min(c.api_call_attempt_timeout_ms, 5000)),
        "timeout": timedelta(milliseconds=c.api_call_attempt_timeout_ms),
        "allow_http": bool(c.endpoint_url and c.endpoint_url.startswith("http://")),
        "allow_invalid_certificates": not c.certificate_check,
    }
    retry: RetryConfig = {
        "max_retries": 3,
        "retry_timeout": timedelta(milliseconds=c.api_call_timeout_ms),
        "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2),
                    "base": 2},
    }
    kwargs: dict[str, Any] = {"region": c.region, "virtual_hosted_style_request": not path_style}
    if c.endpoint_url is not None:
        endpoint = c.endpoint_url
        if not path_style:
            # the AWS SDK puts the bucket in front of the endpoint's host for virtual hosts;
            # obstore takes a virtual-hosted endpoint as given, so give it the bucket's host
            url = urlsplit(endpoint)
            endpoint = urlunsplit((url.scheme, f"{c.bucket}.{url.netloc}", url.path, url.query, url.fragment))
        kwargs["endpoint"] = endpoint
    if c.access_key_id is not None:
        kwargs["access_key_id"] = c.access_key_id
        kwargs["secret_access_key"] = c.secret_access_key
    return S3Store(c.bucket, client_options=client, retry_config=retry, **kwargs)


def read_file(path: Path, length: int, piece: int) -> Iterator[bytes]:
    """The first `length` bytes of a file in pieces (a rolled segment's file may be longer than
    its data: preallocated space)."""
    with path.open("rb") as f:
        left = length
        while left > 0:
            data = f.read(min(piece, left))
            if not data:
                raise RemoteStorageError(f"{path} is shorter than its segment size {length}")
            left -= len(data)
            yield data


__all__ = ["ObjectStorage", "read_file"]
