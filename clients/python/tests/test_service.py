"""Against a real server (see conftest.py): products equal to scipy's on the
fixture matrices and a handful of shared ones in f32 and f64, CG through
operator(id) converging to scipy's solution, and bad input raising with the
service's own message."""

import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as sla

from spmv_select import ServiceError

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = sorted((ROOT / "crates/sparse/tests/data").glob("*.mtx.gz"))
SHARED = ROOT.parent / "shared" / "matrices"


def shared_handful(n=6, max_gz_bytes=2_000_000):
    """A handful of the shared matrices (not among the fixtures), spread over
    their sizes up to the largest under ``max_gz_bytes``."""
    if not SHARED.is_dir():
        return []
    fixtures = {p.name for p in FIXTURES}
    files = sorted(
        (
            p
            for p in SHARED.glob("*.mtx.gz")
            if p.stat().st_size <= max_gz_bytes and p.name not in fixtures
        ),
        key=lambda p: (p.stat().st_size, p.name),
    )
    if len(files) <= n:
        return files
    return [files[round(i * (len(files) - 1) / (n - 1))] for i in range(n)]


def load(path: Path) -> sp.csr_matrix:
    with gzip.open(path) as f:
        A = scipy.io.mmread(f)
    A = sp.csr_matrix(A)
    if np.iscomplexobj(A.data):
        A = sp.csr_matrix((A.data.real, A.indices, A.indptr), shape=A.shape)
    return A.astype(np.float64)


MATRICES = FIXTURES + shared_handful()


def check_close(A: sp.csr_matrix, x: np.ndarray, y: np.ndarray, precision: str):
    """|y - A x| within c * eps * (row length + 2) * (|A| |x|) per row, the
    rounding bound of a sum in that precision (A and x rounded to it too)."""
    assert y.shape == (A.shape[0],)
    assert y.dtype == (np.float32 if precision == "f32" else np.float64)
    ref = A @ x
    eps = np.finfo(np.float32 if precision == "f32" else np.float64).eps
    rowlen = np.diff(A.indptr)
    bound = 2 * eps * (rowlen + 2) * (abs(A) @ np.abs(x)) + np.finfo(np.float64).tiny
    err = np.abs(y.astype(np.float64) - ref)
    worst = int(np.argmax(err / bound))
    assert np.all(err <= bound), f"row {worst}: |y - Ax| = {err[worst]:.3g} > bound {bound[worst]:.3g}"


@pytest.mark.parametrize("precision", ["f64", "f32"])
@pytest.mark.parametrize("path", MATRICES, ids=lambda p: p.name.split(".")[0])
def test_products_equal_scipy(device_client, path, precision):
    A = load(path)
    rng = np.random.default_rng(len(path.name))
    x = rng.standard_normal(A.shape[1])
    mid = device_client.upload(A, precision=precision)
    y = device_client.spmv(mid, x, precision=precision)
    check_close(A, x, y, precision)
    # Timed: y again; in place only from the device's bound on x and y
    # together (0 for SVM, 1 MiB for mapped buffers; shared pools are the
    # default on a CPU device only).
    y2, t = device_client.spmv_timed(mid, x, precision=precision)
    check_close(A, x, y2, precision)
    width = 4 if precision == "f32" else 8
    dev = device_client.device()
    if (A.shape[0] + A.shape[1]) * width < dev["in_place_min_bytes"]:
        assert not t.in_place, (A.shape, t, dev["shared_memory"])
    elif dev["kind"].lower() == "cpu" and min(A.shape) > 0:
        assert t.in_place, (A.shape, t, dev["shared_memory"])
    # The same through the operator, on a block of two vectors (matmat).
    op = device_client.operator(mid, precision=precision)
    X = np.stack([x, -x], axis=1)
    Y = op @ X
    check_close(A, x, Y[:, 0], precision)
    check_close(A, -x, Y[:, 1], precision)


