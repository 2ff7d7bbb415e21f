"""Object keys: one rule for every backend, checked before any I/O.

A key is a ``/``-separated path of UTF-8 segments, relative to the store. It may not be empty,
start or end with ``/``, contain an empty, ``.`` or ``..`` segment, a NUL or other control
character, or a backslash; a segment may not start with ``.astore`` (reserved for astore's own
bookkeeping) nor exceed 255 bytes; the whole key may not exceed 1024 bytes. Keys that pass are
safe as relative file paths on every supported platform and as object names on S3 and GCS.
"""

from __future__ import annotations

from ._exceptions import InvalidKeyError

__all__ = ["RESERVED_PREFIX", "check_key", "check_prefix", "join_key"]

RESERVED_PREFIX = ".astore"
MAX_KEY_BYTES = 1024
MAX_SEGMENT_BYTES = 255


def _reason(key: object, *, allow_trailing_slash: bool) -> str | None:
    if not isinstance(key, str):
        return f"a key must be a str, not {type(key).__name__}"
    if not key:
        return "a key may not be empty"
    try:
        encoded = key.encode("utf-8")
    except UnicodeEncodeError:
        return "a key must be valid UTF-8 (no lone surrogates)"
    if len(encoded) > MAX_KEY_BYTES:
        return f"a key may not exceed {MAX_KEY_BYTES} bytes in UTF-8"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        return "a key may not contain NUL or other control characters"
    if "\\" in key:
        return "a key may not contain a backslash"
    if key.startswith("/"):
        return "a key may not start with '/' (keys are relative to the store)"
    body = key[:-1] if allow_trailing_slash and key.endswith("/") else key
    if body.endswith("/"):
        return "a key may not end with '/'"
    for segment in body.split("/"):
        if segment == "":
            return "a key may not contain an empty segment ('//')"
        if segment in (".", ".."):
            return f"a key may not contain a {segment!r} segment"
        if segment.startswith(RESERVED_PREFIX):
            return f"key segments starting with {RESERVED_PREFIX!r} are reserved"
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            return f"a key segment may not exceed {MAX_SEGMENT_BYTES} bytes"
    return None


def check_key(key: object, *, store: str | None = None, operation: str | None = None) -> str:
    """Return ``key`` if it is valid, else raise :class:`~astore.InvalidKeyError`."""
    reason = _reason(key, allow_trailing_slash=False)
    if reason is not None:
        raise InvalidKeyError(
            f"invalid key {key!r}: {reason}", key=None, store=store, operation=operation
        )
    assert isinstance(key, str)
    return key


def check_prefix(prefix: object, *, store: str | None = None, operation: str | None = None) -> str:
    """A listing prefix: ``""``, or a key that may end with ``/`` or with a partial segment."""
    if prefix == "":
        return ""
    reason = _reason(prefix, allow_trailing_slash=True)
    if reason is not None and not (isinstance(prefix, str) and _partial_ok(prefix)):
        raise InvalidKeyError(
            f"invalid prefix {prefix!r}: {reason}", key=None, store=store, operation=operation
        )
    assert isinstance(prefix, str)
    return prefix


def _partial_ok(prefix: str) -> bool:
    # "runs/7/ck" is a fine prefix; so is "runs/7/." (a partial segment), as long as the
    # complete segments before the last one are valid keys.
    head, _, last = prefix.rpartition("/")
    if head and _reason(head, allow_trailing_slash=False) is not None:
        return False
    return (
        "\\" not in last and all(ord(c) >= 0x20 and ord(c) != 0x7F for c in last) and last != ".."
    )


def join_key(prefix: str, key: str) -> str:
    """``prefix/key`` with exactly one ``/`` between (``prefix`` may be empty)."""
    if not prefix:
        return key
    return f"{prefix.rstrip('/')}/{key}"
