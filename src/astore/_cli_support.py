"""What the ``astore`` commands share: sizes, options, locations and the progress bar."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ._config import DEFAULT_MAX_CONCURRENCY, DEFAULT_PART_SIZE, GiB, KiB, MiB, TransferConfig
from ._exceptions import AstoreError, ConfigurationError
from ._progress import ProgressCallback
from ._store import AsyncStore
from ._store import open as open_store
from ._url import parse_url

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = [
    "META_DIR",
    "Location",
    "Meter",
    "Settings",
    "common_options",
    "error_line",
    "human_size",
    "parse_size",
]

META_DIR = ".astore"  # the local store's own folder: marks a store root, never data
_UNITS = {
    "": 1,
    "b": 1,
    "k": KiB,
    "kib": KiB,
    "kb": 1000,
    "m": MiB,
    "mib": MiB,
    "mb": 1000**2,
    "g": GiB,
    "gib": GiB,
    "gb": 1000**3,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Parse a byte size: ``1048576``, ``8MiB`` or ``16M`` (binary units), ``5MB`` (decimal).

    Raises:
        ValueError: ``text`` is not a positive size.

    Example:
        >>> parse_size("8MiB")
        8388608
    """
    match = _SIZE_RE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size (try 8MiB, 16M or 1048576)")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value


def _size_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Click callback: a bad size is a usage error (exit 2)."""
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


# -- settings ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    """The options every command takes, on the group or on the command itself."""

    concurrency: int | None = None
    part_size: int | None = None
    quiet: bool = False
    endpoint_url: str | None = None
    region: str | None = None

    def merged(self, **command: Any) -> Settings:
        """These settings with the command's own options on top (the command's win)."""
        return Settings(
            concurrency=command.get("concurrency") or self.concurrency,
            part_size=command.get("part_size") or self.part_size,
            quiet=bool(command.get("quiet")) or self.quiet,
            endpoint_url=command.get("endpoint_url") or self.endpoint_url,
            region=command.get("region") or self.region,
        )

    @property
    def workers(self) -> int:
        """Files in flight at once, and parts in flight per file."""
        return self.concurrency or DEFAULT_MAX_CONCURRENCY

    @property
    def show_progress(self) -> bool:
        """Progress bars only for a person watching: stderr is a terminal and not --quiet."""
        return not self.quiet and sys.stderr.isatty()

    def note(self, message: str) -> None:
        """Tell the user something on stderr, unless --quiet."""
        if not self.quiet:
            click.echo(message, err=True)

    def open(self, root: str) -> AsyncStore:
        """Open the store at ``root`` with these transfer settings and S3 options."""
        transfer = TransferConfig(
            part_size=self.part_size or DEFAULT_PART_SIZE, max_concurrency=self.workers
        )
        options: dict[str, Any] = {}
        if root.startswith("s3://"):
            # Only S3 takes these; other backends would reject them as unknown options.
            if self.endpoint_url:
                options["endpoint_url"] = self.endpoint_url
            if self.region:
                options["region"] = self.region
        return open_store(root, transfer=transfer, **options)


_COMMON_OPTIONS = [
    click.option(
        "--concurrency",
        type=click.IntRange(min=1),
        default=None,
        help=f"Files, and parts per file, in flight at once [default: {DEFAULT_MAX_CONCURRENCY}].",
    ),
    click.option(
        "--part-size",
        metavar="SIZE",
        default=None,
        callback=_size_option,
        help="Multipart part size: 8MiB, 16M, 1048576 ... [default: 8MiB].",
    ),
    click.option("-q", "--quiet", is_flag=True, default=False, help="No progress, no summary."),
    click.option("--endpoint-url", default=None, help="S3 endpoint URL (s3:// only)."),
    click.option("--region", default=None, help="S3 region (s3:// only)."),
]


def common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add the shared options (``--concurrency``, ``--part-size``, ...) to a command."""
    for option in reversed(_COMMON_OPTIONS):
        f = option(f)
    return f


