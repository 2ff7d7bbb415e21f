"""The S3 backend's primitives against a real moto server over HTTP (no wire mocks)."""

from __future__ import annotations

import contextlib
import logging
import os
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import anyio.abc
import pytest
from botocore.exceptions import ClientError

import astore
from astore import (
    AlreadyExistsError,
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
    UploadError,
)
from astore._checksum import crc32c_combine, decode_crc32c, encode_crc32c, hash_bytes
from astore.backends._s3_errors import client_error
from astore.backends.s3 import S3Backend

pytestmark = [pytest.mark.anyio, pytest.mark.s3]

MiB = 1024 * 1024


def crc(data: bytes) -> str:
    return hash_bytes("crc32c", data)


async def read_all(backend: S3Backend, key: str, start: int = 0, end: int | None = None) -> bytes:
    chunks = [c async for c in backend.get_range(key, start, end, etag=None, chunk_size=64 * 1024)]
    return b"".join(chunks)


async def put(backend: S3Backend, key: str, data: bytes, **kw: Any) -> Any:
    kw.setdefault("if_not_exists", False)
    kw.setdefault("content_type", None)
    return await backend.put_object(key, data, checksums={"crc32c": crc(data)}, **kw)


@pytest.fixture
async def backend(s3_bucket: str, s3_options: dict[str, Any]) -> AsyncIterator[S3Backend]:
    b = S3Backend(s3_bucket, max_connections=8, **s3_options)
    await b.open()
    try:
        yield b
    finally:
        await b.close()


# -- construction ----------------------------------------------------------------------------


def test_constructor_does_no_io_and_hides_secrets() -> None:
    """The constructor connects nothing and no repr shows the secret."""
    b = S3Backend(
        "bkt", max_connections=4, aws_access_key_id="AKIDX", aws_secret_access_key="s3cr3t-v4lue"
    )
    assert b.url == "s3://bkt"
    assert "s3cr3t" not in repr(b)
    assert "AKIDX" not in repr(b)
    assert b._client is None


@pytest.mark.parametrize(
    "options",
    [
        {"max_connections": 0},
        {"max_connections": "8"},
        {"endpoint_url": "ftp://x"},
        {"endpoint_url": "http://user:pw@host"},
        {"addressing_style": "sideways"},
        {"connect_timeout": -1},
        {"read_timeout": float("inf")},
        {"aws_access_key_id": "only-the-id"},
        {"region": 5},
    ],
)
def test_bad_options_raise_configuration_error(options: dict[str, Any]) -> None:
    """Invalid option types and values raise ConfigurationError without echoing secrets."""
    kwargs: dict[str, Any] = {"max_connections": 4, **options}
    with pytest.raises(ConfigurationError) as info:
        S3Backend("bkt", **kwargs)
    assert "pw" not in str(info.value)


async def test_close_without_open_is_a_no_op() -> None:
    """Closing a never-opened backend does not raise."""
    await S3Backend("bkt", max_connections=1).close()


# -- objects ---------------------------------------------------------------------------------


async def test_put_then_head_reports_size_etag_and_crc32c(backend: S3Backend) -> None:
    """put_object records the CRC32C and head returns it with size, unquoted ETag and type."""
    data = b"hello world"
    put_info = await put(backend, "a/b.txt", data, content_type="text/plain")
    info = await backend.head("a/b.txt")
    assert info.size == len(data)
    assert info.etag == put_info.etag
    assert '"' not in (info.etag or "")
    assert info.checksums == {"crc32c": crc(data)}
    assert info.content_type == "text/plain"
    assert info.last_modified is not None
    assert info.last_modified.tzinfo is not None


async def test_get_range_streams_whole_and_partial(backend: S3Backend) -> None:
    """get_range returns the whole object and any sub-range byte for byte."""
    data = os.urandom(300_000)
    await put(backend, "r.bin", data)
    assert await read_all(backend, "r.bin") == data
    assert await read_all(backend, "r.bin", 1000, 2000) == data[1000:2000]
    assert await read_all(backend, "r.bin", 299_999) == data[299_999:]


