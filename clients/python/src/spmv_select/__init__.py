"""Python client of the spmv-select service.

>>> from spmv_select import Client
>>> c = Client("http://localhost:8080")
>>> mid = c.upload(A)                # any scipy.sparse matrix, binary CSR on the wire
>>> y = c.spmv(mid, x)               # numpy array, binary x and y
>>> op = c.operator(mid)             # scipy.sparse.linalg.LinearOperator for cg, gmres, eigsh
>>> r = c.solve(mid, b)              # CG on the device: r.x, r.iterations, r.residuals
"""

from .client import (
    Client,
    ServiceError,
    SolveResult,
    SpmvSelectError,
    SpmvTimings,
    TransportError,
    as_csr_arrays,
)
from . import csrbin

__all__ = [
    "Client",
    "ServiceError",
    "SolveResult",
    "SpmvSelectError",
    "SpmvTimings",
    "TransportError",
    "as_csr_arrays",
    "csrbin",
]
__version__ = "0.1.0"
