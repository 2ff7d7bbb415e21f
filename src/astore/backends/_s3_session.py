"""The S3 backend's aiobotocore session and client configuration."""

from __future__ import annotations

import logging
import threading
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.loaders import create_loader

__all__ = ["client_config", "install_signature_filter", "new_session"]

# Pool size floor: small stores still get botocore's default of 10 connections.
_MIN_POOL = 10


def client_config(
    *,
    max_connections: int,
    connect_timeout: float,
    read_timeout: float,
    addressing_style: str | None,
) -> AioConfig:
    """The client configuration: astore's policies, not botocore's."""
    s3_options: dict[str, Any] = {
        # UNSIGNED-PAYLOAD even over plain HTTP: astore's CRC32C header (which is signed)
        # protects the body, and SHA-256 signing would hash every byte a second time.
        "payload_signing_enabled": False,
    }
    if addressing_style is not None:
        s3_options["addressing_style"] = addressing_style
    return AioConfig(
        # astore's RetryPolicy is the only retry layer.
        retries={"total_max_attempts": 1, "mode": "standard"},
        # astore sends its own checksums; botocore adds one only where S3 demands it, so
        # services that predate the x-amz-checksum trailers keep working.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        max_pool_connections=max(max_connections, _MIN_POOL),
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        s3=s3_options,
        # SigV4 for presigned URLs too (botocore's default for S3 presigning is SigV2).
        signature_version="s3v4",
        # Loads botocore's JSON models in a worker thread rather than on the loop.
        warm_up_loader_caches=True,
    )


def new_session(profile: str | None) -> AioSession:
    """A session with its configuration files read (blocking: call it in a worker thread)."""
    session = AioSession(profile=profile)
    session.get_scoped_config()
    session.register_component("data_loader", _shared_loader(session))
    return session


_LOADERS: dict[object, Any] = {}
_LOADERS_LOCK = threading.Lock()


def _shared_loader(session: AioSession) -> Any:
    """One botocore data loader per data path for the whole process.

    Each session otherwise parses S3's large JSON model and endpoint rules again, which
    costs a few hundred milliseconds per store opened; the loader caches what it parsed.
    """
    data_path = session.get_config_variable("data_path")
    with _LOADERS_LOCK:
        loader = _LOADERS.get(data_path)
        if loader is None:
            loader = _LOADERS[data_path] = create_loader(data_path)
        return loader


class _DropSignatures(logging.Filter):
    """Drops botocore's DEBUG lines that print each SigV4 signature and what it signs.

    A presigned URL's signature is a bearer credential until it expires; with DEBUG logging on,
    botocore would write it to the log next to the canonical request that names the key.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        # The canonical request and string to sign carry headers such as the session token.
        if str(record.msg).startswith(("Signature:", "CanonicalRequest:", "StringToSign:")):
            return False
        # Request dumps (botocore.endpoint) print every header, credentials included. Rendering
        # costs only when DEBUG is on: filters run after the level check.
        text = record.getMessage().lower()
        return "x-amz-security-token" not in text and "authorization" not in text


def install_signature_filter() -> None:
    """Keep botocore from logging SigV4 signatures (idempotent, process-wide)."""
    for name in ("botocore.auth", "botocore.endpoint", "aiobotocore.endpoint", "botocore.hooks"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropSignatures) for f in logger.filters):
            logger.addFilter(_DropSignatures())
