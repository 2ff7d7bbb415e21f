"""The command line and measuring loop every client runner shares.

A runner is a module with a client class; :func:`main_async` (asyncio clients) or
:func:`main_sync` (thread-based clients) parses the common options, opens the client once,
runs the workload ``--reps`` times under :mod:`_measure`, checks the result of every run
(sizes of what was written and read: a benchmark never reports a number for a transfer that
did not happen), and prints ONE JSON line on stdout::

    {"client": ..., "version": ..., "workload": ..., "variant": ..., "results": [
        {"op": "upload", "bytes": ..., "requests": ..., "samples": [{wall_s, cpu_s, ...}]}]}

This module runs under the project's venv and the peers' venv: standard library only, and it
never imports astore.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from _measure import Sample, measure, measure_async

__all__ = [
    "UNSIGNED_BODY",
    "AsyncClient",
    "SyncClient",
    "bounded",
    "main_async",
    "main_sync",
    "parse_args",
    "stream_source",
]

MiB = 1024 * 1024
WORKLOADS = ("upload", "download", "small", "stream")

# botocore-based clients: no SHA-256 of request bodies. Over HTTPS with a checksum header
# botocore skips it by default; over the benchmark's plain-HTTP loopback it would hash every
# byte, a cost no production deployment pays (astore turns it off the same way).
UNSIGNED_BODY = {"payload_signing_enabled": False}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options every runner takes."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", required=True, help="S3 endpoint URL (http://127.0.0.1:PORT)")
    p.add_argument("--bucket", required=True)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--key-id", default="testing")
    p.add_argument("--secret", default="testing")
    p.add_argument("--workload", required=True, choices=WORKLOADS)
    p.add_argument("--variant", default="default", help="a client-specific setting to run")
    p.add_argument("--key", default="bench/big", help="object key of the large workloads")
    p.add_argument("--file", help="source file (upload) ")
    p.add_argument("--dest", help="destination file (download)")
    p.add_argument("--size", type=int, default=0, help="bytes of the stream workload")
    p.add_argument("--part-size", type=int, default=8 * MiB)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--objects", type=int, default=2000)
    p.add_argument("--object-size", type=int, default=4096)
    p.add_argument("--small-concurrency", type=int, default=32)
    p.add_argument("--prefix", default="small", help="key prefix of the small objects")
    p.add_argument("--reps", type=int, default=3)
    return p.parse_args(argv)


class AsyncClient(Protocol):
    """What an asyncio runner implements (opened with ``async with``)."""

    name: str
    version: str

    async def __aenter__(self) -> AsyncClient: ...
    async def __aexit__(self, *exc: object) -> None: ...
    async def upload(self, path: str, key: str) -> None: ...
    async def download(self, key: str, dest: str) -> None: ...
    async def upload_stream(self, source: AsyncIterator[bytes], key: str, size: int) -> None: ...
    async def put(self, key: str, data: bytes) -> None: ...
    async def get(self, key: str) -> bytes: ...
    async def size_of(self, key: str) -> int: ...


class SyncClient(Protocol):
    """What a thread-based runner implements (opened with ``with``)."""

    name: str
    version: str

    def __enter__(self) -> SyncClient: ...
    def __exit__(self, *exc: object) -> None: ...
    def upload(self, path: str, key: str) -> None: ...
    def download(self, key: str, dest: str) -> None: ...
    def put(self, key: str, data: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def size_of(self, key: str) -> int: ...


async def bounded(n: int, items: Iterable[Any], fn: Callable[[Any], Awaitable[None]]) -> None:
    """Run ``fn`` over ``items`` with ``n`` workers (never one task per item)."""
    it = iter(items)

    async def worker() -> None:
        for item in it:
            await fn(item)

    await asyncio.gather(*(worker() for _ in range(n)))


async def stream_source(size: int, chunk: int = 1 * MiB) -> AsyncIterator[bytes]:
    """An async iterator of ``size`` bytes in ``chunk``-sized pieces, from one reused buffer.

    The generator itself holds one chunk, so the client's own buffering is what the peak RSS
    of the stream workload shows.
    """
    block = os.urandom(chunk)
    sent = 0
    while sent < size:
        n = min(chunk, size - sent)
        yield block if n == chunk else block[:n]
        sent += n


def _result(op: str, nbytes: int, requests: int, samples: list[Sample]) -> dict[str, Any]:
    return {
        "op": op,
        "bytes": nbytes,
        "requests": requests,
        "samples": [s.as_dict() for s in samples],
    }


def _emit(client: Any, args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    line = {
        "client": client.name,
        "version": client.version,
        "workload": args.workload,
        "variant": args.variant,
        "python": sys.version.split()[0],
        "results": results,
    }
    print(json.dumps(line), flush=True)


def _check(what: str, got: int, want: int) -> None:
    if got != want:
        raise SystemExit(f"{what}: {got} bytes, expected {want}: the run is not valid")


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _small_keys(args: argparse.Namespace, client: str) -> list[str]:
    return [f"{args.prefix}/{client}/{i:06d}" for i in range(args.objects)]


async def _run_async(client: AsyncClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    reps = range(args.reps)
    if args.workload == "upload":
        size = os.path.getsize(args.file)
        samples = []
        for _ in reps:
            async with measure_async() as s:
                await client.upload(args.file, args.key)
            _check("uploaded object", await client.size_of(args.key), size)
            samples.append(s)
        return [_result("upload", size, 0, samples)]
    if args.workload == "download":
        size = await client.size_of(args.key)
        samples = []
        for _ in reps:
            _remove(args.dest)
            async with measure_async() as s:
                await client.download(args.key, args.dest)
            _check("downloaded file", os.path.getsize(args.dest), size)
            samples.append(s)
        _remove(args.dest)
        return [_result("download", size, 0, samples)]
    if args.workload == "stream":
        samples = []
        for _ in reps:
            source = stream_source(args.size)
            async with measure_async() as s:
                await client.upload_stream(source, args.key, args.size)
            _check("uploaded stream", await client.size_of(args.key), args.size)
            samples.append(s)
        return [_result("stream", args.size, 0, samples)]
    # small objects: PUT them all, then GET them all; each phase measured on its own
    keys = _small_keys(args, client.name)
    payload = os.urandom(args.object_size)
    puts, gets = [], []

    async def put(key: str) -> None:
        await client.put(key, payload)

    async def get(key: str) -> None:
        _check(f"object {key}", len(await client.get(key)), args.object_size)

    for _ in reps:
        async with measure_async() as s:
            await bounded(args.small_concurrency, keys, put)
        puts.append(s)
        async with measure_async() as s:
            await bounded(args.small_concurrency, keys, get)
        gets.append(s)
    total = args.objects * args.object_size
    return [
        _result("small-put", total, args.objects, puts),
        _result("small-get", total, args.objects, gets),
    ]


def main_async(factory: Callable[[argparse.Namespace], AsyncClient]) -> None:
    """Entry point of an asyncio runner."""
    args = parse_args()

    async def go() -> None:
        async with factory(args) as client:
            results = await _run_async(client, args)
        _emit(client, args, results)

    asyncio.run(go())


def main_sync(factory: Callable[[argparse.Namespace], SyncClient]) -> None:
    """Entry point of a thread-based runner (small objects on a pool of worker threads)."""
    args = parse_args()
    reps = range(args.reps)
    results: list[dict[str, Any]] = []
    with factory(args) as client:
        if args.workload == "upload":
            size = os.path.getsize(args.file)
            samples = []
            for _ in reps:
                with measure() as s:
                    client.upload(args.file, args.key)
                _check("uploaded object", client.size_of(args.key), size)
                samples.append(s)
            results.append(_result("upload", size, 0, samples))
        elif args.workload == "download":
            size = client.size_of(args.key)
            samples = []
            for _ in reps:
                _remove(args.dest)
                with measure() as s:
                    client.download(args.key, args.dest)
                _check("downloaded file", os.path.getsize(args.dest), size)
                samples.append(s)
            _remove(args.dest)
            results.append(_result("download", size, 0, samples))
        elif args.workload == "small":
            keys = _small_keys(args, client.name)
            payload = os.urandom(args.object_size)
            puts, gets = [], []
            with ThreadPoolExecutor(args.small_concurrency) as pool:
                for _ in reps:
                    with measure() as s:
                        list(pool.map(lambda k: client.put(k, payload), keys))
                    puts.append(s)
                    with measure() as s:
                        sizes = list(pool.map(lambda k: len(client.get(k)), keys))
                    gets.append(s)
                    for key, got in zip(keys, sizes, strict=True):
                        _check(f"object {key}", got, args.object_size)
            total = args.objects * args.object_size
            results.append(_result("small-put", total, args.objects, puts))
            results.append(_result("small-get", total, args.objects, gets))
        else:
            raise SystemExit(f"{client.name} has no {args.workload} workload")
    _emit(client, args, results)
