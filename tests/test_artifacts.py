"""ArtifactUploader: object names, filtering, staging, conflicts, processes, and the loop stall."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import astore
from astore.ml import ArtifactUploader, distributed_info

ROOT = Path(__file__).resolve().parent.parent
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK")


@pytest.fixture(autouse=True)
def _no_rank_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*RANK_VARS, "ASTORE_RUN_NAME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def local_url(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_template_uses_env_ranks(monkeypatch: pytest.MonkeyPatch, local_url: str) -> None:
    """Template fields come from RANK/LOCAL_RANK/WORLD_SIZE/LOCAL_WORLD_SIZE/GROUP_RANK."""
    for name, value in {
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
    }.items():
        monkeypatch.setenv(name, value)
    template = (
        "/{run_name}/n{node_rank}/r{rank}of{world_size}/l{local_rank}of{local_world_size}"
        "/{artifact_name}"
    )
    with ArtifactUploader(local_url, run_name="exp", object_name=template) as up:
        assert up.object_name_for("m.json") == "exp/n1/r5of8/l1of4/m.json"
        assert up.uri_for("m.json") == f"file://{local_url}/exp/n1/r5of8/l1of4/m.json"


def test_ranks_default_to_single_process() -> None:
    """Without launcher variables or torch.distributed, ranks are 0 and sizes 1."""
    assert distributed_info() == {
        "rank": 0,
        "local_rank": 0,
        "world_size": 1,
        "local_world_size": 1,
        "node_rank": 0,
    }


def test_default_template_and_run_name_env(monkeypatch: pytest.MonkeyPatch, local_url: str) -> None:
    """The default name is {run_name}/artifacts/{artifact_name}, run name from ASTORE_RUN_NAME."""
    monkeypatch.setenv("ASTORE_RUN_NAME", "from-env")
    with ArtifactUploader(local_url) as up:
        assert up.object_name_for("a.txt") == "from-env/artifacts/a.txt"


@pytest.mark.parametrize("template", ["{run_name}/{epoch}/{artifact_name}", "{run_name}/fixed"])
def test_bad_template_is_rejected(template: str, local_url: str) -> None:
    """Unknown fields, or a template without {artifact_name}, raise ConfigurationError."""
    with pytest.raises(astore.ConfigurationError):
        ArtifactUploader(local_url, object_name=template)


def test_rejects_async_store_and_processes_with_store_object(memory_store_args: Any) -> None:
    """use_processes needs a URL; an AsyncStore is refused (it is bound to its loop)."""
    url, _ = memory_store_args
    with astore.open_sync(url) as store, pytest.raises(astore.ConfigurationError):
        ArtifactUploader(store, use_processes=True)
    with pytest.raises(astore.ConfigurationError):
        ArtifactUploader(astore.open(url))


def test_filter_skips_rejected_artifacts(tmp_path: Path, local_url: str) -> None:
    """Artifacts that should_upload rejects are neither staged nor uploaded."""
    src = write(tmp_path / "f", b"data")
    with ArtifactUploader(
        local_url, run_name="r", should_upload=lambda name: name.endswith(".json")
    ) as up:
        assert up.log_file("keep.json", src) is True
        assert up.log_file("skip.bin", src) is False
    with astore.open_sync(local_url) as store:
        assert [i.key for i in store.list()] == ["r/artifacts/keep.json"]


def test_caller_may_overwrite_and_delete_its_file_at_once(tmp_path: Path, local_url: str) -> None:
    """The uploaded bytes are the file's content at log_file time, whatever the caller does next."""
    src = tmp_path / "ckpt.bin"
    with ArtifactUploader(local_url, run_name="r") as up:
        for step in range(5):
            write(src, f"step {step}".encode() * 1000)
            up.log_file(f"ckpt-{step}.bin", src)
            write(src, b"clobbered")
        src.unlink()
    with astore.open_sync(local_url) as store:
        for step in range(5):
            assert store.get(f"r/artifacts/ckpt-{step}.bin") == f"step {step}".encode() * 1000


def test_staged_copies_are_deleted_after_upload(tmp_path: Path, local_url: str) -> None:
    """Once uploads are done, the staging folder holds nothing; close() removes it."""
    staging = tmp_path / "staging"
    src = write(tmp_path / "f", b"x" * 10_000)
    up = ArtifactUploader(local_url, run_name="r", staging_dir=staging)
    for i in range(6):
        up.log_file(f"a{i}", src)
    up.wait()
    assert [list(d.iterdir()) for d in staging.iterdir()] == [[]]
    up.close()
    assert list(staging.iterdir()) == []


def test_existing_artifact_conflict_surfaces_in_wait(tmp_path: Path, local_url: str) -> None:
    """overwrite=False on an existing object raises AlreadyExistsError from wait()."""
    src = write(tmp_path / "f", b"new")
    with astore.open_sync(local_url) as store:
        store.put("r/artifacts/a.txt", b"old")
    with ArtifactUploader(local_url, run_name="r") as up:
        up.log_file("a.txt", src)
        with pytest.raises(astore.AlreadyExistsError):
            up.wait()
        up.log_file("a.txt", src, overwrite=True)
        up.wait()
    with astore.open_sync(local_url) as store:
        assert store.get("r/artifacts/a.txt") == b"new"


