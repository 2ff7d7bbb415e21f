"""The ``astore`` command line: ``cp``, ``ls``, ``cat``, ``rm`` and ``stat`` over any store.

A *location* is a local path or a store URL. A store URL (``s3://bucket/a/b/key``,
``gs://...``, ``memory://...``, ``file:///...``) names a key in a store opened at its root
(``s3://bucket``, key ``a/b/key``). A plain local path names a file: the store is its folder
and the key its name (with ``-r``, the folder itself is the store).

``cp`` reads a plain local path as a file and writes to a store with ``upload``; it reads a
store URL (``file://`` included, verified against the recorded checksum) and writes to a
plain local path with ``download``; store to store, bytes stream through without a copy.

Exit codes: 0 success, 1 a storage or file error (one line on stderr), 2 a usage error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import anyio.to_thread
import click

from ._cli_support import META_DIR, Location, Meter, Settings, common_options, error_line
from ._exceptions import ConfigurationError, NotFoundError
from ._progress import ProgressCallback
from ._store import AsyncStore
from ._types import ObjectInfo

__all__ = ["cli", "main"]

DELETE_BATCH = 1000


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
@click.version_option(package_name="astore", prog_name="astore")
@click.pass_context
def cli(ctx: click.Context, /, **common: Any) -> None:
    """Copy, list, read and delete objects in S3, GCS, local and memory stores.

    Locations are local paths or store URLs: s3://bucket/key, gs://bucket/key,
    file:///path, memory://name/key.
    """
    ctx.obj = Settings().merged(**common)


def main(argv: list[str] | None = None) -> None:
    """Run the ``astore`` command line; exits 0, 1 (storage or file error) or 2 (usage)."""
    try:
        rv = cli.main(args=argv, prog_name="astore", standalone_mode=False)
    except click.ClickException as usage:
        usage.show()
        sys.exit(usage.exit_code)
    except (click.Abort, KeyboardInterrupt):
        click.echo("astore: interrupted", err=True)
        sys.exit(130)
    except BaseException as raised:
        sys.exit(_report(raised))
    sys.exit(rv if isinstance(rv, int) else 0)


def _report(raised: BaseException) -> int:
    """Print one line for an error; the exit code."""
    exc = raised
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]  # task groups wrap the first failure that cancelled the rest
    if isinstance(exc, SystemExit):
        raise exc
    if isinstance(exc, KeyboardInterrupt):
        click.echo("astore: interrupted", err=True)
        return 130
    if isinstance(exc, BrokenPipeError):
        # The reader went away (``astore cat x | head``): no message, and stdout pointed at
        # /dev/null so that Python's flush at exit does not complain again.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    if not isinstance(exc, Exception):
        raise exc
    click.echo(error_line(exc), err=True)
    return 1


def _settings(common: dict[str, Any]) -> Settings:
    base = click.get_current_context().find_object(Settings) or Settings()
    return base.merged(**common)


# -- cp ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Item:
    source: str  # a local path or a key in the source store
    target: str  # a local path or a key in the destination store
    size: int
    content_type: str | None = None


_CopyOne = Callable[[_Item, ProgressCallback], Awaitable[object]]


def _copier(src: AsyncStore | None, dst: AsyncStore | None) -> _CopyOne:
    """How one item goes from the source (a store, or files) to the destination."""
    if src is None:
        assert dst is not None
        return lambda item, cb: dst.upload(item.source, item.target, progress=cb)
    if dst is None:
        return lambda item, cb: src.download(item.source, item.target, progress=cb)

    def stream(item: _Item, cb: ProgressCallback) -> Awaitable[ObjectInfo]:
        # Store to store: bytes flow from one to the other, no temporary copy.
        return dst.upload(
            src.iter_bytes(item.source), item.target, content_type=item.content_type, progress=cb
        )

    return stream


async def _copy_item(copy: _CopyOne, item: _Item, meter: Meter) -> None:
    callback, finish = meter.track(item.size)
    await copy(item, callback)
    finish()


@dataclasses.dataclass(frozen=True)
class _Ends:
    """Where a copy reads and writes: a store root, or (None) plain local files."""

    src_root: str | None
    dst_root: str | None


async def _copy_file(ends: _Ends, source: str, target: str, settings: Settings) -> None:
    async with contextlib.AsyncExitStack() as stack:
        src = dst = None
        size, content_type = 0, None
        if ends.src_root is not None:
            src = await stack.enter_async_context(settings.open(ends.src_root))
            info = await src.stat(source)
            size, content_type = info.size, info.content_type
        else:
            size = (await anyio.Path(source).stat()).st_size
        if ends.dst_root is not None:
            dst = await stack.enter_async_context(settings.open(ends.dst_root))
        name = os.path.basename(target.replace("/", os.sep))
        with Meter(enabled=settings.show_progress, description=name) as meter:
            meter.add(size)
            await _copy_item(_copier(src, dst), _Item(source, target, size, content_type), meter)
    settings.note(meter.summary())


def _walk_files(root: str) -> Iterator[list[tuple[str, str, int]]]:
    """Yield, one folder at a time, ``(path, key, size)`` of the files under ``root``."""
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = sorted(d for d in dirs if d != META_DIR)  # a store's own files, not data
        batch = []
        for name in sorted(files):
            path = os.path.join(folder, name)
            with contextlib.suppress(FileNotFoundError):  # deleted while we walk
                size = os.stat(path).st_size
                key = name if rel == "." else "/".join([*rel.split(os.sep), name])
                batch.append((path, key, size))
        yield batch


async def _file_items(root: str) -> AsyncIterator[tuple[str, str, int, str | None]]:
    walker = _walk_files(root)
    while True:
        batch = await anyio.to_thread.run_sync(next, walker, None)  # one hop per folder
        if batch is None:
            return
        for path, key, size in batch:
            yield path, key, size, None


async def _store_items(
    store: AsyncStore, prefix: str
) -> AsyncIterator[tuple[str, str, int, str | None]]:
    async for info in store.list(prefix):
        yield info.key, info.key[len(prefix) :], info.size, info.content_type


def _local_target(folder: str, rel: str) -> str:
    path = os.path.normpath(os.path.join(folder, *rel.split("/")))
    if not path.startswith(os.path.normpath(folder) + os.sep):
        raise ConfigurationError(f"key {rel!r} would be written outside {folder!r}")
    return path


async def _copy_tree(
    ends: _Ends, source: str, target: Callable[[str], str], settings: Settings
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        src = dst = None
        if ends.src_root is not None:
            src = await stack.enter_async_context(settings.open(ends.src_root))
            items = _store_items(src, source)
        else:
            items = _file_items(source)
        if ends.dst_root is not None:
            # One store for all the files: opening one per file would dominate small copies.
            dst = await stack.enter_async_context(settings.open(ends.dst_root))
        copy = _copier(src, dst)
        meter = stack.enter_context(Meter(enabled=settings.show_progress, description="copying"))
        send, receive = anyio.create_memory_object_stream[_Item](settings.workers)

        async def produce() -> None:
            async with send:
                async for path_or_key, rel, size, content_type in items:
                    meter.add(size)
                    await send.send(_Item(path_or_key, target(rel), size, content_type))

        async def work() -> None:
            async for item in receive:
                await _copy_item(copy, item, meter)

        # A fixed pool of workers: bounded concurrency however many files there are, and
        # the listing streams into it instead of being materialised first.
        async with receive, anyio.create_task_group() as tg:
            tg.start_soon(produce)
            for _ in range(settings.workers):
                tg.start_soon(work)
    settings.note(meter.summary())


def _plan_file(src: Location, dst: Location) -> tuple[_Ends, str, str]:
    """``(ends, source, target)`` of a one-object copy, decided before any store I/O."""
    if src.plain_path:
        assert src.local is not None
        if src.is_dir:
            raise IsADirectoryError(21, "Is a directory (use -r to copy a folder)", src.local)
        if not src.exists:
            raise FileNotFoundError(2, "No such file or directory", src.local)
        src_root, source, name = None, src.local, os.path.basename(src.local)
    else:
        src_root, source = src.object_ref()
        name = source.rsplit("/", 1)[-1]
    if dst.plain_path and src_root is not None:
        assert dst.local is not None
        target = os.path.join(dst.local, name) if dst.is_dir else dst.local
        return _Ends(src_root, None), source, target
    dst_root, target = dst.dest_object(name)
    return _Ends(src_root, dst_root), source, target


def _plan_tree(src: Location, dst: Location) -> tuple[_Ends, str, Callable[[str], str]]:
    """``(ends, folder or prefix, target of a relative name)`` of a recursive copy."""
    src_root: str | None
    if src.plain_path:
        assert src.local is not None
        src.folder_ref()  # only to fail early on a missing folder: files are walked directly
        src_root, source = None, src.local
    else:
        src_root, source = src.folder_ref()
    if dst.plain_path and src_root is not None:
        folder = os.path.abspath(dst.local or ".")
        return _Ends(src_root, None), source, lambda rel: _local_target(folder, rel)
    dst_root, prefix = dst.dest_folder()
    return _Ends(src_root, dst_root), source, lambda rel: prefix + rel


@cli.command()
@click.argument("src")
@click.argument("dst")
@click.option("-r", "--recursive", is_flag=True, help="Copy every file or object under SRC.")
@common_options
def cp(src: str, dst: str, recursive: bool, **common: Any) -> None:
    """Copy SRC to DST: local files and store URLs, in any combination.

    With -r, every file under the folder SRC (or object under the prefix SRC) is copied
    under DST with the same relative name. A DST ending in "/" (or an existing folder)
    receives SRC's name.
    """
    settings = _settings(common)
    source, dest = Location.parse(src), Location.parse(dst)
    if recursive and not (source.plain_path and source.exists and not source.is_dir):
        anyio.run(_copy_tree, *_plan_tree(source, dest), settings)
    else:
        anyio.run(_copy_file, *_plan_file(source, dest), settings)


# -- ls ------------------------------------------------------------------------------------


def _ls_line(info: ObjectInfo, name: str, long: bool) -> str:
    if info.is_prefix:
        return f"{'':19} {'PRE':>12} {name}" if long else f"PRE {name}"
    if not long:
        return name
    when = info.last_modified.strftime("%Y-%m-%d %H:%M:%S") if info.last_modified else "-"
    return f"{when:19} {info.size:>12} {name}"


@cli.command()
@click.argument("url")
@click.option("-l", "--long", "long_", is_flag=True, help="Show modification time and size.")
@click.option("-r", "--recursive", is_flag=True, help="List every object, not one level.")
@common_options
def ls(url: str, long_: bool, recursive: bool, **common: Any) -> None:
    """List the objects and prefixes (PRE) under URL, with names relative to it."""
    settings = _settings(common)
    loc = Location.parse(url)
    if loc.local is not None and loc.exists and not loc.is_dir:
        root, key = loc.object_ref()  # one file: list just it

        async def one() -> None:
            async with settings.open(root) as store:
                click.echo(_ls_line(await store.stat(key), key, long_))

        anyio.run(one)
        return
    root, prefix = loc.folder_ref()

    async def many() -> None:
        async with settings.open(root) as store:
            found = False
            async for info in store.list(prefix, delimiter=None if recursive else "/"):
                found = True
                click.echo(_ls_line(info, info.key[len(prefix) :], long_))
            if found or not prefix:
                return
            key = prefix.rstrip("/")  # no such prefix: maybe the URL names one object
            try:
                info = await store.stat(key)
            except NotFoundError:
                raise NotFoundError(
                    "no such object or prefix", key=key, store=store.url, operation="ls"
                ) from None
            click.echo(_ls_line(info, key.rsplit("/", 1)[-1], long_))

    anyio.run(many)


# -- cat, stat, rm -------------------------------------------------------------------------


@cli.command()
@click.argument("url")
@common_options
def cat(url: str, **common: Any) -> None:
    """Write the object at URL to standard output (verified as it streams)."""
    settings = _settings(common)
    root, key = Location.parse(url).object_ref()
    out = sys.stdout.buffer

    async def run() -> None:
        async with settings.open(root) as store:
            async for chunk in store.iter_bytes(key):
                # A slow reader (a pipe) must not stall the event loop.
                await anyio.to_thread.run_sync(out.write, chunk)
        await anyio.to_thread.run_sync(out.flush)

    anyio.run(run)


def _stat_fields(url: str, info: ObjectInfo) -> dict[str, Any]:
    return {
        "url": url,
        "key": info.key,
        "size": info.size,
        "etag": info.etag,
        "last_modified": info.last_modified.isoformat() if info.last_modified else None,
        "checksums": dict(info.checksums),
        "content_type": info.content_type,
        "version": info.version,
    }


@cli.command()
@click.argument("urls", metavar="URL...", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, per URL.")
@common_options
def stat(urls: tuple[str, ...], as_json: bool, **common: Any) -> None:
    """Show objects' size, etag, modification time, checksums and content type."""
    settings = _settings(common)
    refs = [Location.parse(url).object_ref() for url in urls]

    async def run() -> list[dict[str, Any]]:
        found = []
        async with contextlib.AsyncExitStack() as stack:
            stores: dict[str, AsyncStore] = {}
            for root, key in refs:
                if root not in stores:  # one store per root, however many keys
                    stores[root] = await stack.enter_async_context(settings.open(root))
                store = stores[root]
                found.append(_stat_fields(store.url_for(key), await store.stat(key)))
        return found

    for n, fields in enumerate(anyio.run(run)):
        if as_json:
            click.echo(json.dumps(fields, sort_keys=True))
            continue
        checksums = fields.pop("checksums")
        fields.update({f"checksum.{name}": value for name, value in sorted(checksums.items())})
        width = max(len(name) for name in fields) + 1
        if n:
            click.echo()
        for name, value in fields.items():
            click.echo(f"{name + ':':{width}} {'-' if value is None else value}")


@cli.command()
@click.argument("url")
@click.option("-r", "--recursive", is_flag=True, help="Delete every object under URL.")
@common_options
def rm(url: str, recursive: bool, **common: Any) -> None:
    """Delete the object at URL, or with -r every object under it."""
    settings = _settings(common)
    loc = Location.parse(url)

    async def one(root: str, key: str) -> None:
        async with settings.open(root) as store:
            await store.stat(key)  # a typo should fail loudly, not delete nothing
            await store.delete(key)
        settings.note(f"deleted {loc.text}")

    async def many(root: str, prefix: str) -> None:
        count = 0
        async with settings.open(root) as store:
            batch: list[str] = []
            async for info in store.list(prefix):
                batch.append(info.key)
                if len(batch) == DELETE_BATCH:
                    await store.delete_many(batch)
                    count, batch = count + len(batch), []
            if batch:
                await store.delete_many(batch)
                count += len(batch)
        settings.note(f"deleted {count} object(s) under {loc.text}")

    if recursive:
        anyio.run(many, *loc.folder_ref())
    else:
        anyio.run(one, *loc.object_ref())
