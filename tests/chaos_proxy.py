"""A fault-injecting HTTP reverse proxy for tests against real S3/GCS server processes.

:class:`ChaosProxy` listens on a free loopback port, forwards every request to an upstream
server (moto, fake-gcs-server, gcp-storage-emulator) and, at a seeded rate, injects faults on
the wire instead of (or in the middle of) the exchange:

- ``error``: a 500 or 503 answer, the request never reaching the server;
- ``throttle``: 503 SlowDown (S3) or 429 (GCS) with a ``Retry-After`` header;
- ``latency``: a delay before forwarding (the request then succeeds);
- ``reset_request``: part of the request body is read, then the connection is reset;
- ``reset_response``: the server's answer is forwarded, its body cut half way by a reset;
- ``truncate``: the same, but the connection is closed cleanly (a short body);
- ``corrupt``: one bit flipped in an object's download body (not transient: opt in);
- ``corrupt_upload``: one bit flipped in an upload body on its way to the server (opt in).

``hang=True`` turns the proxy into a server that accepts requests and never answers.

Bodies stream through in chunks (nothing is buffered whole). Resumable-upload ``Location``
headers that name the upstream are rewritten to name the proxy. The proxy runs on its own
event loop in a background thread, so it works under any test (sync or async)::

    with ChaosProxy(upstream, rate=0.15, seed=1) as proxy:
        ...  # point the client at proxy.url
    print(proxy.injected)
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

__all__ = ["TRANSIENT_FAULTS", "ChaosProxy"]

TRANSIENT_FAULTS = (
    "error",
    "throttle",
    "latency",
    "reset_request",
    "reset_response",
    "truncate",
)
ALL_FAULTS = (*TRANSIENT_FAULTS, "corrupt", "corrupt_upload")
CHUNK = 64 * 1024

# Hop-by-hop headers (RFC 9110 7.6.1) and those the proxy recomputes itself.
_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Expect",
        "Content-Length",
        "Date",
        "Server",
    )
)


def is_object_read(method: str, url: URL) -> bool:
    """Whether a request downloads object bytes (S3 GetObject, GCS ``alt=media``)."""
    if method != "GET":
        return False
    if url.query.get("alt") == "media":
        return True
    if url.path.startswith(("/storage/", "/upload/", "/moto-api")):
        return False
    query = {k for k in url.query if k != "x-id"}
    segments = [s for s in url.path.split("/") if s]
    return not query and len(segments) >= 2 and url.query.get("x-id", "GetObject") == "GetObject"


def is_object_write(method: str, url: URL) -> bool:
    """Whether a request carries object bytes (S3 PutObject/UploadPart, GCS uploads)."""
    if method not in ("PUT", "POST"):
        return False
    if url.path.startswith("/upload/"):
        # Starting a resumable session sends metadata only; its chunks are PUTs.
        return not (method == "POST" and url.query.get("uploadType") == "resumable")
    if url.path.startswith(("/storage/", "/moto-api")):
        return False
    query = set(url.query)
    # S3: PutObject has no query (or x-id); UploadPart has partNumber & uploadId.
    return method == "PUT" and (query <= {"x-id"} or {"partNumber", "uploadId"} <= query)


class ChaosProxy:
    """A reverse proxy to ``upstream`` that injects faults at ``rate`` (see the module doc).

    Args:
        upstream: the server's root URL, e.g. ``http://127.0.0.1:5000``.
        rate: probability that a request gets a fault (0 to 1).
        seed: seed of the random choices.
        faults: kinds to draw from (default: :data:`TRANSIENT_FAULTS`).
        flavor: ``"s3"`` or ``"gcs"``: the shape of injected error bodies and throttling.
        retry_after: seconds sent in ``Retry-After`` when throttling.
        latency: the most seconds of injected latency.
        hang: accept requests and never answer (for deadline tests).
        should_fault: optional filter ``(method, url) -> bool``; requests it refuses are
            forwarded untouched.
        gcs_status_shim: answer resumable-upload status queries (``Content-Range: bytes */*``)
            from what the proxy saw the upstream confirm, instead of forwarding them:
            fake-gcs-server finalises a session's partial object when asked its status, so
            without this no upload fault can be recovered on it.

    Attributes:
        injected: a Counter of the faults injected so far, by kind.
        events: ``(method, path?query, fault)`` of every injected fault, in order.
        requests: how many requests arrived.
        url: the proxy's root URL (valid once started).
    """

    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.0,
        seed: int | None = None,
        faults: Sequence[str] | None = None,
        flavor: str = "s3",
        retry_after: float = 0.05,
        latency: float = 0.05,
        hang: bool = False,
        should_fault: Callable[[str, URL], bool] | None = None,
        gcs_status_shim: bool = False,
    ) -> None:
        unknown = set(faults or ()) - set(ALL_FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}")
        if flavor not in ("s3", "gcs"):
            raise ValueError(f"flavor must be 's3' or 'gcs', not {flavor!r}")
        self.upstream = URL(upstream.rstrip("/"))
        self.rate = rate
        self.faults = tuple(faults) if faults is not None else TRANSIENT_FAULTS
        self.flavor = flavor
        self.retry_after = retry_after
        self.latency = latency
        self.hang = hang
        self.should_fault = should_fault
        self.gcs_status_shim = gcs_status_shim
        # upload_id -> bytes the upstream confirmed, or the final object resource (JSON).
        self._sessions: dict[str, int | bytes] = {}
        self.injected: Counter[str] = Counter()
        self.events: list[tuple[str, str, str]] = []
        self.requests = 0
        self._rng = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._hung: asyncio.Event | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle (called from the test's thread) ---------------------------------------

    def start(self) -> ChaosProxy:
        """Start the proxy's loop thread and listen on a free loopback port."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="chaos-proxy", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), loop).result(timeout=30)
        return self

    def stop(self) -> None:
        """Stop serving, close every connection, and end the loop thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), loop).result(timeout=30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()
            self._loop = self._thread = None

    def __enter__(self) -> ChaosProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_rate(self, rate: float, faults: Sequence[str] | None = None) -> None:
        """Change the fault rate (and kinds) while running, e.g. 0 for a clean setup phase."""
        self.rate = rate
        if faults is not None:
            self.faults = tuple(faults)

    @property
    def total_injected(self) -> int:
        return sum(self.injected.values())

    # -- the server (on the proxy's loop) ------------------------------------------------

    async def _start(self) -> None:
        self._hung = asyncio.Event()
        connector = aiohttp.TCPConnector(limit=64, force_close=False)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60),
        )
        app = web.Application(client_max_size=0)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=0.5
        )
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock)
        await site.start()

    async def _stop(self) -> None:
        assert self._hung is not None
        self._hung.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _draw(self, method: str, url: URL, has_body: bool) -> str | None:
        if self.rate <= 0 or (self.should_fault and not self.should_fault(method, url)):
            return None
        if self._rng.random() >= self.rate:
            return None
        kinds = list(self.faults)
        if "corrupt" in kinds and not is_object_read(method, url):
            kinds.remove("corrupt")
        if "corrupt_upload" in kinds and not (has_body and is_object_write(method, url)):
            kinds.remove("corrupt_upload")
        if "reset_request" in kinds and not has_body:
            kinds.remove("reset_request")
        if method == "HEAD":
            kinds = [k for k in kinds if k not in ("reset_response", "truncate")]
        return self._rng.choice(kinds) if kinds else None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self.hang:
            assert self._hung is not None
            await self._hung.wait()  # never answers; ends when the proxy stops
            _reset(request)
            return web.Response()
        length = request.content_length or 0
        has_body = length > 0 or (request.content_length is None and request.body_exists)
        fault = self._draw(request.method, request.rel_url, has_body)
        if fault is not None:
            self.injected[fault] += 1
            self.events.append((request.method, request.rel_url.raw_path_qs, fault))
        if fault == "latency":
            await asyncio.sleep(self._rng.uniform(0, self.latency))
        elif fault in ("error", "throttle"):
            return await self._refuse(request, fault)
        elif fault == "reset_request":
            await request.content.read(max(1, length // 2) if length else CHUNK)
            _reset(request)
            # Returned onto a dead connection: aiohttp drops it quietly (no error log).
            return web.Response()
        session = _gcs_session(request)
        if (
            self.gcs_status_shim
            and session is not None
            and request.headers.get("Content-Range", "").strip() == "bytes */*"
        ):
            return self._status(session)
        return await self._forward(request, fault)

    def _status(self, session: str) -> web.Response:
        state = self._sessions.get(session, 0)
        if isinstance(state, bytes):
            return web.Response(status=200, body=state, content_type="application/json")
        headers = {"Range": f"bytes=0-{state - 1}"} if state else {}
        return web.Response(status=308, headers=headers)

    async def _refuse(self, request: web.Request, fault: str) -> web.Response:
        """An error answer that never reached the server (the body is drained first)."""
        while await request.content.read(CHUNK):
            pass
        headers: dict[str, str] = {}
        if fault == "throttle":
            status = 503 if self.flavor == "s3" else 429
            code, message = "SlowDown", "Please reduce your request rate."
            headers["Retry-After"] = f"{self.retry_after:g}"
        else:
            status = self._rng.choice((500, 503))
            code = "InternalError" if status == 500 else "ServiceUnavailable"
            message = "chaos proxy: injected server error"
        if self.flavor == "s3":
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>{message}</Message>"
                "<RequestId>chaos</RequestId></Error>"
            )
            ctype = "application/xml"
        else:
            body = f'{{"error": {{"code": {status}, "message": "{message}"}}}}'
            ctype = "application/json"
        if request.method == "HEAD":
            return web.Response(status=status, headers=headers)
        return web.Response(status=status, text=body, content_type=ctype, headers=headers)

    async def _forward(self, request: web.Request, fault: str | None) -> web.StreamResponse:
        assert self._session is not None
        target = URL(f"{self.upstream}{request.rel_url.raw_path_qs}", encoded=True)
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in _HOP or k == "Host"
        )
        headers.pop("Host", None)
        data: Any = None
        length = request.content_length
        if request.body_exists:
            data = self._request_body(request, corrupt=fault == "corrupt_upload")
            if length is not None:
                headers["Content-Length"] = str(length)
        async with self._session.request(
            request.method,
            target,
            headers=headers,
            data=data,
            allow_redirects=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
        ) as upstream:
            return await self._relay(request, upstream, fault)

    async def _request_body(self, request: web.Request, *, corrupt: bool) -> Any:
        length = request.content_length
        flip_at = self._rng.randrange(length) if corrupt and length else -1
        pos = 0
        while chunk := await request.content.read(CHUNK):
            if corrupt and length is None and pos == 0:
                flip_at = self._rng.randrange(len(chunk))  # chunked: flip in the first chunk
            if pos <= flip_at < pos + len(chunk):
                chunk = _flip(chunk, flip_at - pos, self._rng)
            pos += len(chunk)
            yield chunk

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse, fault: str | None
    ) -> web.StreamResponse:
        headers = CIMultiDict((k, v) for k, v in upstream.headers.items() if k.lower() not in _HOP)
        if "Location" in headers:
            headers["Location"] = self._rewrite(headers["Location"])
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        response.headers.update(CIMultiDictProxy(headers))
        length = upstream.content_length
        if request.method == "HEAD" or upstream.status in (204, 304):
            if length is not None and request.method == "HEAD":
                response.headers["Content-Length"] = str(length)
            await response.prepare(request)
            await response.write_eof()
            return response
        if length is not None:
            response.content_length = length
        else:
            response.enable_chunked_encoding()
        session = _gcs_session(request) if self.gcs_status_shim else None
        if session is not None and upstream.status == 308:
            self._sessions[session] = _persisted(upstream.headers.get("Range"))
        captured: bytearray | None = None
        if session is not None and upstream.status in (200, 201):
            captured = bytearray()
        cut = None
        if fault in ("reset_response", "truncate"):
            cut = (length or 0) // 2
        flip_at = -1
        if fault == "corrupt" and length:
            flip_at = self._rng.randrange(length)
        await response.prepare(request)
        pos = 0
        async for chunk in upstream.content.iter_chunked(CHUNK):
            if cut is not None and pos + len(chunk) >= cut:
                await response.write(chunk[: cut - pos])
                if fault == "reset_response":
                    _reset(request)
                else:
                    assert request.transport is not None
                    request.transport.close()
                return response
            if pos <= flip_at < pos + len(chunk):
                chunk = _flip(chunk, flip_at - pos, self._rng)
            pos += len(chunk)
            if captured is not None:
                captured += chunk
            await response.write(chunk)
        if captured is not None and session is not None:
            self._sessions[session] = bytes(captured)
        if cut is not None:  # an empty body: nothing to cut, so drop the connection
            _reset(request)
            return response
        await response.write_eof()
        return response

    def _rewrite(self, location: str) -> str:
        try:
            loc = URL(location)
        except ValueError:
            return location
        local = loc.host in (self.upstream.host, "localhost", "127.0.0.1")
        if loc.is_absolute() and local and loc.port == self.upstream.port:
            return str(loc.with_host("127.0.0.1").with_port(self.port))
        return location


def _gcs_session(request: web.Request) -> str | None:
    """The resumable session a request writes to (GCS ``upload_id``), if any."""
    if request.method != "PUT" or not request.path.startswith("/upload/"):
        return None
    return request.rel_url.query.get("upload_id")


def _persisted(value: str | None) -> int:
    if not value or not value.startswith("bytes=0-"):
        return 0
    return int(value.removeprefix("bytes=0-")) + 1


def _flip(chunk: bytes, index: int, rng: random.Random) -> bytes:
    data = bytearray(chunk)
    data[index] ^= 1 << rng.randrange(8)
    return bytes(data)


def _reset(request: web.Request) -> None:
    """Abort the client's connection with a TCP RST (SO_LINGER 0), not a clean close."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