def test_inputs_of_every_kind_give_one_id(device_client):
    A = load(FIXTURES[0])
    ids = {
        device_client.upload(A),
        device_client.upload(A.tocoo()),
        device_client.upload(sp.csr_array(A)),
        device_client.upload((A.indptr, A.indices, A.data, A.shape)),
        device_client.upload((A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data, A.shape)),
    }
    assert len(ids) == 1, ids
    # float32 data travels as 4-byte values; it multiplies as the f32 matrix.
    A32 = A.astype(np.float32)
    mid = device_client.upload(A32, precision="f32")
    x = np.linspace(-1, 1, A.shape[1])
    check_close(A32.astype(np.float64), x, device_client.spmv(mid, x, "f32"), "f32")


def spd_matrices():
    out = [p for p in FIXTURES if "mesh3em5" in p.name]
    out += [SHARED / n for n in ("HB__bcsstk09.mtx.gz",) if (SHARED / n).exists()]
    return out


@pytest.mark.parametrize("path", spd_matrices(), ids=lambda p: p.name.split(".")[0])
def test_cg_through_the_operator_converges_to_scipys_solution(device_client, path):
    A = load(path)
    assert abs(A - A.T).max() == 0
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    mid = device_client.upload(A)
    op = device_client.operator(mid)
    assert op.symmetric, "uploaded by this client, the matrix is known symmetric"
    x, info = sla.cg(op, b, rtol=1e-10, maxiter=20 * A.shape[0])
    assert info == 0, f"CG did not converge ({info})"
    assert op.calls > 1
    exact = sla.spsolve(A.tocsc(), b)
    rel = np.linalg.norm(x - exact) / np.linalg.norm(exact)
    assert rel < 1e-6, rel
    # scipy's own CG with A takes the same path.
    x_local, info_local = sla.cg(A, b, rtol=1e-10, maxiter=20 * A.shape[0])
    assert info_local == 0
    assert np.linalg.norm(x - x_local) / np.linalg.norm(x_local) < 1e-6


@pytest.mark.parametrize("path", spd_matrices(), ids=lambda p: p.name.split(".")[0])
def test_solve_on_the_device_equals_scipys_solution(device_client, path):
    A = load(path)
    b = np.random.default_rng(1).standard_normal(A.shape[0])
    mid = device_client.upload(A)
    exact = sla.spsolve(A.tocsc(), b)
    for pre in ("none", "jacobi"):
        r = device_client.solve(mid, b, tol=1e-10, maxiter=20 * A.shape[0], preconditioner=pre)
        assert r.converged and r.stop == "converged", (pre, r.stop, r.residuals[-1])
        assert len(r.residuals) == r.iterations + 1
        rel = np.linalg.norm(r.x - exact) / np.linalg.norm(exact)
        assert rel < 1e-6, (pre, rel)
    # A breakdown or a bad b is the service's 422, with its message.
    with pytest.raises(ServiceError) as e:
        device_client.solve(mid, b[:-1])
    assert e.value.status == 422 and "entries" in str(e.value)


def test_matmat_is_one_spmm_request(device_client):
    R = sp.random(60, 45, density=0.1, format="csr", random_state=4)
    mid = device_client.upload(R)
    X = np.random.default_rng(5).standard_normal((45, 16))
    op = device_client.operator(mid)
    assert np.allclose(op.matmat(X), R @ X, rtol=1e-12, atol=1e-12)
    assert op.calls == 1, "the 16 products are one request"
    Z = np.random.default_rng(6).standard_normal((60, 3))
    assert np.allclose(op.rmatmat(Z), R.T @ Z, rtol=1e-12, atol=1e-12)
    assert np.allclose(device_client.spmm(mid, X, precision="f32"), R @ X, rtol=1e-4, atol=1e-4)


