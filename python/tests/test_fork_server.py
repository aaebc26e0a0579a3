"""Workers forked from the agents' warm fork servers (``fork_server`` in the create bodies):
each attempt has its own process group, environment, working directory, logs and exit, and
what a spawned worker would do (retry after a kill, actors) still holds. A task's process is
reused for later tasks when it ended cleanly (``max_calls`` limits that)."""

from __future__ import annotations

import os
import signal
import time

import berth


def _server_of(pid: int) -> bool:
    """True when ``pid`` is a fork server (``BERTH_FORK_SERVER=1`` in its environment)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"BERTH_FORK_SERVER=1" in f.read().split(b"\0")
    except OSError:
        return False


@berth.remote(num_cpus=0.1, label_selector={"instance_type": "m5.16xlarge"})
def whoami(tag):
    return {
        "tag": tag,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "task": os.environ.get("BERTH_TASK_ID"),
        "attempt": os.environ.get("BERTH_ATTEMPT"),
        "cwd": os.getcwd(),
        "x": os.environ.get("X"),
        "pgid": os.getpgid(0),
    }


def _until_forked(fn, deadline_s: float = 60.0):
    """Runs ``fn`` (one node) until an attempt was forked; the first ones are spawned while
    the node's server warms up. Returns every answer."""
    answers = []
    deadline = time.monotonic() + deadline_s
    while not answers or not _server_of(answers[-1]["ppid"]):
        assert time.monotonic() < deadline, f"no forked attempt within {deadline_s} s: {answers}"
        answers.append(berth.get(fn.remote(len(answers)), timeout=60))
    return answers


def test_tasks_are_forked_once_the_server_is_warm_and_are_processes_of_their_own(berth_session):
    answers = _until_forked(whoami)
    forked = berth.get([whoami.remote(i) for i in range(20)], timeout=60)
    servers = {a["ppid"] for a in forked if _server_of(a["ppid"])}
    assert servers, f"none of 20 tasks on a warm node was forked: {forked}"
    for answer in answers + forked:
        # Its own process group, its own ID, attempt and working directory.
        assert answer["pgid"] == answer["pid"]
        assert answer["attempt"] == "1"
        assert answer["task"] and answer["cwd"].endswith(f"/work/{answer['task']}-1")
    assert len({a["task"] for a in answers + forked}) == len(answers + forked)


def test_a_task_process_is_reused_for_the_next_task_unless_max_calls_says_otherwise(berth_session):
    _until_forked(whoami)
    # One at a time: a task mostly finds an earlier one's process idle in the server (not
    # always: the driver may submit the next before the agent has released the last).
    answers = [berth.get(whoami.remote(i), timeout=60) for i in range(6)]
    assert len({a["pid"] for a in answers}) < 6, f"not reused: {answers}"
    for answer in answers:
        assert answer["cwd"].endswith(f"/work/{answer['task']}-1"), answer
        assert answer["pgid"] == answer["pid"]
    assert len({a["task"] for a in answers}) == 6

    once = whoami.options(max_calls=1)
    answers = [berth.get(once.remote(i), timeout=60) for i in range(4)]
    assert len({a["pid"] for a in answers}) == 4, f"max_calls=1 ran two tasks in one process: {answers}"

    @berth.remote(num_cpus=0.1, label_selector={"instance_type": "m5.16xlarge"})
    def leaves_a_thread(_):
        import threading

        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        return os.getpid()

    pids = [berth.get(leaves_a_thread.remote(i), timeout=60) for i in range(3)]
    assert len(set(pids)) == 3, "a process with a thread still running is not reused"