async def test_get_range_chunks_are_bounded(backend: S3Backend) -> None:
    """No chunk exceeds chunk_size, so the body is never buffered whole."""
    await put(backend, "c.bin", os.urandom(200_000))
    sizes = [len(c) async for c in backend.get_range("c.bin", 0, None, etag=None, chunk_size=4096)]
    assert sum(sizes) == 200_000
    assert max(sizes) <= 4096


async def test_empty_range_sends_nothing(backend: S3Backend) -> None:
    """An empty range yields no bytes (and no invalid Range header) for an existing object."""
    await put(backend, "e.bin", b"0123456789")
    assert await read_all(backend, "e.bin", 5, 5) == b""
    assert await read_all(backend, "e.bin", 10, None) == b""


async def test_empty_object_reads_empty(backend: S3Backend) -> None:
    """A zero-byte object reads as no bytes."""
    await put(backend, "zero", b"")
    assert await read_all(backend, "zero") == b""
    assert (await backend.head("zero")).size == 0


async def test_range_past_end_raises_invalid_range(backend: S3Backend) -> None:
    """A range beyond the object's end raises InvalidRangeError."""
    await put(backend, "short", b"abc")
    with pytest.raises(InvalidRangeError):
        await read_all(backend, "short", 10, 20)
    with pytest.raises(InvalidRangeError):
        await read_all(backend, "short", 0, 10)


async def test_missing_key_raises_not_found(backend: S3Backend) -> None:
    """head and get of a missing key raise NotFoundError naming the key and store."""
    with pytest.raises(NotFoundError) as info:
        await backend.head("nope")
    assert info.value.key == "nope"
    assert info.value.store == backend.url
    assert isinstance(info.value.__cause__, Exception)
    with pytest.raises(FileNotFoundError):
        await read_all(backend, "nope")


async def test_missing_bucket_raises_not_found_naming_it(s3_options: dict[str, Any]) -> None:
    """Listing a bucket that does not exist raises NotFoundError that names the bucket."""
    b = S3Backend("no-such-bucket-here", max_connections=2, **s3_options)
    await b.open()
    try:
        with pytest.raises(NotFoundError, match="no-such-bucket-here"):
            [p async for p in b.list_pages("", delimiter=None, start_after=None, page_size=10)]
    finally:
        await b.close()


async def test_conditional_create_twice_raises_already_exists(backend: S3Backend) -> None:
    """A second put with if_not_exists raises AlreadyExistsError and keeps the first."""
    await put(backend, "once", b"first", if_not_exists=True)
    with pytest.raises(AlreadyExistsError):
        await put(backend, "once", b"second", if_not_exists=True)
    assert await read_all(backend, "once") == b"first"


async def test_pinned_read_after_overwrite_raises_precondition_failed(backend: S3Backend) -> None:
    """A read pinned to an old ETag fails once the object is overwritten."""
    old = await put(backend, "pin", b"v1")
    await put(backend, "pin", b"v2")
    with pytest.raises(PreconditionFailedError):
        [c async for c in backend.get_range("pin", 0, None, etag=old.etag, chunk_size=1024)]


async def test_pinned_read_of_current_version_succeeds(backend: S3Backend) -> None:
    """A read pinned to the current ETag returns the bytes."""
    info = await put(backend, "pin2", b"v1")
    got = [c async for c in backend.get_range("pin2", 0, None, etag=info.etag, chunk_size=1024)]
    assert b"".join(got) == b"v1"


async def test_put_accepts_memoryview_slices(backend: S3Backend) -> None:
    """A memoryview of part of a larger buffer is stored exactly."""
    buf = bytearray(os.urandom(10_000))
    view = memoryview(buf)[100:5100]
    await backend.put_object(
        "mv", view, if_not_exists=False, checksums={"crc32c": crc(bytes(view))}, content_type=None
    )
    assert await read_all(backend, "mv") == bytes(view)


async def test_large_bytearray_body_is_streamed(backend: S3Backend) -> None:
    """A multi-MiB bytearray is sent as a stream (no aiohttp large-body warning) and stored."""
    data = bytearray(os.urandom(3 * MiB))
    await backend.put_object(
        "ba", data, if_not_exists=False, checksums={"crc32c": crc(bytes(data))}, content_type=None
    )
    assert await read_all(backend, "ba") == data


