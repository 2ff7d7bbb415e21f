"""Shared fixtures: the conformance ``store`` fixture over every backend, and test policies.

Each backend contributes a ``<name>_store_args`` fixture returning ``(url, options)`` for a
fresh, empty container; the S3 and GCS ones start their server processes once per session
(see ``_fixtures_s3.py`` and ``_fixtures_gcs.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import astore

pytest_plugins = ["_fixtures_s3", "_fixtures_gcs"]

BACKENDS = ["memory", "local", "s3", "gcs"]

# Backoff shortened in tests (never the assertions): a transient fault costs milliseconds.
FAST_RETRY = astore.RetryPolicy(
    max_attempts=5, initial_backoff=0.001, max_backoff=0.02, deadline=60
)

_counter = itertools.count()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def memory_store_args() -> tuple[str, dict[str, Any]]:
    return f"memory://test-{next(_counter)}", {}


@pytest.fixture
def local_store_args(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    root = tmp_path / "store"
    return str(root), {}


@pytest.fixture(
    params=[
        pytest.param(name, marks=[getattr(pytest.mark, name)] if name in ("s3", "gcs") else [])
        for name in BACKENDS
    ]
)
def backend_name(request: pytest.FixtureRequest) -> str:
    """The backend under test; S3 and GCS cases carry the ``s3``/``gcs`` marks."""
    name: str = request.param
    return name


@pytest.fixture
def store_args(backend_name: str, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """``(url, options)`` of a fresh empty store on each backend in turn."""
    args: tuple[str, dict[str, Any]] = request.getfixturevalue(f"{backend_name}_store_args")
    return args


@pytest.fixture
async def store(store_args: tuple[str, dict[str, Any]]) -> AsyncIterator[astore.AsyncStore]:
    """An open store on each backend in turn, with small parts so multipart paths run."""
    url, options = store_args
    options = {
        "transfer": astore.TransferConfig(
            part_size=5 * astore.MiB, multipart_threshold=6 * astore.MiB, max_concurrency=4
        ),
        "retry": FAST_RETRY,
        **options,
    }
    async with astore.open(url, **options) as s:
        yield s
