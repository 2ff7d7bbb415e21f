"""ArtifactUploader: log files from a training loop; they upload in the background.

The training loop pays for one local copy per artifact (into a staging folder, so the loop may
overwrite or delete its file at once); the upload, its retries and checksums happen on
astore's loop thread (or in a worker process), at most ``max_concurrent_uploads`` at a time.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import dataclasses
import functools
import itertools
import logging
import multiprocessing
import os
import queue
import shutil
import string
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from .._exceptions import ClosedError, ConfigurationError
from .._loop import _exit_timeout, _leaves
from .._store import AsyncStore
from .._sync import Store, open_sync
from .._types import ObjectInfo

__all__ = ["DEFAULT_OBJECT_NAME", "ArtifactUploader", "distributed_info"]

log = logging.getLogger("astore")

DEFAULT_OBJECT_NAME = "{run_name}/artifacts/{artifact_name}"
TEMPLATE_FIELDS = frozenset(
    {"run_name", "artifact_name", "rank", "local_rank", "world_size", "local_world_size"}
    | {"node_rank"}
)


def distributed_info() -> dict[str, int]:
    """This process's place in a distributed job: ranks and world sizes.

    ``rank`` and ``world_size`` come from ``torch.distributed`` when it is imported and
    initialised (torch is never imported for this), otherwise from the ``RANK`` and
    ``WORLD_SIZE`` environment variables that ``torchrun`` and most launchers set;
    ``local_rank``, ``local_world_size`` and ``node_rank`` from ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE`` and ``NODE_RANK`` (or ``GROUP_RANK``). Missing values are 0 for
    ranks and 1 for sizes.

    Returns:
        ``{"rank", "local_rank", "world_size", "local_world_size", "node_rank"}``.

    Raises:
        ConfigurationError: one of the variables is set but is not an integer.

    Example:
        >>> distributed_info()["world_size"]
        1
    """
    rank = _env_int("RANK", default=0)
    world_size = _env_int("WORLD_SIZE", default=1)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        rank, world_size = int(dist.get_rank()), int(dist.get_world_size())
    return {
        "rank": rank,
        "local_rank": _env_int("LOCAL_RANK", default=0),
        "world_size": world_size,
        "local_world_size": _env_int("LOCAL_WORLD_SIZE", default=1),
        "node_rank": _env_int("NODE_RANK", "GROUP_RANK", default=0),
    }


def _env_int(*names: str, default: int) -> int:
    for name in names:
        raw = os.environ.get(name, "").strip()
        if raw:
            try:
                return int(raw)
            except ValueError:
                raise ConfigurationError(f"{name}={raw!r} is not an integer") from None
    return default


@dataclasses.dataclass(frozen=True, slots=True)
class _Job:
    artifact_name: str
    key: str
    staged: str
    if_not_exists: bool


_STOP = object()

# The worker process's own store, opened by _init_worker (spawned processes share nothing).
_worker_store: Store | None = None


def _init_worker(url: str | os.PathLike[str], options: dict[str, Any]) -> None:
    global _worker_store
    _worker_store = open_sync(url, **options)


def _upload_in_worker(staged: str, key: str, if_not_exists: bool) -> ObjectInfo:
    assert _worker_store is not None
    return _worker_store.upload(staged, key, if_not_exists=if_not_exists)


class ArtifactUploader:
    """Upload files logged by a training loop in the background, without stalling it.

    :meth:`log_file` copies the file into a staging folder and returns; the copy uploads in
    the background (at most ``max_concurrent_uploads`` at a time, under the store's retry
    policy) and is deleted once stored. Failed uploads are logged when they fail and raised
    by :meth:`wait` (also on leaving ``with`` and by :meth:`close`); at interpreter exit,
    pending uploads get a bounded wait (``ASTORE_EXIT_TIMEOUT``, default 60 s) and anything
    left is logged.

    Args:
        store_or_url: a sync :class:`~astore.Store` (used, not closed) or a store URL (opened
            with ``store_options`` and closed by :meth:`close`).
        object_name: the object name template; fields ``{run_name}``, ``{artifact_name}``,
            ``{rank}``, ``{local_rank}``, ``{world_size}``, ``{local_world_size}``,
            ``{node_rank}`` (see :func:`distributed_info`). Leading ``/`` is stripped.
        run_name: the run's name; default ``$ASTORE_RUN_NAME`` or ``run-<UTC time>`` (set
            it explicitly in multi-process jobs, so that all ranks agree).
        staging_dir: where staged copies go (a RAM disk such as ``/dev/shm`` makes the copy
            cheapest); default a new temporary folder. Must be on a local file system.
        should_upload: ``should_upload(artifact_name) -> bool``; files it rejects are
            neither copied nor uploaded.
        max_concurrent_uploads: uploads in flight at once; more logged files wait staged.
        use_processes: upload from worker processes (spawned, each with its own store)
            instead of astore's loop thread, so checksumming never competes with a
            GIL-heavy training loop. Needs a URL, not a store.
        **store_options: options for :func:`~astore.open_sync` when given a URL.

    Raises:
        ConfigurationError: a bad template field, ``max_concurrent_uploads``, or a store
            object with ``use_processes=True`` or with ``store_options``.

    Example:
        >>> with ArtifactUploader("s3://bucket/runs", run_name="exp-7",
        ...                       object_name="{run_name}/rank{rank}/{artifact_name}") as up:
        ...     for step in range(100):
        ...         save_checkpoint("ckpt.pt")
        ...         up.log_file(f"ckpt-{step}.pt", "ckpt.pt")
    """

    def __init__(
        self,
        store_or_url: Store | str | os.PathLike[str],
        *,
        object_name: str = DEFAULT_OBJECT_NAME,
        run_name: str | None = None,
        staging_dir: str | os.PathLike[str] | None = None,
        should_upload: Callable[[str], bool] | None = None,
        max_concurrent_uploads: int = 4,
        use_processes: bool = False,
        **store_options: Any,
    ) -> None:
        if (
            not isinstance(max_concurrent_uploads, int)
            or isinstance(max_concurrent_uploads, bool)
            or max_concurrent_uploads < 1
        ):
            raise ConfigurationError(
                f"max_concurrent_uploads must be a positive int, not {max_concurrent_uploads!r}"
            )
        _check_template(object_name)
        if isinstance(store_or_url, AsyncStore):
            raise ConfigurationError(
                "ArtifactUploader needs a sync Store or a URL, not an AsyncStore (it is bound "
                "to its event loop)"
            )
        if isinstance(store_or_url, Store):
            if use_processes:
                raise ConfigurationError(
                    "use_processes=True needs a URL: each worker process opens its own store"
                )
            if store_options:
                raise ConfigurationError("store options apply only when given a URL")
            self._store, self._owns_store = store_or_url, False
            url: str | os.PathLike[str] = store_or_url.url
        else:
            self._store, self._owns_store = open_sync(store_or_url, **store_options), True
            url = store_or_url
        self.object_name = object_name
        self.run_name = run_name or os.environ.get("ASTORE_RUN_NAME") or _default_run_name()
        self.should_upload = should_upload
        self.max_concurrent_uploads = max_concurrent_uploads
        self.use_processes = use_processes
        # A private folder even inside a shared staging_dir, so two uploaders never collide
        # and close() can remove exactly what this one created.
        if staging_dir is not None:
            os.makedirs(staging_dir, exist_ok=True)
        self._staging = tempfile.mkdtemp(prefix="astore-artifacts-", dir=staging_dir)
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._outstanding: dict[int, _Job] = {}
        self._errors: list[Exception] = []
        self._closed = False
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._dispatcher: threading.Thread | None = None
        if use_processes:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=max_concurrent_uploads,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(url, store_options),
            )
        else:
            self._dispatcher = threading.Thread(
                target=self._dispatch, name="astore-artifacts", daemon=True
            )
            self._dispatcher.start()
        atexit.register(self._at_exit)

    # -- public ----------------------------------------------------------------------------

    def object_name_for(self, artifact_name: str) -> str:
        """The object name ``artifact_name`` is stored under (the rendered template).

        Args:
            artifact_name: the artifact's name, as given to :meth:`log_file`.

        Raises:
            ConfigurationError: a rank environment variable is not an integer.

        Example:
            >>> ArtifactUploader("memory://x", run_name="r").object_name_for("a.txt")
            'r/artifacts/a.txt'
        """
        fields = {"run_name": self.run_name, "artifact_name": artifact_name}
        return self.object_name.format(**fields, **distributed_info()).lstrip("/")

    def uri_for(self, artifact_name: str) -> str:
        """The URL the artifact is (or will be) stored at, e.g. ``s3://bucket/run/a.txt``.

        Args:
            artifact_name: the artifact's name.

        Raises:
            InvalidKeyError: the rendered object name is not a valid key.

        Example:
            >>> ArtifactUploader("memory://x", run_name="r").uri_for("a.txt")
            'memory://x/r/artifacts/a.txt'
        """
        return self._store.url_for(self.object_name_for(artifact_name))

    def log_file(
        self, artifact_name: str, path: str | os.PathLike[str], *, overwrite: bool = False
    ) -> bool:
        """Stage a copy of the file at ``path`` and upload it in the background.

        Returns as soon as the copy is made: the caller may then modify or delete ``path``.
        The upload's outcome is reported by :meth:`wait`.

        Args:
            artifact_name: the artifact's name (the template's ``{artifact_name}``).
            path: the file to upload.
            overwrite: replace an existing object; ``False`` uploads only if the object
                does not exist yet, and :meth:`wait` raises :class:`AlreadyExistsError`
                otherwise.

        Returns:
            Whether the file was queued (``False`` if ``should_upload`` rejected it).

        Raises:
            ClosedError: the uploader is closed.
            InvalidKeyError: the rendered object name is not a valid key.
            OSError: the file cannot be read, or the staging folder written.

        Example:
            >>> uploader.log_file("metrics.json", "out/metrics.json")
            True
        """
        if self._closed:
            raise ClosedError("the ArtifactUploader is closed")
        if self.should_upload is not None and not self.should_upload(artifact_name):
            return False
        key = self.object_name_for(artifact_name)
        self._store.url_for(key)  # validates the key before anything is copied
        seq = next(self._seq)
        staged = os.path.join(self._staging, f"{seq:08d}-{os.path.basename(os.fspath(path))}")
        # One full copy, never a hard link: the loop may rewrite its file in place.
        shutil.copyfile(path, staged)
        job = _Job(artifact_name, key, staged, if_not_exists=not overwrite)
        with self._cond:
            self._outstanding[seq] = job
        if self._pool is not None:
            future = self._pool.submit(_upload_in_worker, staged, key, not overwrite)
            future.add_done_callback(lambda f: self._finish(seq, job, f))
        else:
            self._queue.put((seq, job))
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Wait until every logged file is uploaded (or failed), then report the failures.

        Args:
            timeout: seconds to wait at most; ``None`` waits as long as it takes.

        Raises:
            TimeoutError: uploads still run after ``timeout`` seconds (nothing is lost).
            The failed uploads' errors since the last wait(): the error itself if one
            failed (e.g. :class:`AlreadyExistsError`), an ExceptionGroup if several did.

        Example:
            >>> uploader.wait()
        """
        with self._cond:
            if not self._cond.wait_for(lambda: not self._outstanding, timeout):
                raise TimeoutError(
                    f"{len(self._outstanding)} artifact upload(s) still running after {timeout} s"
                )
            errors, self._errors = self._errors, []
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"{len(errors)} artifact uploads failed", errors)

    def close(self) -> None:
        """Wait for every upload, stop the workers, close an owned store. Idempotent.

        Raises:
            The failed uploads' errors, as :meth:`wait`.

        Example:
            >>> uploader.close()
        """
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        try:
            self.wait()
        finally:
            self._shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._outstanding)} pending"
        return f"<ArtifactUploader {self._store.url} {self.object_name!r} {state}>"

    # -- internals -------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Thread mode: start uploads as slots free up; clean up finished ones off the loop."""
        waiting: collections.deque[tuple[int, _Job]] = collections.deque()
        in_flight = 0
        while True:
            event = self._queue.get()
            if event is _STOP:
                return
            if isinstance(event, tuple) and len(event) == 2:
                waiting.append(event)
            else:
                assert isinstance(event, _Finished)
                in_flight -= 1
                self._finish(event.seq, event.job, event.future)
            while waiting and in_flight < self.max_concurrent_uploads:
                seq, job = waiting.popleft()
                try:
                    future = self._store.upload_in_background(
                        job.staged, job.key, if_not_exists=job.if_not_exists
                    )
                except Exception as exc:
                    failed: concurrent.futures.Future[ObjectInfo] = concurrent.futures.Future()
                    failed.set_exception(exc)
                    self._finish(seq, job, failed)
                    continue
                in_flight += 1
                # Runs on astore's loop thread: only hand the result back to this thread.
                future.add_done_callback(functools.partial(self._hand_back, seq, job))

    def _hand_back(
        self, seq: int, job: _Job, future: concurrent.futures.Future[ObjectInfo]
    ) -> None:
        self._queue.put(_Finished(seq, job, future))

    def _finish(self, seq: int, job: _Job, future: concurrent.futures.Future[ObjectInfo]) -> None:
        error = future.exception()
        try:
            os.unlink(job.staged)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not delete staged artifact %s: %s", job.staged, exc)
        if error is not None:
            log.error(
                "artifact %r could not be uploaded to %s: %s",
                job.artifact_name,
                self._store.url_for(job.key),
                error,
            )
        with self._cond:
            self._outstanding.pop(seq, None)
            if isinstance(error, Exception):
                self._errors.append(error)
            self._cond.notify_all()

    def _shutdown(self) -> None:
        if self._dispatcher is not None:
            self._queue.put(_STOP)
            self._dispatcher.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        try:
            if self._owns_store:
                self._store.close()
        finally:
            shutil.rmtree(self._staging, ignore_errors=True)

    def _at_exit(self) -> None:
        timeout = _exit_timeout()
        try:
            self.wait(timeout=timeout)
        except TimeoutError:
            with self._cond:
                names = sorted(job.artifact_name for job in self._outstanding.values())
            log.error(
                "astore: %d artifact(s) were not uploaded within %.1f s of interpreter exit "
                "and were abandoned: %s",
                len(names),
                timeout,
                ", ".join(names),
            )
            return
        except Exception as exc:
            for error in _leaves(exc):
                log.error(
                    "astore: artifact upload failed (reported at interpreter exit): %s", error
                )
        self._closed = True
        self._shutdown()


@dataclasses.dataclass(frozen=True, slots=True)
class _Finished:
    seq: int
    job: _Job
    future: concurrent.futures.Future[ObjectInfo]


def _check_template(template: str) -> None:
    if not isinstance(template, str) or not template:
        raise ConfigurationError(f"object_name must be a non-empty str, not {template!r}")
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    except ValueError as exc:
        raise ConfigurationError(
            f"object_name {template!r} is not a valid template: {exc}"
        ) from None
    unknown = fields - TEMPLATE_FIELDS
    if unknown:
        raise ConfigurationError(
            f"object_name {template!r} uses unknown field(s) {sorted(unknown)}; "
            f"available: {sorted(TEMPLATE_FIELDS)}"
        )
    if "artifact_name" not in fields:
        raise ConfigurationError(
            f"object_name {template!r} must contain {{artifact_name}}, or every artifact "
            "would overwrite the same object"
        )


def _default_run_name() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S", time.gmtime())
