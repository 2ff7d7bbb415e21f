"""The synchronous facade: portal lifecycle, threads, running loops, fork, background uploads."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import astore
from astore import AsyncStore, Store

_FORK_WARNING = "ignore:.*multi-threaded.*fork.*:DeprecationWarning"


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "astore-loop"]


@pytest.fixture
def memory_url(memory_store_args: tuple[str, dict[str, Any]]) -> str:
    return memory_store_args[0]


@pytest.fixture
def local_url(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def run_script(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, **env},
        check=False,
    )


async def slow_chunks(n: int, size: int) -> AsyncIterator[bytes]:
    for i in range(n):
        await anyio.lowlevel.checkpoint()
        yield bytes([i % 256]) * size


# -- lifecycle ---------------------------------------------------------------------------


def test_open_close_many_times_keeps_one_loop_thread(memory_url: str) -> None:
    """Opening and closing stores repeatedly reuses one loop thread and leaks no threads."""
    with astore.open_sync(memory_url) as store:
        store.put("warm", b"up")
    before = threading.active_count()
    for i in range(50):
        with astore.open_sync(memory_url) as store:
            store.put(f"k{i}", b"x")
    assert len(loop_threads()) == 1
    assert threading.active_count() <= before


def test_many_open_stores_share_one_loop_thread(memory_url: str, local_url: str) -> None:
    """Twenty stores open at once all run on the same single loop thread."""
    stores = [astore.open_sync(memory_url if i % 2 else local_url) for i in range(20)]
    try:
        for i, store in enumerate(stores):
            store.put(f"s{i}", b"data")
        assert len(loop_threads()) == 1
    finally:
        for store in stores:
            store.close()
    with astore.open_sync(local_url) as store:
        assert sorted(info.key for info in store.list()) == sorted(f"s{i}" for i in range(0, 20, 2))


def test_close_is_idempotent_and_refuses_further_use(memory_url: str) -> None:
    """close() may be called twice; any call after it raises ClosedError."""
    store = astore.open_sync(memory_url)
    store.put("a", b"1")
    store.close()
    store.close()
    with pytest.raises(astore.ClosedError):
        store.get("a")


def test_store_without_with_opens_on_first_call(memory_url: str) -> None:
    """A Store used without ``with`` opens lazily at its first call and works normally."""
    store = Store(memory_url)
    assert "unopened" in repr(store)
    try:
        assert store.put("lazy", b"abc").size == 3
        assert "open" in repr(store)
        assert store.get("lazy") == b"abc"
    finally:
        store.close()
    assert "closed" in repr(store)


def test_bad_url_fails_at_construction() -> None:
    """A bad URL raises ConfigurationError from open_sync itself, before any call."""
    with pytest.raises(astore.ConfigurationError):
        astore.open_sync("ftp://nowhere")


def test_url_for_needs_no_session(memory_url: str) -> None:
    """url_for works on a store that was never opened and does not open it."""
    store = Store(memory_url)
    assert store.url_for("a/b.txt") == f"{memory_url}/a/b.txt"
    assert "unopened" in repr(store)
    store.close()


def test_use_from_several_threads_at_once(local_url: str) -> None:
    """Eight threads using one store concurrently each read back what they wrote."""

    def work(i: int) -> bytes:
        store.put(f"t/{i}", str(i).encode() * 100)
        return store.get(f"t/{i}")

    with astore.open_sync(local_url) as store, concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(32)))
        assert results == [str(i).encode() * 100 for i in range(32)]
        assert len(list(store.list("t/"))) == 32


def test_use_inside_a_running_event_loop(memory_url: str) -> None:
    """Sync calls work from a thread that is running an event loop (Jupyter, async apps)."""

    async def cell() -> bytes:
        with astore.open_sync(memory_url) as store:
            store.put("jupyter", b"cell")
            return store.get("jupyter")

    assert asyncio.run(cell()) == b"cell"


def test_reads_and_metadata(memory_url: str, tmp_path: Path) -> None:
    """get, stat, exists, copy, download and delete_many behave as on AsyncStore."""
    with astore.open_sync(memory_url) as store:
        store.put("a.txt", b"hello world")
        assert store.get("a.txt", range=(0, 5)) == b"hello"
        assert store.stat("a.txt").size == 11
        assert store.copy("a.txt", "b.txt").key == "b.txt"
        store.download("b.txt", tmp_path / "b.txt")
        assert (tmp_path / "b.txt").read_bytes() == b"hello world"
        store.delete_many(["a.txt", "b.txt"])
        assert not store.exists("a.txt")
        with pytest.raises(astore.NotFoundError):
            store.stat("b.txt")


# -- iterators ---------------------------------------------------------------------------


def test_list_streams_every_page_in_order(memory_url: str) -> None:
    """list() with a small page size yields every object, in key order, as a plain iterator."""
    with astore.open_sync(memory_url) as store:
        for i in range(7):
            store.put(f"p/{i}", b"x")
        listing = store.list("p/", page_size=2)
        assert not hasattr(listing, "__anext__")
        assert [info.key for info in listing] == [f"p/{i}" for i in range(7)]


def test_iter_bytes_yields_chunks(memory_url: str) -> None:
    """iter_bytes() yields the object in chunks of the requested size."""
    data = bytes(range(256)) * 40
    with astore.open_sync(memory_url) as store:
        store.put("blob", data)
        chunks = list(store.iter_bytes("blob", chunk_size=1000))
        assert b"".join(chunks) == data
        assert all(len(c) <= 1000 for c in chunks)
        assert b"".join(store.iter_bytes("blob", start=10, end=20)) == data[10:20]


def test_iterator_errors_propagate(memory_url: str) -> None:
    """An error inside the async iterator is raised by the sync iterator."""
    with astore.open_sync(memory_url) as store, pytest.raises(astore.NotFoundError):
        list(store.iter_bytes("missing"))


def test_breaking_out_closes_the_async_generator(memory_url: str) -> None:
    """Leaving a sync iteration early closes the async generator on the loop before returning."""
    closed = threading.Event()
    produced: list[int] = []

    async def numbers() -> AsyncIterator[int]:
        try:
            for i in range(10_000):
                produced.append(i)
                yield i
        finally:
            closed.set()

    with astore.open_sync(memory_url) as store:
        for i in store._iterate(lambda _: numbers(), buffer=1, batch=1):
            if i == 3:
                break
        assert closed.is_set()
        assert len(produced) < 10_000


def test_list_break_then_reuse(memory_url: str) -> None:
    """After breaking out of list(), the store keeps working (nothing is left stuck)."""
    with astore.open_sync(memory_url) as store:
        for i in range(5):
            store.put(f"k{i}", b"v")
        first = next(iter(store.list(page_size=1)))
        assert first.key == "k0"
        assert store.get("k4") == b"v"


# -- signatures --------------------------------------------------------------------------

_RENAMED = {"__aenter__": "__enter__", "__aexit__": "__exit__", "aclose": "close"}


def public_members(cls: type) -> dict[str, Any]:
    """Public attributes defined by ``cls`` or its bases (not ``object``), unbound."""
    members: dict[str, Any] = {}
    for base in reversed(cls.__mro__[:-1]):
        for name, member in vars(base).items():
            if not name.startswith("_") or name in _RENAMED or name in _RENAMED.values():
                members[name] = member
    return members


def test_store_and_async_store_have_the_same_api() -> None:
    """Store exposes every public AsyncStore method, with identical parameters."""
    async_members = public_members(AsyncStore)
    sync_members = public_members(Store)
    expected = {_RENAMED.get(n, n) for n in async_members}
    assert expected == set(sync_members)
    for name, member in async_members.items():
        sync_member = sync_members[_RENAMED.get(name, name)]
        if isinstance(member, property):
            assert isinstance(sync_member, property), name
            continue
        async_params = list(inspect.signature(member).parameters.values())
        sync_params = list(inspect.signature(sync_member).parameters.values())
        assert sync_params == async_params, name


# -- background uploads ------------------------------------------------------------------


def test_background_upload_returns_a_concurrent_future(memory_url: str, tmp_path: Path) -> None:
    """upload_in_background returns a concurrent.futures.Future of the ObjectInfo."""
    src = tmp_path / "f.bin"
    src.write_bytes(b"payload")
    with astore.open_sync(memory_url) as store:
        future = store.upload_in_background(src, "bg/f.bin")
        assert isinstance(future, concurrent.futures.Future)
        info = future.result()
        assert info.key == "bg/f.bin"
        assert info.size == 7
        assert store.get("bg/f.bin") == b"payload"


def test_background_upload_rejects_bad_key_at_once(memory_url: str, tmp_path: Path) -> None:
    """An invalid key raises from upload_in_background itself, not later."""
    with astore.open_sync(memory_url) as store, pytest.raises(astore.InvalidKeyError):
        store.upload_in_background(tmp_path, "../escape")


def test_flush_raises_the_single_failure(memory_url: str, tmp_path: Path) -> None:
    """flush() waits for all background uploads and raises the one that failed."""
    src = tmp_path / "f.bin"
    src.write_bytes(b"x")
    with astore.open_sync(memory_url) as store:
        store.put("taken", b"old")
        ok = store.upload_in_background(src, "free")
        bad = store.upload_in_background(src, "taken", if_not_exists=True)
        with pytest.raises(astore.AlreadyExistsError):
            store.flush()
        assert ok.done()
        assert bad.done()
        store.flush()  # reported once: a second flush is clean


def test_flush_raises_an_exception_group_for_several(memory_url: str, tmp_path: Path) -> None:
    """Several failed background uploads are raised together as an ExceptionGroup."""
    src = tmp_path / "f.bin"
    src.write_bytes(b"x")
    with astore.open_sync(memory_url) as store:
        store.put("a", b"1")
        store.put("b", b"2")
        store.upload_in_background(src, "a", if_not_exists=True)
        store.upload_in_background(src, "b", if_not_exists=True)
        with pytest.raises(ExceptionGroup) as info:
            store.flush()
        assert len(info.value.exceptions) == 2
        assert all(isinstance(e, astore.AlreadyExistsError) for e in info.value.exceptions)


def test_error_read_from_future_is_not_raised_again(memory_url: str, tmp_path: Path) -> None:
    """An error already read from its Future is not raised a second time by flush()."""
    src = tmp_path / "f.bin"
    src.write_bytes(b"x")
    with astore.open_sync(memory_url) as store:
        store.put("taken", b"old")
        future = store.upload_in_background(src, "taken", if_not_exists=True)
        assert isinstance(future.exception(), astore.AlreadyExistsError)
        store.flush()


def test_leaving_with_waits_for_in_flight_uploads(memory_url: str) -> None:
    """Leaving ``with`` waits until background uploads still in flight are stored."""
    with astore.open_sync(memory_url) as store:
        future = store.upload_in_background(slow_chunks(64, 4096), "slow.bin")
    assert future.done()
    assert future.result().size == 64 * 4096
    with astore.open_sync(memory_url) as store:
        assert store.stat("slow.bin").size == 64 * 4096


def test_leaving_with_raises_a_failed_upload(memory_url: str, tmp_path: Path) -> None:
    """A background upload that failed and was never looked at is raised on leaving ``with``."""
    src = tmp_path / "f.bin"
    src.write_bytes(b"x")
    store = astore.open_sync(memory_url)
    store.put("taken", b"old")
    with pytest.raises(astore.AlreadyExistsError), store:
        store.upload_in_background(src, "taken", if_not_exists=True)


def test_failing_upload_is_logged_at_interpreter_exit(memory_url: str) -> None:
    """A store never closed has its failed background upload logged when the process exits."""
    result = run_script(
        f"""
        import astore
        store = astore.open_sync({memory_url!r})
        store.put("taken", b"old")
        store.upload_in_background(__import__("io").BytesIO(b"new"), "taken", if_not_exists=True)
        print("script done")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "script done" in result.stdout
    assert "background upload to" in result.stderr
    assert "taken" in result.stderr


