"""GCS backend primitives against real emulator processes (no wire mocks).

Most tests run on fake-gcs-server (the conformance server). Resume-after-failure and
server-side checksum tests run on gcp-storage-emulator, which implements the resumable
status query and finalisation checks that fake-gcs-server gets wrong.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from _fixtures_gcs import Emulator
from astore import (
    AlreadyExistsError,
    ClosedError,
    ConfigurationError,
    IntegrityError,
    InvalidRangeError,
    NetworkError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    RequestTimeoutError,
    ServerError,
    ThrottledError,
    UnsupportedOperationError,
)
from astore._checksum import hash_bytes
from astore.backends._gcs_client import _Request
from astore.backends._gcs_errors import translate
from astore.backends.gcs import GCSBackend

pytestmark = [pytest.mark.anyio, pytest.mark.gcs]

KiB = 1024
CHUNK = 256 * KiB


def _checksums(data: bytes) -> dict[str, str]:
    return {"crc32c": hash_bytes("crc32c", data)}


async def _read(backend: GCSBackend, key: str, start: int = 0, end: int | None = None) -> bytes:
    chunks = [c async for c in backend.get_range(key, start, end, etag=None, chunk_size=64 * KiB)]
    return b"".join(chunks)


async def _put(backend: GCSBackend, key: str, data: bytes, **kw: Any) -> Any:
    return await backend.put_object(
        key,
        data,
        if_not_exists=kw.get("if_not_exists", False),
        checksums=kw.get("checksums", _checksums(data)),
        content_type=kw.get("content_type"),
    )


async def _multipart(
    backend: GCSBackend, key: str, parts: list[bytes], *, checksums: dict[str, str] | None = None
) -> Any:
    upload_id = await backend.create_upload(key, content_type=None, checksum_algorithm="crc32c")
    infos, offset = [], 0
    for number, part in enumerate(parts, 1):
        infos.append(
            await backend.upload_part(key, upload_id, number, part, offset=offset, checksums={})
        )
        offset += len(part)
    whole = b"".join(parts)
    return await backend.complete_upload(
        key, upload_id, infos, if_not_exists=False, checksums=checksums or _checksums(whole)
    )


@pytest.fixture
async def backend(fake_gcs_server: Emulator) -> AsyncIterator[GCSBackend]:
    b = GCSBackend(
        fake_gcs_server.new_bucket(), max_connections=8, emulator_host=fake_gcs_server.root
    )
    await b.open()
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def strict_backend(gcp_storage_emulator: Emulator) -> AsyncIterator[GCSBackend]:
    b = GCSBackend(
        gcp_storage_emulator.new_bucket(),
        max_connections=8,
        emulator_host=gcp_storage_emulator.root,
    )
    await b.open()
    try:
        yield b
    finally:
        await b.close()


# -- a TCP proxy that counts request bytes and can cut one request half way ---------------


class CuttingProxy:
    """Forwards loopback TCP to an emulator, counting client→server bytes.

    ``cut_after(n)`` arms it: after ``n`` more client bytes the connection carrying them is
    dropped in both directions, as a network failure in the middle of a request body would.
    """

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.sent = 0
        self.cuts = 0
        self._budget: int | None = None
        self._server: asyncio.Server | None = None

    @property
    def root(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def cut_after(self, n: int) -> None:
        self._budget = n

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        cut = asyncio.Event()

        async def client_to_server() -> None:
            while data := await reader.read(64 * KiB):
                if self._budget is not None:
                    if len(data) >= self._budget:
                        data, self._budget = data[: self._budget], None
                        cut.set()
                        self.cuts += 1
                    else:
                        self._budget -= len(data)
                up_writer.write(data)
                self.sent += len(data)
                await up_writer.drain()
                if cut.is_set():
                    # The server sees the body end early and deals with what it got.
                    up_writer.write_eof()
                    return

        async def server_to_client() -> None:
            while data := await up_reader.read(64 * KiB):
                if not cut.is_set():
                    writer.write(data)
                    await writer.drain()

        c2s = asyncio.ensure_future(client_to_server())
        s2c = asyncio.ensure_future(server_to_client())
        try:
            await asyncio.wait([c2s, s2c], return_when=asyncio.FIRST_COMPLETED)
            if cut.is_set():
                # Only once the server has finished with the cut request does the client
                # learn of the failure, so its status query sees the server's final state.
                await asyncio.wait([s2c], timeout=30)
        finally:
            for task in (c2s, s2c):
                task.cancel()
            await asyncio.gather(c2s, s2c, return_exceptions=True)
            for w in (writer, up_writer):
                w.close()


@pytest.fixture
async def proxied_strict_backend(
    gcp_storage_emulator: Emulator,
) -> AsyncIterator[tuple[GCSBackend, CuttingProxy]]:
    proxy = CuttingProxy(gcp_storage_emulator.root)
    await proxy.start()
    b = GCSBackend(gcp_storage_emulator.new_bucket(), max_connections=4, emulator_host=proxy.root)
    await b.open()
    try:
        yield b, proxy
    finally:
        await b.close()
        await proxy.stop()


# -- construction and lifecycle ------------------------------------------------------------


async def test_url_and_repr_name_only_the_bucket() -> None:
    """The URL is gs://BUCKET and the repr carries nothing else but the emulator root."""
    b = GCSBackend("bkt", max_connections=1, emulator_host="http://127.0.0.1:1")
    assert b.url == "gs://bkt"
    assert repr(b) == "GCSBackend('gs://bkt', emulator='http://127.0.0.1:1')"


