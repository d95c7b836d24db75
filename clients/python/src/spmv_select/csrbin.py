"""The service's binary CSR format (``application/vnd.spmv-select.csr``).

A 40-byte little-endian header (magic ``SPMVCSR\\0``, u16 version 1, u8 index
width 4 or 8, u8 value width 4 or 8, u32 flags with bit 0 meaning "an x section
follows", u64 nrows, ncols, nnz), then row_ptr, col_idx, values and optionally
x, all little-endian. See the server's ``crates/server/src/csr_binary.rs`` and
the ``BinaryCsr`` schema of its ``/openapi.json`` (``server --print-openapi``).
"""

from __future__ import annotations

import struct
from typing import Optional, Tuple

import numpy as np

CONTENT_TYPE = "application/vnd.spmv-select.csr"
MAGIC = b"SPMVCSR\x00"
VERSION = 1
FLAG_X = 1
_HEADER = struct.Struct("<8sHBBIQQQ")
HEADER_BYTES = _HEADER.size  # 40

_U32_MAX = np.iinfo(np.uint32).max


def index_width_for(indptr: np.ndarray, indices: np.ndarray) -> int:
    """4 when every index fits u32, else 8."""
    top = 0
    if indptr.size:
        top = max(top, int(indptr.max()))
    if indices.size:
        top = max(top, int(indices.max()))
    return 4 if top <= _U32_MAX else 8


def encode(
    shape: Tuple[int, int],
    indptr,
    indices,
    data,
    x=None,
    value_width: int = 8,
    index_width: Optional[int] = None,
) -> bytes:
    """Encodes CSR arrays (and x) as one body.

    ``value_width`` 4 sends float32 values (and x), 8 float64. The index width
    is the smallest that holds every index unless given. Negative indices are
    refused here, as they cannot be written unsigned.
    """
    nrows, ncols = (int(shape[0]), int(shape[1]))
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    data = np.asarray(data)
    if value_width not in (4, 8):
        raise ValueError(f"value width must be 4 or 8, not {value_width}")
    for name, arr in (("indptr", indptr), ("indices", indices)):
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must be a 1-D integer array")
        if arr.size and int(arr.min()) < 0:
            raise ValueError(f"{name} holds a negative index")
    if data.ndim != 1:
        raise ValueError("data must be a 1-D array")
    if np.iscomplexobj(data):
        raise ValueError("complex values are not supported by the service")
    iw = index_width or index_width_for(indptr, indices)
    if iw not in (4, 8):
        raise ValueError(f"index width must be 4 or 8, not {iw}")
    itype = np.dtype("<u4") if iw == 4 else np.dtype("<u8")
    vtype = np.dtype("<f4") if value_width == 4 else np.dtype("<f8")
    flags = 0
    parts = []
    if x is not None:
        x = np.asarray(x).ravel()
        flags |= FLAG_X
    header = _HEADER.pack(
        MAGIC, VERSION, iw, value_width, flags, nrows, ncols, int(indices.size)
    )
    parts.append(header)
    parts.append(indptr.astype(itype, copy=False).tobytes())
    parts.append(indices.astype(itype, copy=False).tobytes())
    parts.append(data.astype(vtype, copy=False).tobytes())
    if x is not None:
        parts.append(x.astype(vtype, copy=False).tobytes())
    return b"".join(parts)


def decode(body: bytes):
    """Decodes a body into ``(shape, indptr, indices, data, x or None)``.

    Used by the tests to check :func:`encode`; the service has its own reader.
    """
    if len(body) < HEADER_BYTES:
        raise ValueError("shorter than the header")
    magic, version, iw, vw, flags, nrows, ncols, nnz = _HEADER.unpack_from(body)
    if magic != MAGIC or version != VERSION:
        raise ValueError("not a version 1 binary CSR body")
    itype = np.dtype("<u4") if iw == 4 else np.dtype("<u8")
    vtype = np.dtype("<f4") if vw == 4 else np.dtype("<f8")
    at = HEADER_BYTES
    out = []
    for n, t in ((nrows + 1, itype), (nnz, itype), (nnz, vtype)):
        out.append(np.frombuffer(body, dtype=t, count=n, offset=at))
        at += n * t.itemsize
    x = None
    if flags & FLAG_X:
        x = np.frombuffer(body, dtype=vtype, count=ncols, offset=at)
        at += ncols * vtype.itemsize
    if at != len(body):
        raise ValueError("length differs from what the header declares")
    return (nrows, ncols), out[0], out[1], out[2], x
