"""astore for machine-learning workflows: background artifact uploads from training loops.

Example:
    >>> from astore.ml import ArtifactUploader
    >>> with ArtifactUploader("s3://bucket/runs", run_name="exp-7") as uploader:
    ...     uploader.log_file("metrics.json", "metrics.json")
"""

from ._artifacts import ArtifactUploader, distributed_info

__all__ = ["ArtifactUploader", "distributed_info"]
