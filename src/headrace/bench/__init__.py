"""bench layer: generated datasets, workloads and their runs."""

from headrace.bench._files_workload import (
    FILE_VARIANTS,
    FILE_WORKLOADS,
    FilesWorkload,
    generate_files,
    run_files_bench,
    s3_endpoint,
    upload_files,
)

__all__ = [
    "FILE_VARIANTS",
    "FILE_WORKLOADS",
    "FilesWorkload",
    "generate_files",
    "run_files_bench",
    "s3_endpoint",
    "upload_files",
]