# -- locations -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Location:
    """A command-line location: a local path, or a key or prefix in a store.

    Local facts (does it exist, is it a folder) are read once, here, before any event loop
    runs, so that the async code never touches the file system directly.
    """

    text: str
    local: str | None  # absolute path, for plain paths and file:// URLs
    root: str  # the store URL to open, for other URLs
    key: str  # the key in ``root``; "" or ending in "/" for a prefix
    is_url: bool  # written as a URL (file:// included) rather than as a plain path
    is_dir: bool = False  # local: an existing folder, or written with a trailing "/"
    exists: bool = False  # local: something exists at the path

    @classmethod
    def parse(cls, text: str) -> Location:
        """Classify ``text``.

        Raises:
            ConfigurationError: an unsupported scheme or a malformed URL.
        """
        if not text:
            raise ConfigurationError("a location may not be empty")
        scheme, container, _ = parse_url(text)
        is_url = "://" in text
        if scheme == "file":
            trailing = text.endswith(("/", os.sep))
            return cls(
                text,
                os.path.normpath(container),
                "",
                "",
                is_url,
                is_dir=trailing or os.path.isdir(container),
                exists=os.path.exists(container),
            )
        key = urllib.parse.unquote(urllib.parse.urlsplit(text).path).lstrip("/")
        return cls(text, None, f"{scheme}://{container}", key, is_url)

    @property
    def plain_path(self) -> bool:
        """Written as a local path (a file to read or write directly), not as a URL."""
        return self.local is not None and not self.is_url

    def object_ref(self) -> tuple[str, str]:
        """``(store root, key)`` of the existing object this location names.

        Raises:
            ConfigurationError: a URL that names a bucket or prefix.
            FileNotFoundError, IsADirectoryError: a local path that is no file.
        """
        if self.local is None:
            if not self.key or self.key.endswith("/"):
                raise ConfigurationError(f"{self.text!r} names a bucket or prefix, not an object")
            return self.root, self.key
        if self.is_dir:
            raise IsADirectoryError(21, "Is a directory", self.local)
        if not os.path.isdir(os.path.dirname(self.local)):
            # Opening a local store creates its folder; reading must not.
            raise FileNotFoundError(2, "No such file or directory", self.local)
        return _local_ref(self.local, folder=False)

    def folder_ref(self) -> tuple[str, str]:
        """``(store root, prefix)`` of everything under this location (prefix "" or "p/").

        Raises:
            FileNotFoundError, NotADirectoryError: a local path that is no folder.
        """
        if self.local is None:
            return self.dest_folder()
        if not self.exists:
            raise FileNotFoundError(2, "No such file or directory", self.local)
        if not os.path.isdir(self.local):
            raise NotADirectoryError(20, "Not a directory", self.local)
        return _local_ref(self.local, folder=True)

    def dest_folder(self) -> tuple[str, str]:
        """``(store root, prefix)`` to copy many objects into (created if need be)."""
        if self.local is not None:
            return _local_ref(self.local, folder=True)
        prefix = self.key.strip("/")
        return self.root, f"{prefix}/" if prefix else ""

    def dest_object(self, name: str) -> tuple[str, str]:
        """``(store root, key)`` to copy one object named ``name`` to."""
        if self.local is not None:
            path = os.path.join(self.local, name) if self.is_dir else self.local
            return _local_ref(path, folder=False)
        if not self.key or self.key.endswith("/"):
            return self.root, self.key + name
        return self.root, self.key


def _local_ref(path: str, *, folder: bool) -> tuple[str, str]:
    """``(store root, key or prefix)`` of a local file or folder.

    Inside an existing local store (a folder holding ``.astore``), the path is a key of that
    store, so its recorded checksums are found and no second store is nested in it.
    Otherwise the store is the file's folder (or the folder itself).
    """
    probe = path if folder else os.path.dirname(path)
    while True:
        if os.path.isdir(os.path.join(probe, META_DIR)):
            rel = os.path.relpath(path, probe)
            if rel == ".":
                return probe, ""
            key = rel.replace(os.sep, "/")
            return probe, f"{key}/" if folder else key
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return (path, "") if folder else (os.path.dirname(path), os.path.basename(path))


# -- progress ------------------------------------------------------------------------------


class Meter:
    """One rich progress bar over all the files of a command, fed by astore's callbacks.

    Every file's ``progress=`` callback reports its own running total; the meter turns
    those into one count of bytes and files.
    """

    def __init__(self, *, enabled: bool, description: str) -> None:
        self.bytes_total = 0
        self.bytes_done = 0
        self.files_total = 0
        self.files_done = 0
        self.started = time.monotonic()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if enabled:
            self._progress, self._task = _rich_progress(description)

    def __enter__(self) -> Meter:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _refresh(self) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(
            self._task,
            completed=self.bytes_done,
            total=self.bytes_total,
            files=f"{self.files_done}/{self.files_total} files",
        )

    def add(self, size: int) -> None:
        """Count one more file of ``size`` bytes to copy."""
        self.bytes_total += size
        self.files_total += 1
        self._refresh()

    def track(self, size: int) -> tuple[ProgressCallback, Callable[[], None]]:
        """A ``progress=`` callback for one file of ``size`` bytes, and its ``finish()``."""
        seen = 0

        def callback(done: int, total: int | None) -> None:
            nonlocal seen
            self.bytes_done += done - seen
            seen = done
            self._refresh()

        def finish() -> None:
            # What the callback did not report (an empty file, a final partial tick) is done.
            callback(max(seen, size), size)
            self.files_done += 1
            self._refresh()

        return callback, finish

    def summary(self) -> str:
        """One line: files, bytes, time and throughput."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return (
            f"copied {self.files_done} file(s), {human_size(self.bytes_done)} in {elapsed:.2f} s "
            f"({self.bytes_done / MiB / elapsed:.1f} MiB/s)"
        )


def human_size(n: int) -> str:
    """``n`` bytes for people: ``512 B``, ``3.0 KiB``, ``1.2 GiB``."""
    if n < KiB:
        return f"{n} B"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    raise AssertionError("unreachable")


def _rich_progress(description: str) -> tuple[Progress, TaskID]:
    # Imported here: rich costs a third of a second, wasted when no bar is shown.
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TextColumn("{task.fields[files]}"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    return progress, progress.add_task(description, total=0, files="")


def error_line(exc: BaseException) -> str:
    """The one line printed for an error: ``astore: error: <message>``."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, AstoreError | OSError):
        message = f"{type(exc).__name__}: {message}"
    return f"astore: error: {message}"