async def test_payload_is_unsigned_and_carries_crc32c(backend: S3Backend) -> None:
    """Over plain HTTP the body is sent as UNSIGNED-PAYLOAD with astore's CRC32C header."""
    seen: list[dict[str, Any]] = []
    backend._c.meta.events.register(
        "before-send.s3.PutObject", lambda request, **_: seen.append(dict(request.headers))
    )
    await put(backend, "u", b"payload")
    headers = {k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in seen[-1].items()}
    assert headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
    assert headers["x-amz-checksum-crc32c"] == crc(b"payload")


# -- listing and deleting --------------------------------------------------------------------


async def test_list_pages_paginates_with_small_pages(backend: S3Backend) -> None:
    """Listing with page_size 3 yields every key once, in order, in pages of at most 3."""
    keys = [f"p/{i:02d}" for i in range(10)]
    for k in keys:
        await put(backend, k, b"x")
    pages = [
        p async for p in backend.list_pages("p/", delimiter=None, start_after=None, page_size=3)
    ]
    assert all(len(p.objects) <= 3 for p in pages)
    assert len(pages) >= 4
    assert [o.key for p in pages for o in p.objects] == keys


async def test_list_pages_delimiter_rolls_up_prefixes(backend: S3Backend) -> None:
    """A delimiter rolls nested keys into common prefixes ending with it."""
    for k in ["d/a", "d/sub1/x", "d/sub1/y", "d/sub2/z", "d/b"]:
        await put(backend, k, b"x")
    pages = [
        p async for p in backend.list_pages("d/", delimiter="/", start_after=None, page_size=2)
    ]
    assert [o.key for p in pages for o in p.objects] == ["d/a", "d/b"]
    assert [x for p in pages for x in p.prefixes] == ["d/sub1/", "d/sub2/"]


async def test_list_pages_start_after(backend: S3Backend) -> None:
    """Listing resumes strictly after start_after."""
    for k in ["s/1", "s/2", "s/3"]:
        await put(backend, k, b"x")
    pages = [
        p async for p in backend.list_pages("s/", delimiter=None, start_after="s/1", page_size=10)
    ]
    assert [o.key for p in pages for o in p.objects] == ["s/2", "s/3"]


async def test_delete_many_over_a_thousand_keys(backend: S3Backend, s3_client: Any) -> None:
    """delete_many removes 1,001 keys (two batches) and ignores missing ones."""
    keys = [f"del/{i:04d}" for i in range(1001)]
    limiter = anyio.CapacityLimiter(32)

    async def create(key: str) -> None:
        async with limiter:
            await s3_client.put_object(Bucket=backend.bucket, Key=key, Body=b"")

    async with anyio.create_task_group() as tg:
        for k in keys:
            tg.start_soon(create, k)
    failed = await backend.delete_many([*keys, "del/missing"])
    assert failed == {}
    pages = [
        p
        async for p in backend.list_pages("del/", delimiter=None, start_after=None, page_size=1000)
    ]
    assert not any(p.objects for p in pages)


# -- copy ------------------------------------------------------------------------------------


async def test_copy_keeps_content_type_and_checksum(backend: S3Backend) -> None:
    """copy keeps the bytes, the content type and the recorded CRC32C."""
    await put(backend, "src", b"copy me", content_type="text/x")
    info = await backend.copy("src", "dst", if_not_exists=False)
    head = await backend.head("dst")
    assert await read_all(backend, "dst") == b"copy me"
    assert head.content_type == "text/x"
    assert head.checksums == {"crc32c": crc(b"copy me")}
    assert info.size == 7


async def test_copy_if_not_exists_onto_existing_raises(backend: S3Backend) -> None:
    """copy with if_not_exists onto an existing key raises AlreadyExistsError."""
    await put(backend, "c1", b"a")
    await put(backend, "c2", b"b")
    with pytest.raises(AlreadyExistsError):
        await backend.copy("c1", "c2", if_not_exists=True)


async def test_copy_of_missing_source_raises_not_found(backend: S3Backend) -> None:
    """Copying a missing key raises NotFoundError."""
    with pytest.raises(NotFoundError):
        await backend.copy("ghost", "x", if_not_exists=False)


