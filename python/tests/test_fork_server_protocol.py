"""The fork server's own protocol (``berth._fork_server``), driven as the agent drives it:
JSON lines on its stdin and stdout, with a ``run`` of the test's own. The cluster tests
(``test_fork_server.py``) cover the same server behind a real agent."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parents[1] / "berth"

# `run` returns True (offers its process for reuse) unless $REUSE is "0".
SERVER = f"""
import os, sys
sys.path.insert(0, {str(SDK)!r})
import _fork_server
_fork_server.IDLE_TIMEOUT_S = float(os.environ["IDLE_S"])
_fork_server.MAX_IDLE = int(os.environ["MAX_IDLE"])
def run():
    print("pid", os.getpid(), "task", os.environ.get("TASK"), flush=True)
    return os.environ.get("REUSE") != "0"
_fork_server.serve(run)
"""


class Server:
    def __init__(self, tmp: Path, idle_s: float = 60.0, max_idle: int = 4) -> None:
        env = dict(os.environ, IDLE_S=str(idle_s), MAX_IDLE=str(max_idle))
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=tmp)
        self.tmp = tmp
        self.buffer = b""
        self.stashed = []  # messages read while waiting for a fork's answer
        self.request = 0
        assert self.read() == {"type": "ready"}

    def send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def read(self, timeout: float = 30.0) -> dict:
        if self.stashed:
            return self.stashed.pop(0)
        return self._line(timeout)

    def _line(self, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "no message from the server"
            if select.select([self.proc.stdout], [], [], left)[0]:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                assert chunk, "the server ended"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def fork(self, task: str, reuse: bool = True, driver: str = "") -> int:
        self.request += 1
        env = dict(os.environ, TASK=task, REUSE="1" if reuse else "0")
        if driver:
            env["BERTH_DRIVER"] = driver
        self.send({"type": "fork", "request": self.request, "env": env, "cwd": str(self.tmp),
                   "stdout": str(self.tmp / f"{task}.out"), "stderr": str(self.tmp / f"{task}.err")})
        while True:
            reply = self._line()
            if reply.get("type") != "forked":
                self.stashed.append(reply)  # an earlier child's news
                continue
            assert reply == {"type": "forked", "request": self.request, "pid": reply["pid"]}, reply
            return reply["pid"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path):
    started = []

    def make(**kwargs) -> Server:
        started.append(Server(tmp_path, **kwargs))
        return started[-1]

    yield make
    for s in started:
        s.close()


def test_a_done_child_is_reused_only_after_its_release(server):
    s = server()
    first = s.fork("a")
    assert s.read() == {"type": "done", "pid": first, "code": 0}
    # Not released: the next attempt gets a new process.
    second = s.fork("b")
    assert second != first
    assert s.read() == {"type": "done", "pid": second, "code": 0}
    s.send({"type": "release", "pid": first})
    s.send({"type": "release", "pid": 999999})  # not its child: ignored
    assert s.fork("c") == first
    assert s.read() == {"type": "done", "pid": first, "code": 0}
    out = (s.tmp / "c.out").read_text()
    assert out == f"pid {first} task c\n"
    assert "task c" not in (s.tmp / "a.out").read_text()


def test_a_child_is_reused_only_for_the_same_drivers_work(server):
    s = server()
    first = s.fork("a", driver="d1")
    assert s.read() == {"type": "done", "pid": first, "code": 0}
    s.send({"type": "release", "pid": first})
    # Another driver's attempt never gets the first driver's process.
    other = s.fork("b", driver="d2")
    assert other != first
    assert s.read() == {"type": "done", "pid": other, "code": 0}
    s.send({"type": "release", "pid": other})
    assert s.fork("c", driver="d1") == first
    assert s.read() == {"type": "done", "pid": first, "code": 0}
    s.send({"type": "release", "pid": first})
    assert s.fork("d", driver="d2") == other


def test_a_child_that_is_not_reusable_exits_and_its_exit_is_reported(server):
    s = server()
    pid = s.fork("a", reuse=False)
    assert s.read() == {"type": "exited", "pid": pid, "code": 0, "signal": None}


def test_idle_children_beyond_the_limit_or_past_the_timeout_exit(server):
    s = server(idle_s=0.5, max_idle=1)
    a, b = s.fork("a"), s.fork("b")
    done = [s.read(), s.read()]
    assert sorted(m["pid"] for m in done) == sorted([a, b])
    s.send({"type": "release", "pid": a})
    s.send({"type": "release", "pid": b})
    # Two idle, one allowed: the one idle longer is told to exit; the other after 0.5 s.
    assert s.read() == {"type": "exited", "pid": a, "code": 0, "signal": None}
    assert s.read() == {"type": "exited", "pid": b, "code": 0, "signal": None}


def test_idle_children_exit_when_the_server_ends(server, tmp_path):
    s = server()
    pid = s.fork("a")
    assert s.read()["type"] == "done"
    s.send({"type": "release", "pid": pid})
    s.close()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and not _zombie(pid):
        assert time.monotonic() < deadline, "the idle child outlived its server"
        time.sleep(0.02)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_done_child_never_released_exits_after_the_idle_timeout(server):
    s = server(idle_s=0.3)
    pid = s.fork("a")
    assert s.read() == {"type": "done", "pid": pid, "code": 0}
    assert s.read() == {"type": "exited", "pid": pid, "code": 0, "signal": None}