def test_several_failures_raise_an_exception_group(
    tmp_path: Path, local_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Several failed uploads are raised together by wait(), and each is logged."""
    src = write(tmp_path / "f", b"new")
    with astore.open_sync(local_url) as store:
        store.put("r/artifacts/a", b"old")
        store.put("r/artifacts/b", b"old")
    up = ArtifactUploader(local_url, run_name="r")
    up.log_file("a", src)
    up.log_file("b", src)
    up.log_file("c", src)
    with pytest.raises(ExceptionGroup) as info:
        up.close()
    assert len(info.value.exceptions) == 2
    assert sum("could not be uploaded" in r.message for r in caplog.records) == 2
    with astore.open_sync(local_url) as store:
        assert store.get("r/artifacts/c") == b"new"


def test_failure_on_context_exit(tmp_path: Path, local_url: str) -> None:
    """Leaving ``with`` waits for the uploads and raises a failure not yet reported."""
    src = write(tmp_path / "f", b"new")
    with astore.open_sync(local_url) as store:
        store.put("r/artifacts/a", b"old")
    with pytest.raises(astore.AlreadyExistsError), ArtifactUploader(local_url, run_name="r") as up:
        up.log_file("a", src)


def test_log_file_after_close_raises(tmp_path: Path, local_url: str) -> None:
    """log_file on a closed uploader raises ClosedError; close() is idempotent."""
    up = ArtifactUploader(local_url, run_name="r")
    up.close()
    up.close()
    with pytest.raises(astore.ClosedError):
        up.log_file("a", write(tmp_path / "f", b"x"))


def test_concurrency_is_bounded(tmp_path: Path, local_url: str) -> None:
    """No more than max_concurrent_uploads uploads are in flight at once."""
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    class CountingStore(astore.Store):
        def upload_in_background(  # type: ignore[override]
            self, source: Any, key: str, **kwargs: Any
        ) -> concurrent.futures.Future[astore.ObjectInfo]:
            nonlocal in_flight, peak
            with lock:
                in_flight += 1
                peak = max(peak, in_flight)
            future = super().upload_in_background(source, key, **kwargs)
            future.add_done_callback(lambda _: done())
            return future

    def done() -> None:
        nonlocal in_flight
        with lock:
            in_flight -= 1

    src = write(tmp_path / "f", b"y" * 100_000)
    with (
        CountingStore(local_url) as store,
        ArtifactUploader(store, run_name="r", max_concurrent_uploads=2) as up,
    ):
        for i in range(20):
            up.log_file(f"a{i}", src)
        up.wait()
        assert len(list(store.list("r/"))) == 20
    assert 1 <= peak <= 2


def test_uploads_from_worker_processes(tmp_path: Path, local_url: str) -> None:
    """use_processes=True uploads through spawned workers and reports their errors."""
    src = write(tmp_path / "f", b"from a worker")
    with astore.open_sync(local_url) as store:
        store.put("r/artifacts/taken", b"old")
    with ArtifactUploader(local_url, run_name="r", use_processes=True) as up:
        up.log_file("a", src)
        up.log_file("taken", src)
        with pytest.raises(astore.AlreadyExistsError):
            up.wait()
    with astore.open_sync(local_url) as store:
        assert store.get("r/artifacts/a") == b"from a worker"


def test_pending_artifacts_upload_at_interpreter_exit(tmp_path: Path, local_url: str) -> None:
    """An uploader never closed uploads its artifacts when the interpreter exits."""
    src = write(tmp_path / "f", b"z" * 50_000)
    code = f"""
        from astore.ml import ArtifactUploader
        up = ArtifactUploader({local_url!r}, run_name="r")
        for i in range(10):
            up.log_file(f"a{{i}}", {str(src)!r})
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    with astore.open_sync(local_url) as store:
        assert sorted(i.key for i in store.list()) == sorted(f"r/artifacts/a{i}" for i in range(10))


def test_training_loop_example_runs() -> None:
    """docs/examples/training_loop.py runs to completion and verifies its artifacts."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "training_loop.py"), "--steps", "20"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "all 40 artifacts arrived byte-identical" in result.stdout


@pytest.mark.slow
def test_log_file_stalls_for_a_copy_not_an_upload(tmp_path: Path) -> None:
    """log_file of a 256 MiB file takes well under half the time of the whole upload."""
    src = tmp_path / "big.bin"
    with src.open("wb") as f:
        block = os.urandom(1024 * 1024)
        for _ in range(256):
            f.write(block)
    # An upload measurably slower than a copy: small parts, each checksummed and stored.
    transfer = astore.TransferConfig(
        part_size=1 * astore.MiB, multipart_threshold=1 * astore.MiB, max_concurrency=2
    )
    with ArtifactUploader(
        str(tmp_path / "store"), run_name="r", transfer=transfer, staging_dir=tmp_path / "stage"
    ) as up:
        start = time.perf_counter()
        up.log_file("big.bin", src)
        call_time = time.perf_counter() - start
        up.wait()
        upload_time = time.perf_counter() - start
    assert call_time < 0.5 * upload_time, (call_time, upload_time)