async def test_multipart_copy_above_threshold(backend: S3Backend) -> None:
    """Objects above the copy threshold are copied part by part with the full CRC32C."""
    data = os.urandom(11 * MiB)
    await put(backend, "big-src", data)
    backend.multipart_copy_threshold = 6 * MiB
    backend.copy_part_size = 5 * MiB
    info = await backend.copy("big-src", "big-dst", if_not_exists=False)
    assert info.size == len(data)
    assert await read_all(backend, "big-dst") == data
    assert (await backend.head("big-dst")).checksums == {"crc32c": crc(data)}
    assert [u async for u in backend.list_uploads("")] == []


# -- multipart -------------------------------------------------------------------------------


async def _multipart(backend: S3Backend, key: str, parts: list[bytes], **kw: Any) -> Any:
    upload_id = await backend.create_upload(key, content_type=None, checksum_algorithm="crc32c")
    infos, offset, whole = [], 0, 0
    for n, part in enumerate(parts, 1):
        infos.append(
            await backend.upload_part(
                key, upload_id, n, part, offset=offset, checksums={"crc32c": crc(part)}
            )
        )
        offset += len(part)
        whole = crc32c_combine(whole, decode_crc32c(crc(part)), len(part))
    kw.setdefault("if_not_exists", False)
    return await backend.complete_upload(
        key,
        upload_id,
        kw.pop("order", lambda x: x)(infos),
        checksums={"crc32c": encode_crc32c(whole)},
        **kw,
    )


async def test_multipart_upload_records_full_object_crc32c(backend: S3Backend) -> None:
    """A CRC32C multipart upload reads back byte-identical with a FULL_OBJECT CRC32C."""
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1234)]
    info = await _multipart(backend, "mp", parts)
    data = b"".join(parts)
    head = await backend.head("mp")
    assert head.size == info.size == len(data)
    assert head.checksums == {"crc32c": crc(data)} == dict(info.checksums)
    assert await read_all(backend, "mp") == data


async def test_multipart_wrong_part_order_raises_upload_error(backend: S3Backend) -> None:
    """Completing with parts out of order raises UploadError."""
    with pytest.raises(UploadError):
        await _multipart(backend, "bad", [os.urandom(5 * MiB), b"tail"], order=lambda x: x[::-1])


async def test_multipart_too_small_part_raises_upload_error(backend: S3Backend) -> None:
    """A non-final part under 5 MiB makes completion raise UploadError."""
    with pytest.raises(UploadError):
        await _multipart(backend, "small", [b"tiny", b"tail"])


async def test_complete_if_not_exists_on_existing_raises(backend: S3Backend) -> None:
    """A conditional multipart completion onto an existing key raises AlreadyExistsError."""
    await put(backend, "taken", b"x")
    with pytest.raises(AlreadyExistsError):
        await _multipart(backend, "taken", [b"only part"], if_not_exists=True)


async def test_list_uploads_and_abort(backend: S3Backend) -> None:
    """Started uploads are listed under their prefix until aborted; aborting twice is fine."""
    ids = [
        await backend.create_upload(f"up/{i}", content_type=None, checksum_algorithm=None)
        for i in range(3)
    ]
    await backend.create_upload("other/x", content_type=None, checksum_algorithm=None)
    listed = [u async for u in backend.list_uploads("up/")]
    assert sorted(u.upload_id for u in listed) == sorted(ids)
    for i, upload_id in enumerate(ids):
        await backend.abort_upload(f"up/{i}", upload_id)
    await backend.abort_upload("up/0", ids[0])
    assert [u async for u in backend.list_uploads("up/")] == []


# -- signed URLs and errors ------------------------------------------------------------------


