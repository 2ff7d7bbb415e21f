"""Backends: thin adapters from the backend protocol to each storage service.

``memory`` and ``local`` need nothing beyond astore's core; ``s3`` needs ``astore[s3]`` and
``gcs`` needs ``astore[gcs]``. Backends are chosen by :func:`astore.open` from the URL scheme.
"""
