"""Store URLs: which backend, which container, which prefix."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

from ._backend import Backend
from ._exceptions import ConfigurationError

__all__ = ["make_backend", "parse_url"]

_EXTRAS = {"s3": "s3", "gs": "gcs"}


def parse_url(url: str | Path) -> tuple[str, str, str]:
    """Split a store URL into ``(scheme, container, prefix)``.

    ``/data``, ``./data`` and ``file:///data`` are local stores rooted at that folder
    (container = the absolute path, prefix empty); ``memory://NAME/PREFIX``,
    ``s3://BUCKET/PREFIX`` and ``gs://BUCKET/PREFIX`` name a container and a key prefix.
    """
    if isinstance(url, Path):
        return "file", _local(url), ""
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"a store URL must be a non-empty str or Path, not {url!r}")
    if "\x00" in url:
        raise ConfigurationError("a store URL may not contain NUL")
    if "://" not in url:
        return "file", _local(Path(url)), ""
    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigurationError(f"file URLs must be local (file:///path), not {url!r}")
        path = urllib.parse.unquote(parsed.path)
        if not path:
            raise ConfigurationError(f"file URL {url!r} names no folder")
        return "file", _local(Path(path)), ""
    if scheme in ("memory", "s3", "gs"):
        if parsed.query or parsed.fragment:
            raise ConfigurationError(f"store URL {url!r} may not have a query or fragment")
        if "@" in parsed.netloc:
            raise ConfigurationError(
                f"{scheme}:// URLs may not carry credentials; pass them as options"
            )
        container = parsed.netloc
        if not container:
            raise ConfigurationError(f"store URL {url!r} names no bucket or store name")
        prefix = parsed.path.strip("/")
        return scheme, container, prefix
    raise ConfigurationError(
        f"unsupported store URL scheme {scheme!r} in {url!r}: use a path, file://, memory://, "
        "s3:// or gs://"
    )


def _local(path: Path) -> str:
    try:
        return str(path.expanduser().absolute())
    except RuntimeError as exc:  # "~nobody": no such user's home
        raise ConfigurationError(f"cannot resolve the folder {str(path)!r}: {exc}") from exc


def make_backend(
    scheme: str, container: str, options: dict[str, Any], *, max_connections: int
) -> Backend:
    """Instantiate the backend for ``scheme`` (nothing is connected until ``open()``)."""
    try:
        if scheme == "memory":
            from .backends.memory import MemoryBackend

            return MemoryBackend(container, **options)
        if scheme == "file":
            from .backends.local import LocalBackend

            return LocalBackend(container, **options)
        if scheme == "s3":
            from .backends.s3 import S3Backend

            return S3Backend(container, max_connections=max_connections, **options)
        if scheme == "gs":
            from .backends.gcs import GCSBackend

            return GCSBackend(container, max_connections=max_connections, **options)
    except ImportError as exc:
        extra = _EXTRAS.get(scheme, scheme)
        raise ConfigurationError(
            f"{scheme}:// stores need the {extra!r} extra: pip install 'astore[{extra}]' ({exc})"
        ) from exc
    except TypeError as exc:
        raise ConfigurationError(f"invalid option for a {scheme}:// store: {exc}") from exc
    raise ConfigurationError(f"unsupported store URL scheme {scheme!r}")
