"""The HTTP client: upload, multiply, predict, delete, and a LinearOperator
whose products run on the service.

Matrices travel in the binary CSR format (:mod:`spmv_select.csrbin`), x and y as
little-endian binary (``application/octet-stream``), so nothing is formatted as
text on either side; x is sent from the array's own memory and y read straight
into a new array, with no bytes object in between. HTTP is the standard library's ``http.client`` over one
kept-alive connection: per product it costs about 2 ms less than ``requests``
on a 1.6 MB x and y (measured with ``bench_cg.py``), which matters when every
iteration of a solver is one request.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from . import csrbin

_PRECISIONS = ("f32", "f64")
_DTYPE = {"f32": np.dtype("<f4"), "f64": np.dtype("<f8")}


class SpmvSelectError(Exception):
    """Base class of every error this package raises."""


class ServiceError(SpmvSelectError):
    """The service answered with an error status.

    ``status`` is the HTTP status, ``code`` the service's machine-readable code
    (``x_length``, ``matrix_not_found``, ``invalid_binary_csr``, ...) and
    ``message`` its explanation; ``retry_after`` is set on 503s that carry it.
    """

    def __init__(self, status: int, code: str, message: str, retry_after=None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class TransportError(SpmvSelectError):
    """The service could not be reached or did not answer in time."""


@dataclass
class SpmvTimings:
    """Times of one binary /spmv call, in milliseconds.

    ``kernel``, ``upload_x``, ``download_y`` and ``device`` come from the
    device's profiling (headers ``x-kernel-ms``, ``x-upload-x-ms``,
    ``x-download-y-ms``, ``x-device-ms``), ``server`` is the server's time for
    the whole request (``x-server-ms``) and ``round_trip`` the client's, from
    sending the request to holding y. ``in_place`` (header ``x-in-place``)
    says whether the kernels read x and wrote y where the service received
    and answered them (shared host memory on a CPU device, for x and y of
    1 MiB or more together): no copy, ``upload_x`` and ``download_y`` are then
    the unmap and the map.
    """

    kernel: float
    upload_x: float
    download_y: float
    device: float
    server: float
    round_trip: float
    in_place: bool = False


@dataclass
class SolveResult:
    """The answer of :meth:`Client.solve`."""

    x: np.ndarray
    iterations: int
    #: ||b - A x|| / ||b|| before the first iteration and after each.
    residuals: List[float]
    #: ``converged``, ``maxiter`` or ``deadline``.
    stop: str
    converged: bool
    #: Time of the solve on the device worker, ms.
    device_ms: float


def _precision(p: Optional[str]) -> Optional[str]:
    if p is None:
        return None
    q = str(p).lower()
    if q in ("float32", "single"):
        q = "f32"
    if q in ("float64", "double"):
        q = "f64"
    if q not in _PRECISIONS:
        raise ValueError(f"precision must be 'f32' or 'f64', not {p!r}")
    return q


MatrixLike = Union[sp.spmatrix, "sp.sparray", Tuple]


def _calls(params: dict, expected_calls: Optional[int]) -> dict:
    """Adds ``expected_calls`` to query parameters (an integer >= 1, checked by the service)."""
    if expected_calls is not None:
        params["expected_calls"] = str(int(expected_calls))
    return params


def as_csr_arrays(A) -> Tuple[Tuple[int, int], np.ndarray, np.ndarray, np.ndarray]:
    """``(shape, indptr, indices, data)`` of a scipy.sparse matrix or array,
    or of an ``(indptr, indices, data[, shape])`` triple (without a shape,
    ``len(indptr) - 1`` rows and ``max(indices) + 1`` columns)."""
    if sp.issparse(A):
        m = A.tocsr()
        return m.shape, m.indptr, m.indices, m.data
    if isinstance(A, (tuple, list)) and len(A) in (3, 4):
        indptr, indices, data = (np.asarray(a) for a in A[:3])
        if len(A) == 4:
            shape = (int(A[3][0]), int(A[3][1]))
        else:
            ncols = int(indices.max()) + 1 if indices.size else 0
            shape = (max(len(indptr) - 1, 0), ncols)
        return shape, indptr, indices, data
    raise TypeError(
        "a matrix must be a scipy.sparse matrix or array, or an "
        f"(indptr, indices, data[, shape]) tuple, not {type(A).__name__}"
    )


def _value_width(data: np.ndarray) -> int:
    """float32 data travels as 4-byte values (exact), anything else as 8."""
    return 4 if data.dtype == np.float32 else 8


def _is_symmetric(shape, indptr, indices, data) -> bool:
    if shape[0] != shape[1]:
        return False
    m = sp.csr_matrix((data, indices, indptr), shape=shape)
    d = (m - m.T).tocsr()
    d.eliminate_zeros()
    return d.nnz == 0


@dataclass
class _Reply:
    status: int
    reason: str
    headers: Dict[str, str]  # names in lower case
    body: bytes
    # What ``read_into`` made of a successful body (``body`` is then empty).
    value: object = None

    def json(self):
        return json.loads(self.body)


def _read_exactly(r: http.client.HTTPResponse, out: memoryview) -> None:
    """Fills ``out`` from the response body (``readinto`` may return less
    than asked for)."""
    got = 0
    while got < len(out):
        n = r.readinto(out[got:])
        if not n:
            raise http.client.IncompleteRead(bytes(0), len(out) - got)
        got += n


def _binary_y(dtype: np.dtype):
    """A ``read_into`` for a binary y: the body is read straight into a new
    array of its length, with no bytes object and no copy in between."""

    def read(r: http.client.HTTPResponse, headers: Dict[str, str]):
        dt = _DTYPE.get(headers.get("x-precision", ""), dtype)
        length = headers.get("content-length")
        if length is None or not length.isdigit() or int(length) % dt.itemsize:
            return None
        y = np.empty(int(length) // dt.itemsize, dtype=dt)
        _read_exactly(r, memoryview(y).cast("B"))
        return y

    return read


class _Http:
    """One kept-alive HTTP/1.1 connection, reopened when the server has closed
    it (an idle keep-alive ends after the server's header timeout)."""

    _STALE = (
        http.client.RemoteDisconnected,
        ConnectionResetError,
        BrokenPipeError,
        ConnectionAbortedError,
    )

    def __init__(self, url: str, timeout: float, headers: Dict[str, str]):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"the service URL must be http://host[:port][/prefix], not {url!r}")
        self.url = url
        self._https = u.scheme == "https"
        self._host, self._port = u.hostname, u.port
        self._prefix = u.path.rstrip("/")
        self._timeout = timeout
        self._headers = headers
        self._conn = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(
        self, method, path, params=None, body=None, headers=None, read_into=None
    ) -> _Reply:
        """One request. ``read_into(response, headers)``, when given, reads a
        successful (2xx) body itself and returns its value, or ``None`` to
        leave the body to be read as bytes."""
        target = self._prefix + path
        if params:
            target += "?" + urllib.parse.urlencode(params)
        h = dict(self._headers)
        h.update(headers or {})
        for attempt in (0, 1):
            fresh = self._conn is None
            if fresh:
                cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                self._conn = cls(self._host, self._port, timeout=self._timeout)
            try:
                self._conn.request(method, target, body=body, headers=h)
                r = self._conn.getresponse()
                names = {k.lower(): v for k, v in r.getheaders()}
                value = None
                if read_into is not None and 200 <= r.status < 300:
                    value = read_into(r, names)
                data = r.read() if value is None else b""
            except self._STALE as e:
                self.close()
                if fresh or attempt == 1:
                    raise TransportError(f"{method} {self.url}{path}: {e!r}") from e
                continue
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise TransportError(f"{method} {self.url}{path}: {e!r}") from e
            if r.will_close:
                self.close()
            return _Reply(r.status, r.reason, names, data, value)
        raise AssertionError("unreachable")