async def test_signed_get_url_works_and_is_not_logged(
    backend: S3Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A presigned GET URL downloads the object with plain aiohttp; its signature is not logged."""
    await put(backend, "signed", b"secret bytes")
    with caplog.at_level(logging.DEBUG):
        url = await backend.signed_url("signed", method="GET", expires=60)
    signature = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["X-Amz-Signature"][0]
    assert signature not in caplog.text
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        assert await resp.read() == b"secret bytes"


async def test_signed_put_url_uploads(backend: S3Backend) -> None:
    """A presigned PUT URL stores a body sent with plain aiohttp."""
    url = await backend.signed_url("via-url", method="PUT", expires=60)
    async with aiohttp.ClientSession() as http, http.put(url, data=b"uploaded") as resp:
        assert resp.status == 200
    assert await read_all(backend, "via-url") == b"uploaded"


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("NoSuchKey", 404, NotFoundError),
        ("NoSuchUpload", 404, NotFoundError),
        ("AccessDenied", 403, PermissionDeniedError),
        ("SignatureDoesNotMatch", 403, PermissionDeniedError),
        ("InvalidRange", 416, InvalidRangeError),
        ("BadDigest", 400, IntegrityError),
        ("InvalidPart", 400, UploadError),
        ("EntityTooSmall", 400, UploadError),
        ("InternalError", 500, ServerError),
        ("", 502, ServerError),
        ("RequestTimeout", 400, RequestTimeoutError),
    ],
)
def test_service_error_codes_map_to_the_astore_tree(
    code: str, status: int, expected: type[Exception]
) -> None:
    """Each S3 error code maps to its astore error, carrying key, store and operation."""
    exc = ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "Op",
    )
    err = client_error(exc, key="k", store="s3://b", operation="get", bucket="b")
    assert type(err) is expected
    assert (err.key, err.store, err.operation) == ("k", "s3://b", "get")


def test_slow_down_is_throttled_with_retry_after() -> None:
    """SlowDown/503 maps to ThrottledError carrying the Retry-After seconds."""
    exc = ClientError(
        {
            "Error": {"Code": "SlowDown", "Message": "slow"},
            "ResponseMetadata": {"HTTPStatusCode": 503, "HTTPHeaders": {"retry-after": "3"}},
        },
        "PutObject",
    )
    err = client_error(exc, key="k", store="s3://b", operation="put", bucket="b")
    assert isinstance(err, ThrottledError)
    assert err.retry_after == 3.0


def test_precondition_failure_depends_on_the_call() -> None:
    """A 412 is AlreadyExistsError for a conditional create, else PreconditionFailedError."""
    exc = ClientError(
        {"Error": {"Code": "PreconditionFailed"}, "ResponseMetadata": {"HTTPStatusCode": 412}},
        "PutObject",
    )
    create = client_error(
        exc, key="k", store="s", operation="put", bucket="b", conditional_create=True
    )
    read = client_error(exc, key="k", store="s", operation="get", bucket="b")
    assert isinstance(create, AlreadyExistsError)
    assert isinstance(read, PreconditionFailedError)


async def test_unreachable_endpoint_raises_network_error(s3_bucket: str) -> None:
    """A refused connection is a NetworkError (retryable), chained to botocore's error."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    b = S3Backend(
        s3_bucket,
        max_connections=1,
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region="us-east-1",
    )
    await b.open()
    try:
        with pytest.raises(NetworkError) as info:
            await b.head("k")
        assert info.value.__cause__ is not None
    finally:
        await b.close()


async def _cutting_proxy(client: anyio.abc.SocketStream, upstream_port: int, limit: int) -> None:
    """Forward one connection to moto, but hang up after ``limit`` bytes of response."""
    closed = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)
    async with client, await anyio.connect_tcp("127.0.0.1", upstream_port) as upstream:

        async def forward_requests() -> None:
            with contextlib.suppress(*closed):
                async for chunk in client:
                    await upstream.send(chunk)

        async with anyio.create_task_group() as tg:
            tg.start_soon(forward_requests)
            sent = 0
            with contextlib.suppress(*closed):
                async for chunk in upstream:
                    await client.send(chunk[: limit - sent])
                    sent += len(chunk)
                    if sent >= limit:
                        break
            tg.cancel_scope.cancel()


async def test_connection_reset_mid_body_raises_network_error(
    backend: S3Backend, s3_options: dict[str, Any], s3_endpoint: str
) -> None:
    """A connection cut while the body streams raises NetworkError from the iteration."""
    await put(backend, "cut.bin", os.urandom(MiB))
    upstream_port = urllib.parse.urlsplit(s3_endpoint).port or 80
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    options = {**s3_options, "endpoint_url": f"http://127.0.0.1:{port}"}
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, lambda c: _cutting_proxy(c, upstream_port, 64 * 1024))
        proxied = S3Backend(backend.bucket, max_connections=1, **options)
        await proxied.open()
        try:
            sizes: list[int] = []

            async def consume() -> None:
                async for chunk in proxied.get_range(
                    "cut.bin", 0, None, etag=None, chunk_size=8192
                ):
                    sizes.append(len(chunk))

            with pytest.raises(NetworkError) as info:
                await consume()
            received = sum(sizes)
            assert 0 < received < MiB
            assert info.value.operation == "get"
        finally:
            await proxied.close()
            tg.cancel_scope.cancel()


