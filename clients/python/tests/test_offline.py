"""Pure-Python parts, no server: the binary CSR encoding, matrix inputs,
error mapping and the operator's rmatvec rule."""

import struct

import numpy as np
import pytest
import scipy.sparse as sp

from spmv_select import Client, ServiceError, TransportError, as_csr_arrays, csrbin
from spmv_select.client import _Reply, _service_error, _ServiceOperator


def small():
    return sp.csr_matrix(
        (np.array([1.5, -2.0, 4.0]), np.array([0, 2, 1]), np.array([0, 2, 3])), shape=(2, 3)
    )


def test_header_layout_is_the_documented_one():
    b = csrbin.encode((2, 3), [0, 2, 3], [0, 2, 1], [1.5, -2.0, 4.0], x=[1, 2, 3])
    assert b[:8] == b"SPMVCSR\x00"
    assert struct.unpack_from("<HBBIQQQ", b, 8) == (1, 4, 8, 1, 2, 3, 3)
    assert len(b) == 40 + 3 * 4 + 3 * 4 + 3 * 8 + 3 * 8
    assert struct.unpack_from("<3I", b, 40) == (0, 2, 3)
    assert struct.unpack_from("<3d", b, 64) == (1.5, -2.0, 4.0)
    assert struct.unpack_from("<3d", b, 88) == (1.0, 2.0, 3.0)


@pytest.mark.parametrize("vw", [4, 8])
@pytest.mark.parametrize("iw", [None, 8])
def test_round_trip(vw, iw):
    A = sp.random(50, 40, density=0.1, format="csr", random_state=1)
    x = np.arange(40.0)
    b = csrbin.encode(A.shape, A.indptr, A.indices, A.data, x=x, value_width=vw, index_width=iw)
    shape, indptr, indices, data, x2 = csrbin.decode(b)
    assert shape == A.shape
    np.testing.assert_array_equal(indptr, A.indptr)
    np.testing.assert_array_equal(indices, A.indices)
    np.testing.assert_array_equal(data, A.data.astype(np.float32 if vw == 4 else np.float64))
    np.testing.assert_array_equal(x2, x)


def test_wide_indices_switch_to_8_bytes():
    assert csrbin.index_width_for(np.array([0, 1]), np.array([2**32 - 1])) == 4
    assert csrbin.index_width_for(np.array([0, 1]), np.array([2**32])) == 8


def test_bad_arrays_are_refused_before_sending():
    with pytest.raises(ValueError, match="negative"):
        csrbin.encode((1, 1), [0, 1], [-1], [1.0])
    with pytest.raises(ValueError, match="complex"):
        csrbin.encode((1, 1), [0, 1], [0], [1j])
    with pytest.raises(ValueError, match="integer"):
        csrbin.encode((1, 1), [0.0, 1.0], [0], [1.0])


def test_matrix_inputs():
    A = small()
    for m in (A, A.tocoo(), A.tocsc(), sp.csr_array(A)):
        shape, indptr, indices, data = as_csr_arrays(m)
        assert shape == (2, 3)
        assert (sp.csr_matrix((data, indices, indptr), shape=shape) != A).nnz == 0
    shape, *_ = as_csr_arrays((A.indptr, A.indices, A.data))
    assert shape == (2, 3)
    shape, *_ = as_csr_arrays((A.indptr, A.indices, A.data, (2, 7)))
    assert shape == (2, 7)
    with pytest.raises(TypeError, match="scipy.sparse"):
        as_csr_arrays(np.eye(3))


def _response(status, body, headers=None):
    return _Reply(status, "Reason", {k.lower(): v for k, v in (headers or {}).items()}, body)


def test_errors_carry_status_code_and_message():
    e = _service_error(
        _response(422, b'{"error":{"code":"x_length","message":"x has 3 entries"}}')
    )
    assert isinstance(e, ServiceError)
    assert (e.status, e.code, e.message) == (422, "x_length", "x has 3 entries")
    assert "x has 3 entries" in str(e)
    e = _service_error(_response(502, b"bad gateway", {"Retry-After": "2"}))
    assert (e.status, e.code, e.message, e.retry_after) == (502, "http_error", "bad gateway", "2")


class _Echo:
    """A service whose A x is 2 x and whose A^T x is 3 x."""

    def spmv(self, matrix_id, x, precision, transpose=False):
        return (3.0 if transpose else 2.0) * x


def test_rmatvec_is_the_transpose_unless_symmetric():
    op = _ServiceOperator(_Echo(), "m", "f64", (3, 3), symmetric=False)
    np.testing.assert_array_equal(op.matvec(np.ones(3)), 2.0 * np.ones(3))
    # Not known symmetric: the service's transposed product.
    np.testing.assert_array_equal(op.rmatvec(np.ones(3)), 3.0 * np.ones(3))
    op = _ServiceOperator(_Echo(), "m", "f64", (3, 3), symmetric=True)
    np.testing.assert_array_equal(op.rmatvec(np.ones(3)), 2.0 * np.ones(3))
    np.testing.assert_array_equal(op.H.matvec(np.ones(3)), 2.0 * np.ones(3))


def test_an_unreachable_service_is_a_transport_error():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(TransportError, match="/healthz"):
        Client(f"http://127.0.0.1:{port}", timeout=5).healthz()
    with pytest.raises(ValueError, match="http://host"):
        Client("localhost:8080")


def test_api_key_is_sent_as_a_bearer_token():
    c = Client("http://127.0.0.1:1/prefix/", api_key="k" * 16)
    assert c._http._headers["Authorization"] == "Bearer " + "k" * 16
    assert c._http._prefix == "/prefix"
    assert "Authorization" not in Client("http://127.0.0.1:1")._http._headers


class _Recorded:
    """A reply whose JSON is fixed, for a client whose requests are recorded."""

    def __init__(self, answer):
        self._answer = answer

    def json(self):
        return self._answer


def test_upload_and_predict_send_binary_csr_with_the_planning_parameters(monkeypatch):
    sent = []

    def record(self, method, path, params=None, data=None, headers=None, read_into=None):
        sent.append((method, path, dict(params), data, headers["Content-Type"]))
        return _Recorded({"id": "m1"})

    monkeypatch.setattr(Client, "_request", record)
    c = Client("http://localhost:1")
    A = small()
    assert c.upload(A, precision="f32", expected_calls=7) == "m1"
    c.predict(A, explain=True)
    body, kind = csrbin.encode(*as_csr_arrays(A), value_width=8), csrbin.CONTENT_TYPE
    assert sent == [
        ("POST", "/matrices", {"expected_calls": "7", "precision": "f32"}, body, kind),
        ("POST", "/predict", {"explain": "true"}, body, kind),
    ]
