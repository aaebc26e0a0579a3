"""A real local cluster for the tests: `berth up --config examples/local/sdk-tests.yaml` on a
free port, in its own data directory, stopped when the session ends. No mock of the head
anywhere."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


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


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    data = tmp_path_factory.mktemp("berth-data")
    env = dict(os.environ)
    # Workers import berth from this checkout, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    for var in ("BERTH_ADDRESS", "BERTH_TOKEN", "BERTH_DATA_DIR"):
        env.pop(var, None)
    proc = subprocess.Popen(
        [berth_binary(), "up", "--config", str(REPO / "examples" / "local" / "sdk-tests.yaml"), "--port", "0",
         "--data-dir", str(data), "--heartbeat-timeout", "3", "--log-level", "warn"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )
    lines: "queue.Queue[str]" = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    address = None
    seen = []
    while address is None:
        try:
            line = lines.get(timeout=120)
        except queue.Empty:
            break
        if line == "":
            break
        seen.append(line)
        if "listening on http://" in line:
            address = line.split("listening on http://", 1)[1].split()[0]
    if address is None:
        proc.kill()
        pytest.exit("berth up did not start:\n" + "".join(seen), returncode=2)
    # `berth up` prints its address before its nodes have registered: wait for all four.
    while "Berth is up" not in "".join(seen):
        line = lines.get(timeout=120)
        if line == "":
            pytest.exit("berth up stopped:\n" + "".join(seen), returncode=2)
        seen.append(line)
    yield Cluster(proc, address, data, lines)
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def berth_session(cluster):
    """A driver connected to the test cluster (``berth.init``), disconnected afterwards."""
    import berth

    berth.init(address=cluster.address, token=cluster.token)
    yield cluster
    berth.shutdown()
