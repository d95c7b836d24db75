"""A real spmv-select server for the tests: the release `server` binary built
by cargo, on a free loopback port, without a database, with the repository's
models; started once per session, waited for on /healthz, stopped at the end.

Under CI (`CI=true`) or with `SPMV_REQUIRE_DEVICE=1`, a server that cannot
start or has no OpenCL device fails the tests; elsewhere they skip with the
reason. `SPMV_SERVER_BIN` names another binary.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import json
import urllib.request

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))


def required() -> bool:
    def on(k):
        return os.environ.get(k, "").lower() in ("1", "true")

    return on("CI") or on("SPMV_REQUIRE_DEVICE")


def skip_or_fail(why: str):
    if required():
        pytest.fail(f"{why} (required under CI / SPMV_REQUIRE_DEVICE=1)", pytrace=False)
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_binary() -> Path:
    given = os.environ.get("SPMV_SERVER_BIN")
    if given:
        return Path(given)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    exe = (target if target.is_absolute() else ROOT / target) / "release" / "server"
    if not exe.exists():
        # Fresh checkout: build it (scripts/test.sh builds it before pytest).
        subprocess.run(
            ["cargo", "build", "--release", "-p", "server"], cwd=ROOT, check=False
        )
    return exe


class Server:
    def __init__(self, url, proc, log_path):
        self.url = url
        self.proc = proc
        self.log_path = log_path
        self.device = False

    def log_tail(self, n=4000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return ""


def start_server(*extra):
    """Starts the server binary with `extra` flags; returns it once /healthz answers."""
    exe = _server_binary()
    if not exe.exists():
        skip_or_fail(f"no server binary at {exe} (cargo build --release -p server)")
    port = _free_port()
    log = tempfile.NamedTemporaryFile(prefix="spmv-server-", suffix=".log", delete=False)
    cmd = [
        str(exe),
        "--bind", f"127.0.0.1:{port}",
        "--no-database",
        "--models-dir", str(ROOT / "models"),
        *extra,
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    srv = Server(f"http://127.0.0.1:{port}", proc, log.name)
    deadline = time.monotonic() + float(os.environ.get("SPMV_SERVER_START_S", "300"))
    health = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(srv.url + "/healthz", timeout=2) as r:
                health = json.load(r)
            break
        except (OSError, ValueError):
            time.sleep(0.3)
    if health is None:
        proc.kill()
        proc.wait()
        skip_or_fail(f"the server did not answer /healthz (exit {proc.returncode}):\n{srv.log_tail()}")
    srv.device = bool(health.get("device"))
    return srv


def stop_server(srv):
    srv.proc.send_signal(signal.SIGTERM)
    try:
        srv.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        srv.proc.wait()
    os.unlink(srv.log_path)


@pytest.fixture(scope="session")
def server():
    srv = start_server()
    yield srv
    stop_server(srv)


API_KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789ab"}


@pytest.fixture(scope="session")
def keyed_server():
    """A second server, with API keys and no device."""
    keys = ",".join(f"{n}:{k}" for n, k in API_KEYS.items())
    srv = start_server("--no-device", "--api-keys", keys)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def device_server(server):
    """The server, when it has an OpenCL device (else skip, or fail under CI)."""
    if not server.device:
        skip_or_fail(f"the server has no OpenCL device:\n{server.log_tail()}")
    return server


@pytest.fixture()
def client(server):
    from spmv_select import Client

    with Client(server.url, timeout=120) as c:
        yield c


@pytest.fixture()
def device_client(device_server):
    from spmv_select import Client

    with Client(device_server.url, timeout=120) as c:
        yield c
