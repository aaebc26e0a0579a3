"""A real local cluster for the tests: `berth up --config examples/local/sdk-tests.yaml` on a
free port, in its own data directory, stopped when the session ends. No mock of the head
anywhere. `start_cluster` and `stop_cluster` start and stop other `berth up` clusters (for a
test that needs one of its own)."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import List

import pytest

import berth

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SDK_TESTS_CONFIG = REPO / "examples" / "local" / "sdk-tests.yaml"

# Generous: a cold `berth up` is up within seconds, on a machine shared with builds and tests.
START_TIMEOUT_S = 120.0


def berth_binary() -> str:
    """$BERTH_BIN, else the workspace's build, else `berth` on the PATH."""
    env = os.environ.get("BERTH_BIN")
    if env:
        return env
    for profile in ("debug", "release"):
        candidate = REPO / "target" / profile / "berth"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("berth")
    if found:
        return found
    pytest.exit("no berth binary: build it (cargo build -p berth-cli) or set $BERTH_BIN", returncode=2)


class Cluster:
    def __init__(self, proc: subprocess.Popen, address: str, data_dir: Path, lines: "queue.Queue[str]"):
        self.proc, self.address, self.data_dir, self.lines = proc, address, data_dir, lines
        self.token = (data_dir / "token").read_text().strip()
        self.bin = berth_binary()

    def cli(self, *args: str) -> str:
        """Runs the berth CLI against this cluster; its stdout."""
        return subprocess.run(
            [self.bin, *args, "--address", self.address, "--data-dir", str(self.data_dir)],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout


class ClusterStartError(RuntimeError):
    pass


def start_cluster(data_dir: Path, *args: str) -> Cluster:
    """`berth up --port 0 --data-dir DATA_DIR --log-level warn ARGS...` (its own process group),
    once every node it starts has registered. Raises ClusterStartError with its output if it
    stops or does not come up within START_TIMEOUT_S."""
    env = dict(os.environ)
    # Workers import berth from this checkout, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    for var in ("BERTH_ADDRESS", "BERTH_TOKEN", "BERTH_DATA_DIR"):
        env.pop(var, None)
    proc = subprocess.Popen(
        [berth_binary(), "up", "--port", "0", "--data-dir", str(data_dir), "--log-level", "warn", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )
    lines: "queue.Queue[str]" = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    address = None
    seen: List[str] = []
    # `berth up` prints its address before its nodes have registered, and "Berth is up" after.
    while address is None or not any("Berth is up" in line for line in seen):
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = ""
        if line == "":
            _stop(proc)
            raise ClusterStartError(f"`{' '.join(proc.args[1:])}` did not start:\n" + "".join(seen))
        seen.append(line)
        if address is None and "listening on http://" in line:
            address = line.split("listening on http://", 1)[1].split()[0]
    return Cluster(proc, address, data_dir, lines)


def stop_cluster(cluster: Cluster) -> None:
    """SIGTERM to `berth up`'s process group (its agents stop their work), SIGKILL after 30 s."""
    _stop(cluster.proc)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:  # the group is gone already
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    try:
        started = start_cluster(tmp_path_factory.mktemp("berth-data"), "--config", str(SDK_TESTS_CONFIG),
                                "--heartbeat-timeout", "3")
    except ClusterStartError as e:
        pytest.exit(str(e), returncode=2)
    yield started
    stop_cluster(started)


@pytest.fixture
def berth_session(cluster):
    """A driver connected to the test cluster (``berth.init``), disconnected afterwards."""
    berth.init(address=cluster.address, token=cluster.token)
    yield cluster
    berth.shutdown()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (exists and is not a zombie), read from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X", "x")


# A cluster of separate processes: a head and two agents, each in its own data directory.


def _machine_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    for var in ("BERTH_ADDRESS", "BERTH_TOKEN", "BERTH_DATA_DIR", "BERTH_AGENT_TOKEN"):
        env.pop(var, None)
    return env


def _spawn(args, log: Path, env: dict) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([berth_binary(), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def wait_for(what: str, check, wait_s: float = 60.0):
    """Polls `check()` until it returns something true (returned), for at most `wait_s` s."""
    deadline = time.monotonic() + wait_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"waited {wait_s} s for {what}"
        time.sleep(0.02)


@pytest.fixture
def two_machines(tmp_path):
    """A head (`--heartbeat-timeout 2`) and agents `a` and `b` (2 CPUs each), separate processes
    with their own data directories, as on separate machines: no token file is shared, and the
    agents' work reaches the head with its work credentials only. This process is the driver;
    yields its REST client, the agents' processes and the root directory. Everything is stopped
    after the test."""
    env = _machine_env()
    head_dir = tmp_path / "head"
    procs = []
    try:
        head = _spawn(["start", "--head", "--port", "0", "--data-dir", str(head_dir), "--heartbeat-timeout", "2",
                       "--log-level", "warn"], tmp_path / "head.log", env)
        procs.append(head)
        address = wait_for("the head's address", lambda: (head_dir / "head-address").exists()
                        and (head_dir / "head-address").read_text().strip())
        agent_env = dict(env, BERTH_AGENT_TOKEN=(head_dir / "agent-token").read_text().strip())
        agents = {}
        for node in ("a", "b"):
            agents[node] = _spawn(["start", "--address", address, "--data-dir", str(tmp_path / node),
                                   "--node-id", node, "--num-cpus", "2"], tmp_path / f"{node}.log", agent_env)
            procs.append(agents[node])
        token = (head_dir / "token").read_text().strip()
        berth.init(address=address, token=token)
        client = berth._runtime.current().client
        wait_for("both nodes ALIVE", lambda: sorted(
            n["node_id"] for n in client.get("/api/v1/nodes")["items"] if n["state"] == "ALIVE") == ["a", "b"])
        yield client, agents, tmp_path
    finally:
        berth.shutdown()
        for proc in reversed(procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # What the agents ran ends with their leases: their keepers kill it (the head is gone).