class Client:
    """A client of one spmv-select service.

    ``url`` is the service's base address (``http://localhost:8080``),
    ``api_key`` is sent as ``Authorization: Bearer KEY`` when given, and
    ``timeout`` (seconds) bounds each request.
    """

    def __init__(self, url: str, api_key: Optional[str] = None, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        headers = {"User-Agent": "spmv-select-python"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = _Http(self.url, timeout, headers)
        # Ids uploaded by this client whose matrix is symmetric, so that
        # operator(id) can give rmatvec.
        self._symmetric: Dict[str, bool] = {}
        self._shapes: Dict[str, Tuple[int, int]] = {}

    # -- plumbing ---------------------------------------------------------

    def _request(
        self, method: str, path: str, params=None, data=None, headers=None, read_into=None
    ) -> _Reply:
        r = self._http.request(
            method, path, params=params, body=data, headers=headers, read_into=read_into
        )
        if r.status >= 400:
            raise _service_error(r)
        return r

    def close(self) -> None:
        """Closes the connection kept open."""
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the API ----------------------------------------------------------

    def healthz(self) -> dict:
        """``GET /healthz``."""
        return self._request("GET", "/healthz").json()

    def device(self) -> dict:
        """``GET /device``: the service's device, memory and copy bandwidth."""
        return self._request("GET", "/device").json()

    def upload(
        self, A: MatrixLike, precision: Optional[str] = None, expected_calls: Optional[int] = None
    ) -> str:
        """Uploads a matrix (``POST /matrices``, binary CSR) and returns its id.

        ``precision`` (``"f32"`` or ``"f64"``, the service's default f64 when
        ``None``) is the precision the service prepares the matrix in; float32
        data is sent as 4-byte values, any other as 8-byte values.
        ``expected_calls`` is how often it will be multiplied (the service's
        default for uploads when ``None``): the plan weighs analysis against it.
        """
        info = self.upload_info(A, precision, expected_calls)
        return info["id"]

    def upload_info(
        self, A: MatrixLike, precision: Optional[str] = None, expected_calls: Optional[int] = None
    ) -> dict:
        """As :meth:`upload`, returning the service's whole answer (id, plan,
        model, planning, bytes, timings)."""
        shape, indptr, indices, data = arrays = as_csr_arrays(A)
        info = self._post_csr("/matrices", arrays, precision, expected_calls, {})
        self._symmetric[info["id"]] = _is_symmetric(shape, indptr, indices, data)
        self._shapes[info["id"]] = (int(shape[0]), int(shape[1]))
        return info

    def predict(
        self,
        A: MatrixLike,
        precision: Optional[str] = None,
        explain: bool = False,
        expected_calls: Optional[int] = None,
    ) -> dict:
        """The plan the service would use for a matrix (``POST /predict``):
        features, scheme, kernels per bin, the model, how it was chosen for
        ``expected_calls`` multiplications (``planning``; the service's default
        for uploads when ``None``) and, with ``explain``, the decision paths."""
        extra = {"explain": "true"} if explain else {}
        return self._post_csr("/predict", as_csr_arrays(A), precision, expected_calls, extra)

    def _post_csr(
        self,
        path: str,
        arrays: tuple,
        precision: Optional[str],
        expected_calls: Optional[int],
        extra: dict,
    ) -> dict:
        """POSTs a matrix (the arrays of :func:`as_csr_arrays`) as binary CSR
        to ``path`` with the planning parameters (``precision``,
        ``expected_calls``) and ``extra`` in the query; the JSON answer."""
        shape, indptr, indices, data = arrays
        body = csrbin.encode(shape, indptr, indices, data, value_width=_value_width(data))
        params = _calls({}, expected_calls)
        p = _precision(precision)
        if p:
            params["precision"] = p
        params.update(extra)
        return self._request(
            "POST",
            path,
            data=body,
            params=params,
            headers={"Content-Type": csrbin.CONTENT_TYPE},
        ).json()

    def matrix(self, matrix_id: str) -> dict:
        """``GET /matrices/{id}``: dimensions, features, what is on the device."""
        return self._request("GET", f"/matrices/{matrix_id}").json()

    def delete(self, matrix_id: str) -> None:
        """``DELETE /matrices/{id}``."""
        self._request("DELETE", f"/matrices/{matrix_id}")
        self._symmetric.pop(matrix_id, None)
        self._shapes.pop(matrix_id, None)

    def spmv(
        self, matrix_id: str, x, precision: Optional[str] = None, transpose: bool = False
    ) -> np.ndarray:
        """y = A x on the service for an uploaded matrix, as a numpy array of
        the precision's dtype (float64 unless ``precision="f32"``); y = A^T x
        with ``transpose=True`` (the service builds A^T once and keeps it)."""
        return self.spmv_timed(matrix_id, x, precision, transpose)[0]

    def spmv_timed(
        self, matrix_id: str, x, precision: Optional[str] = None, transpose: bool = False
    ) -> Tuple[np.ndarray, SpmvTimings]:
        """As :meth:`spmv`, with the times of the call (:class:`SpmvTimings`)."""
        p = _precision(precision) or "f64"
        x = np.asarray(x)
        if np.iscomplexobj(x):
            raise ValueError("complex x is not supported by the service")
        # No copy when x is already contiguous in the precision's dtype: the
        # socket sends straight from the array's memory.
        x = np.ascontiguousarray(x.ravel(), dtype=_DTYPE[p])
        t0 = time.perf_counter()
        r = self._request(
            "POST",
            "/spmv",
            params={"matrix_id": matrix_id, "precision": p, **({"transpose": "true"} if transpose else {})},
            data=memoryview(x).cast("B"),
            headers={
                "Content-Type": "application/octet-stream",
                "Accept": "application/octet-stream",
            },
            read_into=_binary_y(_DTYPE[p]),
        )
        y = r.value
        if y is None:
            y = np.frombuffer(r.body, dtype=_DTYPE[r.headers.get("x-precision", p)]).copy()
        rt = (time.perf_counter() - t0) * 1e3
        h = r.headers

        def f(name):
            try:
                return float(h.get(name, "nan"))
            except ValueError:
                return float("nan")

        t = SpmvTimings(
            kernel=f("x-kernel-ms"),
            upload_x=f("x-upload-x-ms"),
            download_y=f("x-download-y-ms"),
            device=f("x-device-ms"),
            server=f("x-server-ms"),
            round_trip=rt,
            in_place=h.get("x-in-place") == "true",
        )
        return y, t

    def spmm(
        self, matrix_id: str, X, precision: Optional[str] = None, transpose: bool = False
    ) -> np.ndarray:
        """Y = A X for the k columns of X in one request (``POST
        /matrices/{id}/spmm``: one SpMM on the device, each matrix entry read
        once per 64 columns); Y = A^T X with ``transpose=True``. Returns an
        array of the precision's dtype (float64 unless ``precision="f32"``)
        with one column per column of X."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X[:, None]
        body = {
            "x": [[float(v) for v in X[:, j]] for j in range(X.shape[1])],
            "precision": _precision(precision) or "f64",
            "transpose": bool(transpose),
        }
        v = self._post_json(f"/matrices/{matrix_id}/spmm", body)
        return np.asarray(v["y"], dtype=_DTYPE[body["precision"]]).T

    def _post_json(self, path: str, body: dict) -> dict:
        """POSTs ``body`` as JSON and returns the JSON answer."""
        return self._request(
            "POST", path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        ).json()

    def solve(
        self,
        matrix_id: str,
        b,
        x0=None,
        method: str = "cg",
        tol: float = 1e-8,
        maxiter: Optional[int] = None,
        preconditioner: str = "none",
        precision: Optional[str] = None,
    ) -> "SolveResult":
        """Solves A x = b on the service's device (``POST
        /matrices/{id}/solve``): the vectors stay on the device and every
        product runs the matrix's plan. ``method="cg"`` (A symmetric positive
        definite), ``preconditioner="none"`` or ``"jacobi"``. A breakdown or a
        bad request raises :class:`ServiceError` with the service's message."""
        body = {
            "method": method,
            "b": [float(v) for v in np.ravel(np.asarray(b, dtype=np.float64))],
            "tol": float(tol),
            "preconditioner": preconditioner,
            "precision": _precision(precision) or "f64",
        }
        if x0 is not None:
            body["x0"] = [float(v) for v in np.ravel(np.asarray(x0, dtype=np.float64))]
        if maxiter is not None:
            body["maxiter"] = int(maxiter)
        v = self._post_json(f"/matrices/{matrix_id}/solve", body)
        return SolveResult(
            x=np.asarray(v["x"], dtype=np.float64),
            iterations=int(v["iterations"]),
            residuals=[float(r) for r in v["residuals"]],
            stop=v["stop"],
            converged=bool(v["converged"]),
            device_ms=float(v["device_ms"]),
        )

    def operator(
        self,
        matrix_id: str,
        precision: Optional[str] = None,
        symmetric: Optional[bool] = None,
    ) -> LinearOperator:
        """A ``scipy.sparse.linalg.LinearOperator`` whose ``matvec`` is
        :meth:`spmv` on the service, for ``cg``, ``gmres``, ``eigsh`` ...

        ``rmatvec`` (A^T x) equals ``matvec`` when the matrix is symmetric
        (known for matrices uploaded by this client, or say so with
        ``symmetric=True``); otherwise it is the service's transposed product
        (``/spmv?transpose=true``).
        """
        p = _precision(precision) or "f64"
        shape = self._shapes.get(matrix_id)
        if shape is None:
            m = self.matrix(matrix_id)["matrix"]
            shape = (int(m["nrows"]), int(m["ncols"]))
        if symmetric is None:
            symmetric = self._symmetric.get(matrix_id, False)
        return _ServiceOperator(self, matrix_id, p, shape, bool(symmetric))


