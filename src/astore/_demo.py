"""``make demo``: the ``astore`` command line on an embedded local store, no server needed.

Generates a 256 MiB "checkpoint" and a folder of 1,000 small files under ``.demo/`` in the
current folder, copies them into a local store and back out with the real ``astore``
command (in subprocesses), then checks every byte and every CRC32C. Exits 1 on any mismatch.

Run it with ``python -m astore._demo``.
"""

from __future__ import annotations

import base64
import filecmp
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import crc32c

__all__ = ["main"]

WORK = Path(".demo")
CHECKPOINT_MIB = 256
SMALL_FILES = 1000
MiB = 1024 * 1024


def _make_checkpoint(path: Path, mib: int) -> None:
    """Incompressible-looking data, fast: one random MiB, made unique per MiB by a header."""
    block = bytearray(os.urandom(MiB))
    with path.open("wb") as f:
        for i in range(mib):
            block[:16] = i.to_bytes(8, "big") + os.urandom(8)
            f.write(block)


def _make_small_files(folder: Path, count: int) -> int:
    rng = random.Random(7)  # the same sizes every run, so runs compare
    total = 0
    for i in range(count):
        sub = folder / f"shard-{i % 10}"
        sub.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(rng.randint(1024, 64 * 1024))
        (sub / f"sample-{i:04d}.bin").write_bytes(data)
        total += len(data)
    return total


def _astore(*args: str | Path) -> tuple[float, str]:
    """Run the real ``astore`` command; ``(seconds, stdout)``, or exit on failure."""
    argv = [str(a) for a in args]
    shown = shlex.join(argv[:5]) + (f" ... ({len(argv) - 5} more)" if len(argv) > 5 else "")
    print(f"  $ astore {shown}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "astore", *argv], capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr, end="")
        raise SystemExit(f"demo: 'astore {argv[0]}' failed with exit code {done.returncode}")
    return elapsed, done.stdout


def _crc32c_b64(path: Path) -> str:
    value = 0
    with path.open("rb") as f:
        while chunk := f.read(8 * MiB):
            value = crc32c.crc32c(chunk, value)
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def _rate(nbytes: int, seconds: float) -> str:
    return f"{nbytes / MiB / seconds:8.1f} MiB/s"


def main() -> int:
    """Run the demo; 0 if every byte and checksum matched, 1 otherwise."""
    shutil.rmtree(WORK, ignore_errors=True)
    src, store, out = WORK / "src", WORK / "store", WORK / "out"
    checkpoint, small = src / "checkpoint.bin", src / "small"
    src.mkdir(parents=True)

    print(f"Generating a {CHECKPOINT_MIB} MiB checkpoint and {SMALL_FILES:,} small files ...")
    started = time.perf_counter()
    _make_checkpoint(checkpoint, CHECKPOINT_MIB)
    small_bytes = _make_small_files(small, SMALL_FILES)
    ckpt_bytes = checkpoint.stat().st_size
    print(f"  done in {time.perf_counter() - started:.1f} s\n")

    print("Uploading into a local store:")
    up_ckpt, _ = _astore("cp", "-q", checkpoint, store / "checkpoint.bin")
    up_small, _ = _astore("cp", "-q", "-r", small, store / "small")
    _, listing = _astore("ls", "-r", store)
    listed = listing.splitlines()
    print(f"  ls -r: {len(listed):,} objects, e.g. {listed[0]}, {listed[-1]}\n")

    print("Downloading back out (file:// URLs read through the store, verified):")
    down_ckpt, _ = _astore(
        "cp", "-q", (store / "checkpoint.bin").resolve().as_uri(), out / "checkpoint.bin"
    )
    down_small, _ = _astore("cp", "-q", "-r", (store / "small").resolve().as_uri(), out / "small")
    print()

    print("Verifying every byte and every CRC32C ...")
    failures: list[str] = []
    originals = [checkpoint, *sorted(p for p in small.rglob("*") if p.is_file())]
    stored = [store / p.relative_to(src) for p in originals]
    for original in originals:
        copy = out / original.relative_to(src)
        if not copy.is_file() or not filecmp.cmp(original, copy, shallow=False):
            failures.append(f"bytes differ: {copy}")
    _, stats = _astore("stat", "--json", *stored)
    recorded = [json.loads(line) for line in stats.splitlines()]
    for original, info in zip(originals, recorded, strict=True):
        expected = _crc32c_b64(original)
        if info["checksums"].get("crc32c") != expected:
            failures.append(f"crc32c differs: {info['url']} {info['checksums']} != {expected}")
    if len(listed) != len(originals):
        failures.append(f"ls -r listed {len(listed)} objects, expected {len(originals)}")

    objects, total = len(originals), ckpt_bytes + small_bytes
    print(f"\n  objects: {objects:,}   bytes: {total:,} ({total / MiB:.1f} MiB)")
    print(f"  {'':22}{'upload':>22}{'download':>22}")
    print(
        f"  {'checkpoint (1 file)':22}{up_ckpt:7.2f} s {_rate(ckpt_bytes, up_ckpt)}"
        f"{down_ckpt:7.2f} s {_rate(ckpt_bytes, down_ckpt)}"
    )
    print(
        f"  {f'{SMALL_FILES:,} small files':22}{up_small:7.2f} s {_rate(small_bytes, up_small)}"
        f"{down_small:7.2f} s {_rate(small_bytes, down_small)}"
    )
    up, down = up_ckpt + up_small, down_ckpt + down_small
    print(f"  {'total':22}{up:7.2f} s {_rate(total, up)}{down:7.2f} s {_rate(total, down)}")
    print("  (times include starting the astore command)\n")
    if failures:
        for failure in failures[:20]:
            print(f"MISMATCH {failure}", file=sys.stderr)
        print(f"demo FAILED: {len(failures)} mismatch(es)", file=sys.stderr)
        return 1
    print(f"OK: {objects:,} objects, every byte and every CRC32C verified.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