def test_predict_gives_the_plan(client):
    A = load(FIXTURES[0])
    p = client.predict(A, precision="f32", explain=True)
    assert p["matrix"] == {"id": p["matrix"]["id"], "nrows": A.shape[0], "ncols": A.shape[1], "nnz": A.nnz}
    assert p["precision"] == "f32"
    assert p["plan"]["scheme"]
    assert "explanation" in p
    # Planned for the calls expected: one call, or the service's default for uploads.
    one = client.predict(A, precision="f32", expected_calls=1)
    assert one["planning"]["expected_calls"] == 1
    assert one["planning"]["chosen"] == "model" or one["planning"]["chosen"].startswith("single:")
    assert client.predict(A)["planning"]["expected_calls"] == 1000
    with raises("bad_request", 400, "expected_calls"):
        client.predict(A, expected_calls=0)


def raises(code, status, fragment):
    class Ctx:
        def __enter__(self):
            return self

        def __exit__(self, typ, e, tb):
            assert typ is ServiceError, f"expected ServiceError {code}, got {typ}: {e}"
            assert (e.status, e.code) == (status, code), str(e)
            assert fragment in e.message, f"'{fragment}' not in '{e.message}'"
            self.error = e
            return True

    return Ctx()


def test_malformed_matrices_raise_with_the_services_message(client):
    with raises("invalid_matrix", 422, "column index 5 in row 0 is out of range"):
        client.upload(([0, 1, 2], [5, 0], [1.0, 2.0], (2, 3)))
    with raises("invalid_matrix", 422, "row_ptr decreases"):
        client.predict(([0, 2, 1], [0, 1], [1.0, 2.0], (2, 3)))
    with raises("non_finite", 422, "only finite values"):
        client.upload(([0, 1], [0], [np.nan], (1, 1)))
    with raises("invalid_matrix", 422, "row_ptr ends at 3"):
        client.upload(([0, 3], [0], [1.0], (1, 1)))


def test_bad_x_and_deleted_ids_raise_with_the_services_message(device_client):
    A = load(FIXTURES[0])
    mid = device_client.upload(A)
    with raises("x_length", 422, f"x has 3 entries but the matrix has {A.shape[1]} columns"):
        device_client.spmv(mid, np.ones(3))
    with raises("non_finite", 422, "x[1]"):
        device_client.spmv(mid, np.r_[1.0, np.inf, np.ones(A.shape[1] - 2)])
    device_client.delete(mid)
    with raises("matrix_not_found", 404, mid):
        device_client.spmv(mid, np.ones(A.shape[1]))
    with raises("matrix_not_found", 404, mid):
        device_client.delete(mid)
    with pytest.raises(ValueError, match="precision"):
        device_client.spmv(mid, np.ones(A.shape[1]), precision="f16")


def test_rmatvec_of_a_general_matrix_is_the_services_transpose(device_client):
    A = load(next(p for p in FIXTURES if "rdb200" in p.name))
    assert abs(A - A.T).max() > 0, "a matrix that is not symmetric"
    op = device_client.operator(device_client.upload(A))
    x = np.random.default_rng(2).standard_normal(A.shape[0])
    y = op.rmatvec(x)
    assert np.allclose(y, A.T @ x, rtol=1e-12, atol=1e-12)
    # Rectangular too, through spmv(..., transpose=True).
    R = sp.random(40, 90, density=0.1, format="csr", random_state=3)
    rid = device_client.upload(R)
    xr = np.arange(40, dtype=np.float64)
    assert np.allclose(device_client.spmv(rid, xr, transpose=True), R.T @ xr, rtol=1e-12, atol=1e-12)


def test_api_keys_travel_and_ownership_holds(keyed_server):
    from conftest import API_KEYS
    from spmv_select import Client

    A = load(FIXTURES[0])
    with raises("unauthorized", 401, ""):
        Client(keyed_server.url).upload(A)
    alice = Client(keyed_server.url, api_key=API_KEYS["alice"])
    bob = Client(keyed_server.url, api_key=API_KEYS["bob"])
    mid = alice.upload(A)
    assert alice.matrix(mid)["matrix"]["nnz"] == A.nnz
    with raises("matrix_not_found", 404, mid):
        bob.matrix(mid)
    alice.delete(mid)
