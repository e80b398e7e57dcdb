"""exlr8: a serving process's side of exlr8d, in pure Python.

- ``exlr8.Lease(socket_path)``: take a lease (protocol v2) on a rank image a
  holder (``exlr8d-stage --hold``) keeps in host or device memory; tensors
  by name or by (layer, expert, projection, half), zero-copy as memoryview,
  numpy, torch or ``__cuda_array_interface__`` arrays; the proof of contents;
  lets go in the right order.
- ``exlr8.Client(socket_or_url)``: the REST API of ``exlr8d serve``.

Only the standard library is needed at import; numpy and torch are used
when present and asked for.
"""

from .client import Client
from .description import Allocation, Description, GpuRef
from .errors import (ApiError, CudaError, DescriptionError, Error, LeaseClosedError, LeaseCorruptionError,
                     LeaseError, LeaseIOError, LeaseNotFoundError, LeasePermissionError, LeaseUnavailableError,
                     LeaseVersionError, TablesError)
from .lease import Lease, Release
from .tables import ABSENT, Check, ImageHeader, TensorInfo, parse_image_header, parse_tables

__version__ = "0.1.0"

__all__ = [
    "ABSENT", "Allocation", "ApiError", "Check", "Client", "CudaError", "Description", "DescriptionError", "Error",
    "GpuRef", "ImageHeader", "Lease", "LeaseClosedError", "LeaseCorruptionError", "LeaseError", "LeaseIOError",
    "LeaseNotFoundError", "LeasePermissionError", "LeaseUnavailableError", "LeaseVersionError", "Release",
    "TablesError", "TensorInfo", "parse_image_header", "parse_tables",
]