# -- store level: interoperability with plain aiobotocore --------------------------------------

STORE_TRANSFER = astore.TransferConfig(
    part_size=5 * MiB, multipart_threshold=6 * MiB, max_concurrency=4
)


@pytest.fixture
async def store(s3_store_args: tuple[str, dict[str, Any]]) -> AsyncIterator[astore.AsyncStore]:
    url, options = s3_store_args
    async with astore.open(url, transfer=STORE_TRANSFER, **options) as s:
        yield s


async def plain_get(client: Any, bucket: str, key: str) -> tuple[bytes, dict[str, Any]]:
    head = await client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    response = await client.get_object(Bucket=bucket, Key=key)
    async with response["Body"] as body:
        return await body.read(), head


async def test_store_put_is_readable_by_plain_client(
    store: astore.AsyncStore, s3_client: Any, s3_bucket: str
) -> None:
    """A single-request put is byte-identical to plain aiobotocore, with native CRC32C."""
    data = os.urandom(100_000)
    await store.put("interop/small.bin", data)
    got, head = await plain_get(s3_client, s3_bucket, "some-prefix/interop/small.bin")
    assert got == data
    assert head["ChecksumCRC32C"] == crc(data)


async def test_store_multipart_is_readable_by_plain_client(
    store: astore.AsyncStore, s3_client: Any, s3_bucket: str
) -> None:
    """A multipart put is byte-identical to plain aiobotocore with a FULL_OBJECT CRC32C."""
    data = os.urandom(13 * MiB)
    await store.put("interop/big.bin", data)
    got, head = await plain_get(s3_client, s3_bucket, "some-prefix/interop/big.bin")
    assert got == data
    assert head["ETag"].endswith('-3"')
    assert head["ChecksumType"] == "FULL_OBJECT"
    assert head["ChecksumCRC32C"] == crc(data)


async def test_plain_client_object_is_read_and_verified(
    store: astore.AsyncStore, s3_client: Any, s3_bucket: str
) -> None:
    """An object written by plain aiobotocore with a CRC32C is read and verified by astore."""
    data = os.urandom(50_000)
    await s3_client.put_object(
        Bucket=s3_bucket,
        Key="some-prefix/theirs.bin",
        Body=data,
        ChecksumAlgorithm="CRC32C",
        ChecksumCRC32C=crc(data),
    )
    assert (await store.stat("theirs.bin")).checksums == {"crc32c": crc(data)}
    assert await store.get("theirs.bin") == data


async def test_wrong_recorded_checksum_raises_integrity_error(
    store: astore.AsyncStore, s3_client: Any, s3_bucket: str
) -> None:
    """Bytes that do not match the recorded CRC32C fail the read with IntegrityError."""
    await s3_client.put_object(
        Bucket=s3_bucket,
        Key="some-prefix/bad.bin",
        Body=b"actual bytes",
        Metadata={"astore-crc32c": crc(b"other bytes")},
    )
    with pytest.raises(astore.IntegrityError):
        await store.get("bad.bin")


async def test_composite_checksum_is_not_reported(
    store: astore.AsyncStore, s3_client: Any, s3_bucket: str
) -> None:
    """A plain client's composite multipart CRC32C is not taken for a whole-object checksum."""
    key, part = "some-prefix/composite.bin", os.urandom(5 * MiB)
    upload = await s3_client.create_multipart_upload(
        Bucket=s3_bucket, Key=key, ChecksumAlgorithm="CRC32C"
    )
    etags = []
    for number in (1, 2):
        response = await s3_client.upload_part(
            Bucket=s3_bucket,
            Key=key,
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=part,
            ChecksumCRC32C=crc(part),
        )
        etags.append({"PartNumber": number, "ETag": response["ETag"], "ChecksumCRC32C": crc(part)})
    await s3_client.complete_multipart_upload(
        Bucket=s3_bucket, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": etags}
    )
    assert "crc32c" not in (await store.stat("composite.bin")).checksums
    assert await store.get("composite.bin") == part + part