async def test_invalid_timeout_is_a_configuration_error() -> None:
    """A non-positive per-read timeout is rejected up front."""
    with pytest.raises(ConfigurationError):
        GCSBackend("bkt", max_connections=1, timeout=0)


async def test_calls_before_open_raise_closed_error() -> None:
    """Using the backend before open() raises ClosedError, not an aiohttp error."""
    b = GCSBackend("bkt", max_connections=1, emulator_host="http://127.0.0.1:1")
    with pytest.raises(ClosedError):
        await b.head("k")


async def test_close_without_open_is_harmless() -> None:
    """close() on a never-opened backend does nothing."""
    await GCSBackend("bkt", max_connections=1, emulator_host="http://127.0.0.1:1").close()


async def test_missing_service_file_is_a_configuration_error(tmp_path: Path) -> None:
    """A credentials file that does not exist fails open() with ConfigurationError."""
    b = GCSBackend("bkt", max_connections=1, service_file=tmp_path / "nope.json")
    with pytest.raises(ConfigurationError):
        await b.open()


async def test_unreachable_server_is_a_network_error() -> None:
    """A refused connection maps to NetworkError (retryable)."""
    b = GCSBackend("bkt", max_connections=1, emulator_host="http://127.0.0.1:9")
    await b.open()
    try:
        with pytest.raises(NetworkError):
            await b.head("k")
    finally:
        await b.close()


# -- objects -------------------------------------------------------------------------------


async def test_put_then_head_reports_size_generation_and_crc32c(backend: GCSBackend) -> None:
    """head() returns size, the generation as etag and version, and the stored crc32c."""
    data = os.urandom(1000)
    put = await _put(backend, "dir/a.bin", data, content_type="application/x-test")
    info = await backend.head("dir/a.bin")
    assert info.size == 1000
    assert info.etag == info.version == put.version
    assert info.etag is not None
    assert info.etag.isdigit()
    assert info.checksums["crc32c"] == _checksums(data)["crc32c"]
    assert info.content_type == "application/x-test"
    assert info.last_modified is not None


async def test_put_object_round_trips_bytes(backend: GCSBackend) -> None:
    """Bytes written with put_object read back identical."""
    data = os.urandom(3 * CHUNK + 5)
    await _put(backend, "k", data)
    assert await _read(backend, "k") == data