def test_pending_upload_is_flushed_at_interpreter_exit(tmp_path: Path) -> None:
    """A background upload still running when the script ends completes before exit."""
    root = tmp_path / "store"
    result = run_script(
        f"""
        import anyio, astore

        async def chunks():
            for i in range(200):
                await anyio.sleep(0)
                yield b"z" * 1000

        store = astore.open_sync({str(root)!r})
        store.upload_in_background(chunks(), "late.bin")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    with astore.open_sync(root) as store:
        assert store.get("late.bin") == b"z" * 200_000


def test_unfinishable_upload_is_logged_after_bounded_wait(memory_url: str) -> None:
    """An upload that cannot finish is abandoned after ASTORE_EXIT_TIMEOUT, with a log line."""
    result = run_script(
        f"""
        import anyio, astore

        async def never():
            yield b"first"
            await anyio.sleep_forever()
            yield b"never"

        store = astore.open_sync({memory_url!r})
        store.upload_in_background(never(), "stuck.bin")
        """,
        ASTORE_EXIT_TIMEOUT="0.2",
    )
    assert result.returncode == 0, result.stderr
    assert "did not finish within 0.2 s" in result.stderr
    assert "stuck.bin" in result.stderr


# -- fork --------------------------------------------------------------------------------


def _child_uses_stores(inherited: Store, root: str) -> None:
    assert inherited.get("parent.txt") == b"from parent"
    inherited.put("child-inherited.txt", b"inherited store")
    with astore.open_sync(root) as fresh:
        fresh.put("child-new.txt", b"new store")
    # Not flushed explicitly: the child's exit (os._exit under multiprocessing) must do it.
    inherited.upload_in_background(slow_chunks(16, 1024), "child-bg.bin")


@pytest.mark.filterwarnings(_FORK_WARNING)
def test_fork_child_uses_inherited_and_new_store(local_url: str) -> None:
    """A forked child gets a fresh loop: an inherited store and a new one both work in it."""
    store = astore.open_sync(local_url)
    try:
        store.put("parent.txt", b"from parent")
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(target=_child_uses_stores, args=(store, local_url))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        # The parent's store and loop are untouched by the child.
        assert store.get("child-inherited.txt") == b"inherited store"
        assert store.get("child-new.txt") == b"new store"
        assert store.stat("child-bg.bin").size == 16 * 1024
        assert len(loop_threads()) == 1
    finally:
        store.close()


def _child_never_used_parent_loop(root: str, queue: Any) -> None:
    with astore.open_sync(root) as store:
        store.put(f"pid-{os.getpid()}", b"x")
        queue.put(sorted(t.name for t in threading.enumerate() if t.name == "astore-loop"))


@pytest.mark.filterwarnings(_FORK_WARNING)
def test_fork_children_start_their_own_loop_thread(local_url: str) -> None:
    """Each forked child runs exactly one loop thread of its own."""
    with astore.open_sync(local_url) as store:
        store.put("warm", b"up")
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        children = [
            ctx.Process(target=_child_never_used_parent_loop, args=(local_url, queue))
            for _ in range(3)
        ]
        for child in children:
            child.start()
        names = [queue.get(timeout=60) for _ in children]
        for child in children:
            child.join(60)
            assert child.exitcode == 0
        assert names == [["astore-loop"]] * 3
        assert len([i for i in store.list() if i.key.startswith("pid-")]) == 3


@pytest.mark.filterwarnings(_FORK_WARNING)
def test_torch_dataloader_fork_workers_read_through_store(local_url: str) -> None:
    """PyTorch DataLoader workers started by fork read objects through an inherited Store."""
    torch_data = pytest.importorskip("torch.utils.data")

    class Objects(torch_data.Dataset):  # type: ignore[misc, name-defined]
        def __init__(self, store: Store) -> None:
            self.store = store

        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> bytes:
            return self.store.get(f"item/{i}")

    with astore.open_sync(local_url) as store:
        for i in range(8):
            store.put(f"item/{i}", f"value-{i}".encode())
        loader = torch_data.DataLoader(
            Objects(store),
            batch_size=None,
            num_workers=2,
            multiprocessing_context="fork",
        )
        assert sorted(loader) == sorted(f"value-{i}".encode() for i in range(8))
