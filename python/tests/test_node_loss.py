"""An actor's node lost, with a head and two agents as separate processes, each in its own
data directory (as on separate machines): the agent of the node running a Python actor is
killed with SIGKILL and never started again. The caller keeps calling the actor through its
handle all along; no answer ever comes from the old copy once the new one has answered, and
the old copy's process is gone by the time the head declares its node dead (the node's
keeper killed it when the node's lease ran out)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import berth
from berth.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from conftest import HERE, berth_binary

# Generous bounds on waits for observable state; the figures are printed.
WAIT_S = 60.0


@berth.remote(num_cpus=1)
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return os.getpid(), self.n


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    for var in ("BERTH_ADDRESS", "BERTH_TOKEN", "BERTH_DATA_DIR", "BERTH_AGENT_TOKEN"):
        env.pop(var, None)
    return env


def _spawn(args, log: Path, env: dict) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([berth_binary(), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _wait(what: str, check):
    deadline = time.monotonic() + WAIT_S
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {what}"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X", "x")


@pytest.fixture
def two_machines(tmp_path):
    """A head (`--heartbeat-timeout 2`) and agents `a` and `b`, separate processes with their own
    data directories; everything is stopped after the test."""
    env = _env()
    head_dir = tmp_path / "head"
    procs = []
    try:
        head = _spawn(["start", "--head", "--port", "0", "--data-dir", str(head_dir), "--heartbeat-timeout", "2",
                       "--log-level", "warn"], tmp_path / "head.log", env)
        procs.append(head)
        address = _wait("the head's address", lambda: (head_dir / "head-address").exists()
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
        _wait("both nodes ALIVE", lambda: sorted(
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


def test_a_caller_never_hears_from_the_copy_on_a_lost_node(two_machines):
    client, agents, root = two_machines
    counter = Counter.options(max_restarts=1,
                              scheduling_strategy=NodeAffinitySchedulingStrategy("a", soft=True)).remote()
    old_pid, _ = berth.get(counter.incr.remote(), timeout=WAIT_S)
    assert berth.get(counter.incr.remote(), timeout=WAIT_S) == (old_pid, 2)
    assert client.get(f"/api/v1/actors/{counter.actor_id}")["node_id"] == "a"

    killed = time.monotonic()
    agents["a"].kill()
    agents["a"].wait()
    answers = []  # (seconds after the kill, pid, count), or an error
    new_pid = None
    dead_seen = None
    while new_pid is None or len([a for a in answers if a[1] == new_pid]) < 3:
        assert time.monotonic() - killed < WAIT_S, answers
        try:
            pid, n = berth.get(counter.incr.remote(), timeout=WAIT_S)
            answers.append((round(time.monotonic() - killed, 2), pid, n))
            if pid != old_pid:
                new_pid = new_pid or pid
            else:
                assert new_pid is None, f"the old copy answered after the new one: {answers}"
        except berth.exceptions.ActorUnavailableError as e:
            answers.append((round(time.monotonic() - killed, 2), None, str(e)[:60]))
        if dead_seen is None and client.get("/api/v1/nodes/a")["state"] == "DEAD":
            dead_seen = time.monotonic() - killed
            # The keeper killed the copy before the head could call its node dead.
            assert not _alive(old_pid), f"node a is DEAD and its copy {old_pid} still runs"
    actor = client.get(f"/api/v1/actors/{counter.actor_id}")
    assert (actor["state"], actor["node_id"], actor["restarts"]) == ("ALIVE", "b", 1), actor
    # The new copy counts from 1: nothing of the old one's state, and it never answered again.
    assert [n for _, pid, n in answers if pid == new_pid][:3] == [1, 2, 3], answers
    assert not _alive(old_pid)
    keeper = (root / "a" / "agents" / "a" / "keeper.log").read_text()
    assert "the node's lease ran out" in keeper, keeper
    old_answers = [a for a in answers if a[1] == old_pid]
    print(f"kill -9 of agent a: the old copy answered {len(old_answers)} more call(s), last at "
          f"{old_answers[-1][0] if old_answers else '-'} s; node a DEAD seen at {dead_seen and round(dead_seen, 2)} s; "
          f"the new copy's first answer at {next(a[0] for a in answers if a[1] == new_pid)} s; "
          f"{sum(1 for a in answers if a[1] is None)} call(s) failed in between")