async def test_put_if_not_exists_on_existing_key_raises_already_exists(
    backend: GCSBackend,
) -> None:
    """A conditional create of an existing key raises AlreadyExistsError."""
    await _put(backend, "k", b"one")
    with pytest.raises(AlreadyExistsError):
        await _put(backend, "k", b"two", if_not_exists=True)
    assert await _read(backend, "k") == b"one"


async def test_put_with_wrong_crc32c_raises_integrity_error_and_stores_nothing(
    backend: GCSBackend,
) -> None:
    """A checksum that does not match the bytes fails the put and leaves no object."""
    with pytest.raises(IntegrityError):
        await _put(backend, "k", b"payload", checksums=_checksums(b"other"))
    with pytest.raises(NotFoundError):
        await backend.head("k")


async def test_put_records_non_native_checksum_as_metadata(backend: GCSBackend) -> None:
    """A sha256 GCS cannot verify is recorded and returned by head()."""
    data = b"sha me"
    sums = {**_checksums(data), "sha256": hash_bytes("sha256", data)}
    await _put(backend, "k", data, checksums=sums)
    assert (await backend.head("k")).checksums["sha256"] == sums["sha256"]


async def test_head_of_missing_key_raises_not_found(backend: GCSBackend) -> None:
    """head() of a missing key raises NotFoundError carrying key and store."""
    with pytest.raises(NotFoundError) as info:
        await backend.head("missing")
    assert info.value.key == "missing"
    assert info.value.store == backend.url


async def test_missing_bucket_raises_not_found(fake_gcs_server: Emulator) -> None:
    """Operations on a bucket that does not exist raise NotFoundError."""
    b = GCSBackend("no-such-bucket-x", max_connections=1, emulator_host=fake_gcs_server.root)
    await b.open()
    try:
        with pytest.raises(NotFoundError):
            [p async for p in b.list_pages("", delimiter=None, start_after=None, page_size=10)]
    finally:
        await b.close()


async def test_get_range_returns_the_requested_slice(backend: GCSBackend) -> None:
    """get_range(start, end) yields exactly bytes [start, end)."""
    data = os.urandom(10_000)
    await _put(backend, "k", data)
    assert await _read(backend, "k", 100, 5000) == data[100:5000]
    assert await _read(backend, "k", 9000) == data[9000:]


async def test_get_range_of_missing_key_raises_not_found(backend: GCSBackend) -> None:
    """Reading a missing key raises NotFoundError."""
    with pytest.raises(NotFoundError):
        await _read(backend, "missing")


async def test_get_range_past_the_end_raises_invalid_range(backend: GCSBackend) -> None:
    """A range starting past the end raises InvalidRangeError."""
    await _put(backend, "k", b"short")
    with pytest.raises(InvalidRangeError):
        await _read(backend, "k", 100)


async def test_get_range_pinned_to_old_generation_raises_precondition_failed(
    backend: GCSBackend,
) -> None:
    """A read pinned to an etag the object no longer has raises PreconditionFailedError."""
    old = await _put(backend, "k", b"first")
    await _put(backend, "k", b"second")
    with pytest.raises(PreconditionFailedError):
        async for _ in backend.get_range("k", 0, None, etag=old.etag, chunk_size=1024):
            pass


async def test_get_range_pinned_to_current_generation_reads(backend: GCSBackend) -> None:
    """A read pinned to the current etag succeeds."""
    info = await _put(backend, "k", b"current")
    chunks = [c async for c in backend.get_range("k", 0, None, etag=info.etag, chunk_size=2)]
    assert b"".join(chunks) == b"current"


async def test_abandoned_read_does_not_break_the_next_request(backend: GCSBackend) -> None:
    """Stopping a read early releases its connection; later calls still work."""
    await _put(backend, "k", os.urandom(4 * CHUNK))
    stream = backend.get_range("k", 0, None, etag=None, chunk_size=1024)
    await stream.__anext__()
    await stream.aclose()  # type: ignore[attr-defined]
    assert (await backend.head("k")).size == 4 * CHUNK


