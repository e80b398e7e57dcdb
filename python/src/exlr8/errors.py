"""The exceptions of the exlr8 package.

Every error the package raises is an ``exlr8.Error``. Lease errors are
``LeaseError`` subclasses, one per kind of failure, with the same meaning as
the C++ lessee's status codes (schema/lease/PROTOCOL.md); the REST client's
are ``ApiError``.
"""

from __future__ import annotations

from typing import Any, Optional


class Error(Exception):
    """The base of every exception this package raises."""


class LeaseError(Error):
    """A lease could not be opened, read or used."""


class LeaseNotFoundError(LeaseError):
    """No holder socket at the path, or (device memory) the holder's GPU is
    not among the devices this process sees."""


class LeasePermissionError(LeaseError):
    """The holder's socket may not be used by this process (EACCES, EPERM)."""


class LeaseUnavailableError(LeaseError):
    """The holder closed without a description (stopping, or full), sent none
    in time, or (device memory) no GPU or CUDA driver is usable here."""


class LeaseVersionError(LeaseError):
    """The holder speaks lease protocol v1 (CUDA IPC handles), not v2."""


class LeaseClosedError(LeaseError):
    """The lease was used after ``close()``."""


class LeaseIOError(LeaseError):
    """A socket or mapping call failed for another reason (errno in the message)."""


class LeaseCorruptionError(LeaseError):
    """The holder sent something the protocol refuses: framing, descriptors,
    a description or tables that do not parse, or parts that disagree."""


class DescriptionError(LeaseCorruptionError):
    """The description line breaks description-v2.schema.json or one of the
    parser's cross-field rules. ``field`` is its path ("memory.allocations[0].bytes"),
    ``value`` the offending value (``None`` when the field is missing)."""

    def __init__(self, message: str, field: str = "", value: Any = None):
        super().__init__(message)
        self.field = field
        self.value = value


class TablesError(LeaseCorruptionError):
    """The tables memfd or the image's header breaks IMAGE.md. ``table`` is
    the part ("image tables header", "tensors", "checks", "offset_table",
    "image header"), ``entry`` the entry's index (``None`` for a header),
    ``field`` the field's name and ``byte`` its offset in the parsed bytes."""

    def __init__(self, message: str, table: str = "", entry: Optional[int] = None,
                 field: str = "", byte: Optional[int] = None):
        super().__init__(message)
        self.table = table
        self.entry = entry
        self.field = field
        self.byte = byte


class CudaError(LeaseError):
    """A CUDA driver call failed (``call`` the function, ``code`` CUresult)."""

    def __init__(self, message: str, call: str = "", code: int = 0):
        super().__init__(message)
        self.call = call
        self.code = code


class ApiError(Error):
    """The exlr8d REST API answered with an error, or could not be reached
    (``status`` 0). ``status`` is the HTTP status, ``message`` the server's
    ``error`` text, ``body`` the decoded answer (dict) where there was one."""

    def __init__(self, status: int, message: str, method: str = "", path: str = "",
                 body: Any = None):
        super().__init__(f"{method} {path}: {status} {message}" if method else f"{status} {message}")
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        self.body = body
