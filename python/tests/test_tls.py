"""A head serving TLS (``berth start --head --tls-cert --tls-key``) reached from the SDK with
``berth.init(ca=...)``: a task and an actor run on a real agent that joined over TLS (its
workers reach the head with the CA the agent passes them as ``$BERTH_CA``), and what cannot
prove the head's identity (no CA, another CA) is refused with an error that says so.

The certificates are made for each run with the ``openssl`` CLI (Debian package ``openssl``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, TypeVar

import pytest

import berth
from berth._client import Client
from berth.exceptions import BerthError, InvalidRequestError

from conftest import HERE, berth_binary

T = TypeVar("T")

# Generous: the agent's first worker starts a Python interpreter on a shared machine.
WAIT_S = 120.0

OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = berth-test
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[head]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def openssl(directory: Path, *args: str) -> None:
    run = subprocess.run(["openssl", *args], cwd=directory, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"openssl {' '.join(args)}:\n{run.stderr}"


def make_ca(directory: Path, name: str) -> Path:
    """A throwaway CA (P-256): ``NAME.pem`` and its key ``NAME.key``; the certificate's path."""
    openssl(directory, "req", "-x509", "-config", "openssl.cnf", "-extensions", "ca", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem")
    return directory / f"{name}.pem"


def make_head_cert(directory: Path, ca: str) -> None:
    """``head.pem`` and ``head.key``, for ``localhost`` and ``127.0.0.1``, signed by CA ``ca``."""
    openssl(directory, "req", "-new", "-config", "openssl.cnf", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=localhost", "-keyout", "head.key",
            "-out", "head.csr")
    openssl(directory, "x509", "-req", "-in", "head.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-set_serial", "2", "-days", "2", "-extfile", "openssl.cnf", "-extensions", "head",
            "-out", "head.pem")


def poll(what: str, check: Callable[[], T], procs: Dict[Path, subprocess.Popen]) -> T:
    """``check()``'s first answer other than None, polled until ``WAIT_S``; fails early, with
    its log, if one of ``procs`` (by log file) exits."""
    deadline = time.monotonic() + WAIT_S
    last = None
    while time.monotonic() < deadline:
        for log, proc in procs.items():
            if proc.poll() is not None:
                pytest.fail(f"waiting for {what}: `berth {' '.join(proc.args[1:3])}` exited with "
                            f"{proc.returncode}:\n{log.read_text()}")
        try:
            answer = check()
            if answer is not None:
                return answer
        except (OSError, BerthError) as e:
            last = e
        time.sleep(0.05)
    pytest.fail(f"no {what} within {WAIT_S:.0f} s (last error: {last})")


@dataclass
class TlsCluster:
    url: str
    token: str
    ca: Path
    other_ca: Path


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's group, SIGKILL if it is still there after 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """A TLS head and one agent (node ``tls-node``, 2 CPUs) that joined it with the CA; both
    stopped at the end, the agent with the processes it started."""
    pki = tmp_path_factory.mktemp("pki")
    (pki / "openssl.cnf").write_text(OPENSSL_CONFIG)
    ca = make_ca(pki, "ca")
    make_head_cert(pki, "ca")
    other_ca = make_ca(pki, "other-ca")

    env = dict(os.environ)
    # Workers import berth from this checkout, installed or not (as conftest's cluster).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    for var in ("BERTH_ADDRESS", "BERTH_TOKEN", "BERTH_DATA_DIR", "BERTH_CA", "BERTH_AGENT_TOKEN"):
        env.pop(var, None)
    head_dir, agent_dir = tmp_path_factory.mktemp("tls-head"), tmp_path_factory.mktemp("tls-agent")
    logs = tmp_path_factory.mktemp("tls-logs")
    procs: Dict[Path, subprocess.Popen] = {}

    def spawn(name: str, args: List[str], extra_env: Dict[str, str], cwd: Path) -> None:
        log = logs / f"{name}.log"
        with open(log, "w") as out:
            procs[log] = subprocess.Popen(
                [berth_binary(), *args, "--log-level", "warn"], stdout=out, stderr=subprocess.STDOUT,
                env={**env, **extra_env}, cwd=cwd, start_new_session=True,
            )

    try:
        spawn("head", ["start", "--head", "--port", "0", "--data-dir", str(head_dir),
                       "--tls-cert", str(pki / "head.pem"), "--tls-key", str(pki / "head.key")], {}, pki)

        def address():
            text = (head_dir / "head-address").read_text().strip()
            return text if text.startswith("https://") else None

        url = poll("https:// address in head-address", address, procs)
        token = (head_dir / "token").read_text().strip()
        agent_token = (head_dir / "agent-token").read_text().strip()
        # The token by environment, not argument: it stays out of the process list. The CA as
        # the CLI's help shows it, a path relative to where the agent starts: its workers, each
        # in its own directory, must still find it.
        spawn("agent", ["start", "--address", url, "--ca", ca.name, "--node-id", "tls-node", "--num-cpus", "2",
                        "--data-dir", str(agent_dir), "--stop-work-on-exit"],
              {"BERTH_AGENT_TOKEN": agent_token}, pki)
        client = Client(url, token, str(ca), timeout=10)

        def alive():
            nodes = client.get("/api/v1/nodes")["items"]
            return True if any(n["node_id"] == "tls-node" and n["state"] == "ALIVE" for n in nodes) else None

        poll("ALIVE tls-node (the agent joined over TLS)", alive, procs)
        yield TlsCluster(url, token, ca, other_ca)
    finally:
        berth.shutdown()
        for proc in reversed(list(procs.values())):  # the agent first: it stops its work while the head is up
            stop(proc)


def test_a_task_and_an_actor_run_over_tls(tls_cluster):
    berth.init(address=tls_cluster.url, token=tls_cluster.token, ca=str(tls_cluster.ca))
    try:
        @berth.remote
        def square(x):
            return x * x

        assert berth.get(square.remote(7), timeout=WAIT_S) == 49

        @berth.remote
        class Counter:
            def __init__(self, start):
                self.value = start

            def add(self, n):
                self.value += n
                return self.value

        # An actor registers its endpoint with the head itself: over TLS, with $BERTH_CA.
        counter = Counter.remote(40)
        assert berth.get(counter.add.remote(2), timeout=WAIT_S) == 42
        assert berth.get(counter.add.remote(1), timeout=WAIT_S) == 43
    finally:
        berth.shutdown()


def test_an_https_head_without_a_ca_is_refused_naming_ca(tls_cluster, monkeypatch):
    monkeypatch.delenv("BERTH_CA", raising=False)
    with pytest.raises(InvalidRequestError) as refused:
        berth.init(address=tls_cluster.url, token=tls_cluster.token)
    assert refused.value.field == "ca"
    assert tls_cluster.url in str(refused.value) and "$BERTH_CA" in str(refused.value), refused.value
    assert not berth.is_initialized()

    # $BERTH_CA is the default.
    monkeypatch.setenv("BERTH_CA", str(tls_cluster.ca))
    berth.init(address=tls_cluster.url, token=tls_cluster.token)
    berth.shutdown()


def test_a_head_whose_certificate_another_ca_signed_is_refused(tls_cluster):
    with pytest.raises(InvalidRequestError) as refused:
        berth.init(address=tls_cluster.url, token=tls_cluster.token, ca=str(tls_cluster.other_ca))
    assert refused.value.field == "ca"
    message = str(refused.value)
    assert "could not be verified" in message, message
    assert tls_cluster.url in message and str(tls_cluster.other_ca) in message, message
    assert not berth.is_initialized()


def test_a_ca_file_that_cannot_be_read_is_refused_naming_ca(tls_cluster, tmp_path):
    missing = tmp_path / "missing.pem"
    with pytest.raises(InvalidRequestError) as refused:
        berth.init(address=tls_cluster.url, token=tls_cluster.token, ca=str(missing))
    assert refused.value.field == "ca" and str(missing) in str(refused.value), refused.value