async def test_list_pages_stream_in_order_with_page_size(backend: GCSBackend) -> None:
    """Listing yields every key once, in order, a page at a time."""
    keys = [f"p/{i:02d}" for i in range(7)]
    for k in keys:
        await _put(backend, k, b"x")
    pages = [
        p async for p in backend.list_pages("p/", delimiter=None, start_after=None, page_size=3)
    ]
    assert [o.key for p in pages for o in p.objects] == keys
    assert len(pages) >= 3


async def test_list_start_after_is_strictly_after(backend: GCSBackend) -> None:
    """start_after excludes the named key itself."""
    for k in ("a", "b", "c"):
        await _put(backend, k, b"x")
    pages = [p async for p in backend.list_pages("", delimiter=None, start_after="b", page_size=10)]
    assert [o.key for p in pages for o in p.objects] == ["c"]


async def test_list_with_delimiter_rolls_up_prefixes(backend: GCSBackend) -> None:
    """With a delimiter, nested keys come back as common prefixes."""
    for k in ("top", "d/1", "d/2", "e/x/1"):
        await _put(backend, k, b"x")
    pages = [p async for p in backend.list_pages("", delimiter="/", start_after=None, page_size=10)]
    assert [o.key for p in pages for o in p.objects] == ["top"]
    assert sorted(x for p in pages for x in p.prefixes) == ["d/", "e/"]


async def test_delete_many_deletes_and_ignores_missing(backend: GCSBackend) -> None:
    """delete_many removes existing keys and reports no error for missing ones."""
    for k in ("a", "b"):
        await _put(backend, k, b"x")
    assert await backend.delete_many(["a", "b", "never"]) == {}
    for k in ("a", "b"):
        with pytest.raises(NotFoundError):
            await backend.head(k)


async def test_copy_preserves_bytes_and_crc32c(backend: GCSBackend) -> None:
    """copy() produces an identical object with the same crc32c."""
    data = os.urandom(2 * CHUNK + 1)
    await _put(backend, "src", data)
    info = await backend.copy("src", "dst", if_not_exists=False)
    assert info.key == "dst"
    assert info.checksums["crc32c"] == _checksums(data)["crc32c"]
    assert await _read(backend, "dst") == data


async def test_copy_of_missing_source_names_the_source(backend: GCSBackend) -> None:
    """Copying a missing key raises NotFoundError about the source key."""
    with pytest.raises(NotFoundError) as info:
        await backend.copy("missing", "dst", if_not_exists=False)
    assert info.value.key == "missing"


# -- multipart: resumable sessions ---------------------------------------------------------


async def test_multipart_upload_assembles_parts(backend: GCSBackend) -> None:
    """Aligned parts plus an unaligned last part assemble into the exact object."""
    parts = [os.urandom(CHUNK), os.urandom(2 * CHUNK), os.urandom(12345)]
    info = await _multipart(backend, "mp", parts)
    whole = b"".join(parts)
    assert info.size == len(whole)
    assert info.checksums["crc32c"] == _checksums(whole)["crc32c"]
    assert await _read(backend, "mp") == whole


async def test_multipart_aligned_last_part_finalises_with_empty_request(
    backend: GCSBackend,
) -> None:
    """When the last part is aligned, completion sends no bytes and still finalises."""
    parts = [os.urandom(CHUNK), os.urandom(CHUNK)]
    await _multipart(backend, "mp", parts)
    assert await _read(backend, "mp") == b"".join(parts)


async def test_multipart_single_short_part(backend: GCSBackend) -> None:
    """An upload of one part smaller than 256 KiB is sent whole at completion."""
    await _multipart(backend, "mp", [b"tiny"])
    assert await _read(backend, "mp") == b"tiny"


