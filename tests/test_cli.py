"""The ``astore`` command line, run for real in a subprocess against local stores."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest

from astore._cli_support import parse_size


def astore(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m astore ARGS`` with pipes (never a TTY) and return the result."""
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run(
        [sys.executable, "-m", "astore", *map(str, args)],
        capture_output=True,
        cwd=cwd,
        env=env,
        timeout=60,
        check=False,
    )


def ok(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``astore`` and assert it succeeded."""
    done = astore(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr.decode()
    return done


def crc32c_b64(data: bytes) -> str:
    return base64.b64encode(crc32c.crc32c(data).to_bytes(4, "big")).decode()


def make_tree(root: Path, count: int) -> dict[str, bytes]:
    """Write ``count`` small files in nested folders; returns their contents by key."""
    files = {}
    for i in range(count):
        key = f"d{i % 3}/sub{i % 2}/f{i:03d}.bin" if i % 5 else f"top{i:03d}.bin"
        data = os.urandom(100 + i * 37)
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
        files[key] = data
    return files


@pytest.fixture
def populated(tmp_path: Path) -> Path:
    """A local store holding a.txt, dir/b.txt and dir/sub/c.txt."""
    src = tmp_path / "src"
    (src / "dir" / "sub").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"alpha\n")
    (src / "dir" / "b.txt").write_bytes(b"bravo!\n")
    (src / "dir" / "sub" / "c.txt").write_bytes(b"charlie\n")
    ok("cp", "-r", src, tmp_path / "store")
    return tmp_path / "store"


def test_cp_file_to_store_and_back_is_byte_identical(tmp_path: Path) -> None:
    """A 3 MiB file copied into a store and out again (verified download) is unchanged."""
    data = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "ckpt.bin").write_bytes(data)
    ok("cp", tmp_path / "ckpt.bin", tmp_path / "store" / "ckpt.bin")
    ok("cp", (tmp_path / "store" / "ckpt.bin").as_uri(), tmp_path / "out.bin")
    assert (tmp_path / "store" / "ckpt.bin").read_bytes() == data
    assert (tmp_path / "out.bin").read_bytes() == data


def test_cp_into_folder_keeps_name(tmp_path: Path) -> None:
    """A destination ending in "/" receives the source's file name."""
    (tmp_path / "a.bin").write_bytes(b"xyz")
    ok("cp", tmp_path / "a.bin", f"{tmp_path / 'store'}/")
    assert (tmp_path / "store" / "a.bin").read_bytes() == b"xyz"


def test_cp_store_to_store_streams_and_records_checksum(tmp_path: Path) -> None:
    """Copying between two file:// stores keeps bytes and records the same CRC32C."""
    data = os.urandom(200_000)
    (tmp_path / "a.bin").write_bytes(data)
    ok("cp", tmp_path / "a.bin", tmp_path / "one" / "a.bin")
    ok("cp", (tmp_path / "one" / "a.bin").as_uri(), (tmp_path / "two" / "b.bin").as_uri())
    assert (tmp_path / "two" / "b.bin").read_bytes() == data
    info = json.loads(ok("stat", "--json", tmp_path / "two" / "b.bin").stdout)
    assert info["checksums"]["crc32c"] == crc32c_b64(data)


def test_cp_recursive_copies_a_folder_and_back(tmp_path: Path) -> None:
    """cp -r of 50 nested files into a store and back out reproduces every file."""
    files = make_tree(tmp_path / "src", 50)
    ok("cp", "-r", "--concurrency", "4", tmp_path / "src", tmp_path / "store" / "data")
    listed = ok("ls", "-r", tmp_path / "store" / "data").stdout.decode().split()
    assert sorted(listed) == sorted(files)
    ok("cp", "-r", (tmp_path / "store" / "data").as_uri(), tmp_path / "out")
    for key, data in files.items():
        assert (tmp_path / "out" / key).read_bytes() == data


def test_ls_shows_one_level_with_prefixes(populated: Path) -> None:
    """ls without -r shows the objects of one level and the sub-prefixes as PRE lines."""
    lines = ok("ls", populated).stdout.decode().splitlines()
    assert lines == ["a.txt", "PRE dir/"]


def test_ls_long_shows_time_and_size(populated: Path) -> None:
    """ls -l prints modification time, size and name, and PRE for prefixes."""
    lines = ok("ls", "-l", populated / "dir").stdout.decode().splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +7 b\.txt", lines[0])
    assert lines[1].split() == ["PRE", "sub/"]


def test_ls_recursive_lists_every_key(populated: Path) -> None:
    """ls -r lists nested keys relative to the location, and no prefixes."""
    lines = ok("ls", "-r", populated).stdout.decode().splitlines()
    assert lines == ["a.txt", "dir/b.txt", "dir/sub/c.txt"]


def test_cat_writes_the_object_to_stdout(populated: Path) -> None:
    """cat streams the object's exact bytes to stdout and nothing to stderr."""
    done = ok("cat", (populated / "dir" / "b.txt").as_uri())
    assert done.stdout == b"bravo!\n"
    assert done.stderr == b""


def test_rm_deletes_one_object(populated: Path) -> None:
    """rm deletes one object, and a second rm of it fails with exit code 1."""
    ok("rm", populated / "a.txt")
    assert not (populated / "a.txt").exists()
    assert astore("rm", populated / "a.txt").returncode == 1


def test_rm_recursive_deletes_a_prefix(populated: Path) -> None:
    """rm -r deletes every object under a prefix and leaves the others."""
    ok("rm", "-r", "-q", populated / "dir")
    assert ok("ls", "-r", populated).stdout.decode().split() == ["a.txt"]


def test_stat_json_has_every_field(populated: Path) -> None:
    """stat --json reports size, etag, time, content type and the CRC32C of the bytes."""
    info = json.loads(ok("stat", "--json", populated / "dir" / "b.txt").stdout)
    assert set(info) >= {"url", "key", "size", "etag", "last_modified", "checksums"}
    assert info["size"] == 7
    assert info["url"].startswith("file://")
    assert info["url"].endswith("/dir/b.txt")
    assert info["checksums"]["crc32c"] == crc32c_b64(b"bravo!\n")
    assert "content_type" in info


def test_missing_object_is_one_line_and_exit_1(populated: Path) -> None:
    """A missing object exits 1 with one 'astore: error:' line and no traceback."""
    done = astore("cat", populated / "nope.txt")
    err = done.stderr.decode()
    assert done.returncode == 1
    assert err.startswith("astore: error: ")
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert "no such object" in err


def test_unsupported_scheme_is_a_configuration_error(tmp_path: Path) -> None:
    """An unknown URL scheme exits 1 with the configuration error's message."""
    done = astore("ls", "ftp://host/dir")
    assert done.returncode == 1
    assert done.stderr.decode().startswith("astore: error: unsupported store URL scheme 'ftp'")


def test_usage_error_exits_2(tmp_path: Path) -> None:
    """A wrong number of arguments is a usage error: exit 2, no traceback."""
    done = astore("cp", "only-one-argument")
    assert done.returncode == 2
    assert b"Usage:" in done.stderr
    assert b"Traceback" not in done.stderr


def test_part_size_option_accepts_units_and_rejects_garbage(tmp_path: Path) -> None:
    """--part-size 5MiB is accepted (group or command); --part-size 5x is a usage error."""
    data = os.urandom(11 * 1024 * 1024)
    (tmp_path / "big.bin").write_bytes(data)
    ok("--part-size", "5MiB", "cp", tmp_path / "big.bin", tmp_path / "s" / "big.bin")
    assert (tmp_path / "s" / "big.bin").read_bytes() == data
    bad = astore("cp", "--part-size", "5x", tmp_path / "big.bin", tmp_path / "s" / "x")
    assert bad.returncode == 2
    assert b"--part-size" in bad.stderr


def test_parse_size_units() -> None:
    """Sizes take plain bytes, binary units (K, M, MiB, G) and decimal units (MB)."""
    assert parse_size("1048576") == 1024 * 1024
    assert parse_size("8MiB") == parse_size("8M") == 8 * 1024 * 1024
    assert parse_size("512KiB") == 512 * 1024
    assert parse_size("5MB") == 5_000_000
    with pytest.raises(ValueError, match="not a size"):
        parse_size("five")


def test_no_progress_bar_when_stderr_is_not_a_tty(tmp_path: Path) -> None:
    """Without a TTY, cp prints only its one-line summary, and nothing at all with -q."""
    (tmp_path / "a.bin").write_bytes(os.urandom(1024 * 1024))
    done = ok("cp", tmp_path / "a.bin", tmp_path / "s" / "a.bin")
    err = done.stderr.decode()
    assert err.startswith("copied 1 file(s)")
    assert err.count("\n") == 1
    assert "\r" not in err
    assert "\x1b[" not in err
    assert "━" not in err
    quiet = ok("-q", "cp", tmp_path / "a.bin", tmp_path / "s" / "b.bin")
    assert quiet.stderr == b""
    assert quiet.stdout == b""


def test_progress_bar_on_a_tty(tmp_path: Path) -> None:
    """With stderr on a terminal, cp draws a progress bar that reaches the file's size."""
    pty = pytest.importorskip("pty")
    (tmp_path / "a.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "astore", "cp", tmp_path / "a.bin", tmp_path / "s" / "a.bin"],
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
    )
    os.close(slave)
    out = b""
    while True:  # drain as it runs, so the child never blocks on a full terminal buffer
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0
    text = out.decode(errors="replace")
    assert "3.0/3.0 MiB" in text
    assert "1/1 files" in text


def test_cp_recursive_of_a_folder_inside_a_store_copies_only_that_folder(
    populated: Path, tmp_path: Path
) -> None:
    """cp -r of a sub-folder of a local store copies that folder's files, nothing else."""
    ok("cp", "-r", populated / "dir", tmp_path / "out")
    copied = sorted(
        p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*")
    )
    assert [p for p in copied if not p.startswith(".astore")] == ["b.txt", "sub", "sub/c.txt"]