class _ServiceOperator(LinearOperator):
    """A LinearOperator whose products run on the service."""

    def __init__(self, client: Client, matrix_id: str, precision: str, shape, symmetric: bool):
        super().__init__(dtype=np.float32 if precision == "f32" else np.float64, shape=shape)
        self.client = client
        self.matrix_id = matrix_id
        self.precision = precision
        self.symmetric = symmetric
        self.calls = 0

    def _matvec(self, x):
        self.calls += 1
        return self.client.spmv(self.matrix_id, np.ravel(x), self.precision)

    def _rmatvec(self, x):
        if self.symmetric:
            return self._matvec(x)
        self.calls += 1
        return self.client.spmv(self.matrix_id, np.ravel(x), self.precision, transpose=True)

    def _matmat(self, X):
        self.calls += 1
        return self.client.spmm(self.matrix_id, X, self.precision)

    def _rmatmat(self, X):
        self.calls += 1
        return self.client.spmm(self.matrix_id, X, self.precision, transpose=not self.symmetric)

    def _adjoint(self):
        if self.symmetric:
            return self
        return super()._adjoint()


def _service_error(r: _Reply) -> ServiceError:
    code = "http_error"
    message = r.body[:500].decode("utf-8", "replace") or r.reason
    try:
        err = r.json()["error"]
        code, message = err.get("code", code), err.get("message", message)
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return ServiceError(r.status, code, message, retry_after=r.headers.get("retry-after"))