async def test_upload_id_does_not_reveal_the_session_uri(backend: GCSBackend) -> None:
    """The upload id is opaque: the session URI (a write credential) stays in the backend."""
    upload_id = await backend.create_upload("k", content_type=None, checksum_algorithm=None)
    assert "upload_id" not in upload_id
    assert "http" not in upload_id
    await backend.abort_upload("k", upload_id)


async def test_complete_after_abort_raises_not_found(backend: GCSBackend) -> None:
    """An aborted upload id is unknown to complete_upload."""
    upload_id = await backend.create_upload("k", content_type=None, checksum_algorithm=None)
    await backend.abort_upload("k", upload_id)
    with pytest.raises(NotFoundError):
        await backend.complete_upload("k", upload_id, [], if_not_exists=False, checksums={})


async def test_abort_of_unknown_upload_is_not_an_error(backend: GCSBackend) -> None:
    """Aborting an unknown upload id does nothing."""
    await backend.abort_upload("k", "gcs-unknown")


async def test_list_uploads_is_always_empty(backend: GCSBackend) -> None:
    """GCS cannot list resumable sessions, so list_uploads yields nothing."""
    await backend.create_upload("k", content_type=None, checksum_algorithm=None)
    assert [u async for u in backend.list_uploads("")] == []


async def test_multipart_if_not_exists_on_existing_key_raises_already_exists(
    backend: GCSBackend,
) -> None:
    """complete_upload(if_not_exists=True) refuses to replace an existing object."""
    await _put(backend, "k", b"existing")
    upload_id = await backend.create_upload("k", content_type=None, checksum_algorithm=None)
    part = await backend.upload_part("k", upload_id, 1, b"new", offset=0, checksums={})
    with pytest.raises(AlreadyExistsError):
        await backend.complete_upload(
            "k", upload_id, [part], if_not_exists=True, checksums=_checksums(b"new")
        )
    assert await _read(backend, "k") == b"existing"


async def test_multipart_wrong_crc32c_raises_integrity_error_on_fake_gcs(
    backend: GCSBackend,
) -> None:
    """A wrong whole-object crc32c fails completion and leaves no object behind."""
    with pytest.raises(IntegrityError):
        await _multipart(backend, "mp", [os.urandom(CHUNK), b"end"], checksums=_checksums(b"x"))
    with pytest.raises(NotFoundError):
        await backend.head("mp")


# -- strict emulator: resume and server-side verification ----------------------------------


async def test_strict_multipart_upload_assembles_parts(strict_backend: GCSBackend) -> None:
    """On the strict emulator, parts assemble into the exact object."""
    parts = [os.urandom(CHUNK), os.urandom(CHUNK), os.urandom(1000)]
    await _multipart(strict_backend, "mp", parts)
    assert await _read(strict_backend, "mp") == b"".join(parts)


async def test_strict_wrong_crc32c_at_completion_raises_integrity_error(
    strict_backend: GCSBackend,
) -> None:
    """A wrong crc32c at finalisation raises IntegrityError and no object is stored."""
    with pytest.raises(IntegrityError):
        await _multipart(
            strict_backend, "mp", [os.urandom(CHUNK), b"end"], checksums=_checksums(b"x")
        )
    with pytest.raises(NotFoundError):
        await strict_backend.head("mp")


async def test_strict_put_with_wrong_crc32c_is_rejected_by_the_service(
    strict_backend: GCSBackend,
) -> None:
    """The service itself rejects a put whose crc32c does not match (IntegrityError)."""
    with pytest.raises(IntegrityError) as info:
        await _put(strict_backend, "k", b"payload", checksums=_checksums(b"other"))
    assert isinstance(info.value.__cause__, aiohttp.ClientResponseError)
    with pytest.raises(NotFoundError):
        await strict_backend.head("k")