def test_a_reused_process_keeps_nothing_of_the_last_tasks_environment(berth_session):
    @berth.remote(num_cpus=0.1, label_selector={"instance_type": "m5.16xlarge"})
    def env_of(name, value):
        seen = os.environ.get(name)
        os.environ[name] = value  # a task that changes its environment
        return os.getpid(), seen

    _until_forked(whoami)
    answers = [berth.get(env_of.remote("SCRATCH", f"set-by-{i}"), timeout=60) for i in range(6)]
    assert len({pid for pid, _ in answers}) < 6, f"not reused: {answers}"
    assert [seen for _, seen in answers] == [None] * 6


def _leave_and_read(tag):
    """Reads what an earlier task left in a module and a global, then leaves its own."""
    import json

    global _left
    seen = (getattr(json, "_berth_left", None), globals().get("_left"))
    json._berth_left = _left = tag
    return os.getpid(), seen


def test_a_later_driver_never_sees_what_an_earlier_one_left(cluster):
    """Within one driver a reused process keeps its modules' state (as Ray's workers do); a
    driver's work never runs in a process another driver's work ran in."""
    seen_by = {}
    for driver in ("first", "second"):
        berth.init(address=cluster.address, token=cluster.token)
        try:
            task = berth.remote(num_cpus=0.1, label_selector={"instance_type": "m5.16xlarge"})(
                _leave_and_read
            )
            _until_forked(whoami)
            seen_by[driver] = [berth.get(task.remote(driver), timeout=60) for _ in range(6)]
        finally:
            berth.shutdown()
    first_pids = {pid for pid, _ in seen_by["first"]}
    assert len(first_pids) < 6, f"not reused within a driver: {seen_by['first']}"
    assert not first_pids & {pid for pid, _ in seen_by["second"]}, seen_by
    for _, (module, global_) in seen_by["second"]:
        assert module in (None, "second") and global_ in (None, "second"), seen_by["second"]


def test_environments_that_differ_get_their_own_server_and_are_applied(berth_session):
    with_x = whoami.options(runtime_env={"env_vars": {"X": "one"}})
    answers = _until_forked(with_x)
    assert {a["x"] for a in answers} == {"one"}
    other = _until_forked(whoami.options(runtime_env={"env_vars": {"X": "two"}}))
    assert {a["x"] for a in other} == {"two"}
    assert answers[-1]["ppid"] != other[-1]["ppid"], "one server per environment"


def test_a_forked_worker_that_is_killed_is_retried_and_its_logs_are_kept(berth_session, tmp_path):
    _until_forked(whoami)
    marker = tmp_path / "first-attempt"

    @berth.remote(num_cpus=0.1, max_retries=2, label_selector={"instance_type": "m5.16xlarge"})
    def dies_once(path):
        import pathlib

        p = pathlib.Path(path)
        print("attempt", os.environ["BERTH_ATTEMPT"], "says hello", flush=True)
        if not p.exists():
            p.write_text(f"{os.getpid()} {os.getppid()}")
            time.sleep(120)  # killed with -9 below
        return int(os.environ["BERTH_ATTEMPT"]), os.environ["BERTH_TASK_ID"]

    ref = dies_once.remote(str(marker))
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline, "the first attempt never started"
        time.sleep(0.05)
    pid, parent = map(int, marker.read_text().split())
    assert _server_of(parent), "the first attempt was forked"
    os.kill(pid, signal.SIGKILL)
    attempt, task_id = berth.get(ref, timeout=120)
    assert attempt == 2
    logs = berth_session.cli("logs", task_id)
    assert "attempt 1 says hello" in logs and "attempt 2 says hello" in logs, logs


def test_actors_are_forked_too(berth_session):
    @berth.remote(num_cpus=0.1, label_selector={"instance_type": "m5.16xlarge"})
    class Where:
        def where(self):
            return os.getppid(), os.environ["BERTH_ACTOR_ID"]

    deadline = time.monotonic() + 60
    while True:
        actor = Where.remote()
        parent, actor_id = berth.get(actor.where.remote(), timeout=60)
        berth.kill(actor)
        if _server_of(parent):
            break
        assert time.monotonic() < deadline, "no actor was forked"
    assert actor_id