async def test_interrupted_part_resumes_from_the_service_offset(
    proxied_strict_backend: tuple[GCSBackend, CuttingProxy],
) -> None:
    """A part cut half way is retried by sending only the bytes the service did not keep."""
    backend, proxy = proxied_strict_backend
    parts = [os.urandom(2 * CHUNK), os.urandom(2 * CHUNK), os.urandom(777)]
    upload_id = await backend.create_upload("big", content_type=None, checksum_algorithm=None)
    p1 = await backend.upload_part("big", upload_id, 1, parts[0], offset=0, checksums={})

    proxy.cut_after(CHUNK)  # headers plus about half of part 2's body, then the link drops
    with pytest.raises(NetworkError) as failure:
        await backend.upload_part("big", upload_id, 2, parts[1], offset=2 * CHUNK, checksums={})
    assert proxy.cuts == 1
    assert "upload_id=" not in str(failure.value)
    assert "upload_id=" not in str(failure.value.__cause__)

    before = proxy.sent
    p2 = await backend.upload_part("big", upload_id, 2, parts[1], offset=2 * CHUNK, checksums={})
    resent = proxy.sent - before
    # Roughly the half the service did not keep, plus two sets of request headers.
    assert CHUNK // 2 < resent < len(parts[1]) - CHUNK // 2

    p3 = await backend.upload_part("big", upload_id, 3, parts[2], offset=4 * CHUNK, checksums={})
    whole = b"".join(parts)
    await backend.complete_upload(
        "big", upload_id, [p1, p2, p3], if_not_exists=False, checksums=_checksums(whole)
    )
    assert await _read(backend, "big") == whole


async def test_repeated_part_after_success_sends_no_data(
    proxied_strict_backend: tuple[GCSBackend, CuttingProxy],
) -> None:
    """Re-sending a part the service already holds only asks for the session status."""
    backend, proxy = proxied_strict_backend
    part = os.urandom(CHUNK)
    upload_id = await backend.create_upload("k", content_type=None, checksum_algorithm=None)
    first = await backend.upload_part("k", upload_id, 1, part, offset=0, checksums={})
    # The store would repeat a part whose answer was lost; simulate by forgetting the answer.
    backend._uploads[upload_id].uncertain = True
    before = proxy.sent
    again = await backend.upload_part("k", upload_id, 1, part, offset=0, checksums={})
    assert proxy.sent - before < 4 * KiB
    assert again == first
    await backend.complete_upload(
        "k", upload_id, [again], if_not_exists=False, checksums=_checksums(part)
    )
    assert await _read(backend, "k") == part


async def test_part_after_a_missing_part_is_refused(strict_backend: GCSBackend) -> None:
    """A part whose offset is past what the service holds raises UploadError."""
    from astore import UploadError

    upload_id = await strict_backend.create_upload("k", content_type=None, checksum_algorithm=None)
    with pytest.raises(UploadError):
        await strict_backend.upload_part(
            "k", upload_id, 2, os.urandom(CHUNK), offset=CHUNK, checksums={}
        )


# -- signed URLs ----------------------------------------------------------------------------


async def test_signed_url_without_a_key_is_unsupported(backend: GCSBackend) -> None:
    """On the emulator without a service-account key, signing is refused clearly."""
    with pytest.raises(UnsupportedOperationError):
        await backend.signed_url("k", method="GET", expires=60)


def _service_account_file(tmp_path: Path) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path = tmp_path / "sa.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "client_email": "signer@astore-test.iam.gserviceaccount.com",
                "private_key": pem,
                "token_uri": "http://127.0.0.1:9/token",
            }
        )
    )
    return path


async def test_signed_url_with_a_service_account_key_is_v4(
    fake_gcs_server: Emulator, tmp_path: Path
) -> None:
    """With a service-account key the URL is V4-signed and holds no key material."""
    b = GCSBackend(
        "bkt",
        max_connections=1,
        emulator_host=fake_gcs_server.root,
        service_file=_service_account_file(tmp_path),
    )
    await b.open()
    try:
        url = await b.signed_url("dir/k.bin", method="GET", expires=600)
    finally:
        await b.close()
    assert "/bkt/dir/k.bin?" in url
    assert "X-Goog-Algorithm=GOOG4-RSA-SHA256" in url
    assert "X-Goog-Signature=" in url
    assert "PRIVATE" not in url


async def test_signed_url_expiry_beyond_seven_days_is_rejected(backend: GCSBackend) -> None:
    """An expiry over 7 days is a configuration error."""
    with pytest.raises(ConfigurationError):
        await backend.signed_url("k", method="GET", expires=8 * 24 * 3600)


# -- the error boundary ---------------------------------------------------------------------


def _status_error(status: int, message: str = "", headers: dict[str, str] | None = None) -> Any:
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    info = aiohttp.RequestInfo(URL("http://x/o"), "GET", CIMultiDictProxy(CIMultiDict()))
    return aiohttp.ClientResponseError(
        info, (), status=status, message=message, headers=CIMultiDict(headers or {})
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (404, NotFoundError),
        (410, NotFoundError),
        (401, PermissionDeniedError),
        (403, PermissionDeniedError),
        (412, PreconditionFailedError),
        (416, InvalidRangeError),
        (408, RequestTimeoutError),
        (429, ThrottledError),
        (500, ServerError),
        (503, ServerError),
    ],
)
async def test_status_codes_map_to_the_error_tree(status: int, expected: type) -> None:
    """Each HTTP status maps to its astore error."""
    err = translate(_status_error(status), store="gs://b", operation="get", key="k")
    assert type(err) is expected


async def test_412_on_conditional_create_is_already_exists() -> None:
    """A 412 on a create-only write means the key exists."""
    err = translate(
        _status_error(412), store="gs://b", operation="put", key="k", conditional_create=True
    )
    assert isinstance(err, AlreadyExistsError)


async def test_400_with_checksum_message_is_integrity_error() -> None:
    """A 400 that names a checksum is an IntegrityError; other 400s are not."""
    bad = _status_error(400, 'Provided CRC32C "a" doesn\'t match calculated CRC32C "b".')
    assert isinstance(translate(bad, store="s", operation="put", key="k"), IntegrityError)
    other = translate(_status_error(400, "Invalid argument"), store="s", operation="put", key="k")
    assert not isinstance(other, IntegrityError)


async def test_429_carries_retry_after() -> None:
    """Retry-After on a 429 becomes ThrottledError.retry_after."""
    err = translate(
        _status_error(429, headers={"Retry-After": "3"}), store="s", operation="get", key="k"
    )
    assert isinstance(err, ThrottledError)
    assert err.retry_after == 3.0


async def test_timeouts_and_resets_are_transient() -> None:
    """Timeouts map to RequestTimeoutError; resets and cut bodies to NetworkError."""
    where = {"store": "s", "operation": "get", "key": "k"}
    assert isinstance(translate(aiohttp.ServerTimeoutError(), **where), RequestTimeoutError)
    assert isinstance(translate(aiohttp.ServerDisconnectedError(), **where), NetworkError)
    assert isinstance(translate(aiohttp.ClientPayloadError("cut"), **where), NetworkError)
    assert isinstance(translate(ConnectionResetError(), **where), NetworkError)


async def test_crc32c_values_are_base64_big_endian() -> None:
    """The checksum form sent to GCS is base64 of the big-endian CRC32C."""
    assert base64.b64decode(hash_bytes("crc32c", b"hello world")) == bytes.fromhex("c99465aa")


# -- through AsyncStore, and interop with plain gcloud-aio-storage -------------------------

SMALL_PARTS = {"part_size": 2 * CHUNK, "multipart_threshold": 4 * CHUNK, "max_concurrency": 4}


async def test_store_upload_reads_back_byte_identical_with_gcloud_aio(
    gcs_store_args: tuple[str, dict[str, Any]], gcloud_storage: Any
) -> None:
    """A multipart upload written by astore streams back identical through download_stream."""
    import astore
    from conftest import FAST_RETRY

    url, options = gcs_store_args
    data = os.urandom(5 * CHUNK + 321)
    transfer = astore.TransferConfig(**SMALL_PARTS)
    async with astore.open(url, transfer=transfer, retry=FAST_RETRY, **options) as store:
        info = await store.put("interop/big.bin", data)
    bucket = url.removeprefix("gs://").split("/")[0]
    stream = await gcloud_storage.download_stream(bucket, "some-prefix/interop/big.bin")
    got = bytearray()
    while chunk := await stream.read(64 * KiB):
        got += chunk
    assert bytes(got) == data
    meta = await gcloud_storage.download_metadata(bucket, "some-prefix/interop/big.bin")
    assert meta["crc32c"] == info.checksums["crc32c"]


async def test_gcloud_aio_upload_reads_back_verified_with_astore(
    gcs_store_args: tuple[str, dict[str, Any]], gcloud_storage: Any
) -> None:
    """An object written by plain gcloud-aio-storage is read identical (and verified) by astore."""
    import astore
    from conftest import FAST_RETRY

    url, options = gcs_store_args
    bucket = url.removeprefix("gs://").split("/")[0]
    data = os.urandom(3 * CHUNK + 11)
    await gcloud_storage.upload(bucket, "some-prefix/from-gcloud.bin", data)
    async with astore.open(url, retry=FAST_RETRY, **options) as store:
        assert await store.get("from-gcloud.bin") == data
        info = await store.stat("from-gcloud.bin")
    assert info.checksums["crc32c"] == _checksums(data)["crc32c"]


async def test_store_upload_survives_a_part_cut_mid_body(gcp_storage_emulator: Emulator) -> None:
    """AsyncStore's retry of a cut part resumes the session instead of re-sending the object."""
    import astore
    from conftest import FAST_RETRY

    proxy = CuttingProxy(gcp_storage_emulator.root)
    await proxy.start()
    try:
        bucket = gcp_storage_emulator.new_bucket()
        data = os.urandom(8 * CHUNK + 777)
        transfer = astore.TransferConfig(**SMALL_PARTS)
        async with astore.open(
            f"gs://{bucket}", transfer=transfer, retry=FAST_RETRY, emulator_host=proxy.root
        ) as store:
            proxy.cut_after(3 * CHUNK)  # part 1, then half of part 2
            await store.put("big.bin", data)
            assert proxy.cuts == 1
            assert proxy.sent < len(data) + CHUNK  # nothing was sent twice beyond the cut
            assert await store.get("big.bin") == data
    finally:
        await proxy.stop()


async def test_chained_http_errors_carry_no_request_headers(backend: GCSBackend) -> None:
    """The chained aiohttp error is stripped of request headers (where tokens travel)."""
    with pytest.raises(NotFoundError) as info:
        await backend.head("missing")
    cause = info.value.__cause__
    assert isinstance(cause, aiohttp.ClientResponseError)
    assert len(cause.request_info.headers) == 0


async def test_body_writer_failing_after_an_early_answer_is_not_left_unretrieved() -> None:
    """A server that answers before the body is sent, then hangs up, leaves no task error."""
    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    hung_up = asyncio.Event()

    async def answer_early(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()
        hung_up.set()

    async def body() -> AsyncIterator[bytes]:
        yield b"x" * 10
        await hung_up.wait()
        await asyncio.sleep(0.05)  # the client sees the hang-up before the body's end

    server = await asyncio.start_server(answer_early, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with (
            aiohttp.ClientSession(request_class=_Request) as http,
            http.put(f"http://127.0.0.1:{port}/", data=body()) as response,
        ):
            await asyncio.sleep(0.2)  # the body writer finishes (and fails) first
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
        server.close()
        await server.wait_closed()
    assert [str(context.get("exception")) for context in errors] == []
