"""The worker as a fork server (``BERTH_FORK_SERVER=1``): a warm interpreter, with what a
task's worker imports already imported, from which the agent forks each attempt instead of starting
Python anew (about 1 ms instead of 50). The protocol is described in
``docs/worker-protocol.md`` (§ Fork servers); the agent's side is
``crates/berth-agent/src/process/fork_server.rs``.

The server stays single-threaded (forking a threaded process is unsafe): one loop reads the
agent's requests from stdin, its children's messages from one socket per child, and learns of
ended children through ``SIGCHLD`` written to a wake-up pipe. Each child becomes exactly what a
spawned worker would be: its own process group, its log files as stdout and stderr, its working
directory, its environment, and then the worker's ``run``.

A child whose ``run`` returns ``True`` may be *reused*, for an attempt of the same driver only
(``BERTH_DRIVER``: no driver's globals, modules or caches reach another's work): if it is still
alone (one thread, no child processes) and ran no GPU attempt, it tells the server it is done
instead of exiting,
the server reports the attempt as ended with code 0, and once the agent releases it, the
child waits (its stdio on ``/dev/null``) for the server to hand it the next attempt. Reuse
saves the fork, the exit and the copy-on-write faults of a fresh child: most of a small
task's cost. Idle children beyond ``MAX_IDLE`` or idle longer than ``IDLE_TIMEOUT_S`` are
told to exit (their socket is closed).
"""

from __future__ import annotations

# Standard library only: the agent's tests run this server with their own `run`.
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Callable, Dict, List, Optional

# The agent reads replies from here: stdout as it was given, moved off fd 1 so that nothing
# printed by accident can break a line.
_replies = -1

# Idle children kept for reuse per server, and how long one may wait for an attempt. A burst
# of small tasks is served by as many children as ran at once (a driver's batch places
# dozens at a time: 8 CPUs of 0.1-CPU tasks is 80); they exit once it is over. An idle child
# costs ~2.7 MB (proportional set size).
MAX_IDLE = 128
IDLE_TIMEOUT_S = 10.0
# Attempts one child runs before it exits anyway (what a long-lived worker may accumulate).
MAX_ATTEMPTS = 10_000

# The working directory of a reused child's last attempt.
_last_cwd: Optional[str] = None


def _send(message: dict) -> None:
    data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
    while data:
        data = data[os.write(_replies, data):]


class _Child:
    """The server's view of one child: its socket (None: it cannot be reused), and whether it
    runs an attempt, has said it is done (waiting for the agent's release) or is idle."""

    def __init__(self, pid: int, sock: Optional[socket.socket], driver: Optional[str]) -> None:
        self.pid = pid
        self.sock = sock
        self.state = "running"
        self.idle_since = 0.0
        self.pending = b""
        # Whose attempts it runs: a child is reused only for the same driver's.
        self.driver = driver


def _driver(request: dict) -> Optional[str]:
    """The driver an attempt's work belongs to (``BERTH_DRIVER``, set by the SDK's driver; else
    the address of its owner service); ``None`` when it names neither (a program of its own
    speaking the protocol: its attempts share idle children among themselves)."""
    env = request.get("env") or {}
    return env.get("BERTH_DRIVER") or env.get("BERTH_OWNER") or None


def _child(request: dict, sock: Optional[socket.socket], run: Callable[[], object]) -> None:
    """In the forked child (the server's descriptors closed): become the attempt and run the
    worker; between attempts (when reusable), wait on ``sock`` for the next one. Never
    returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setpgid(0, 0)
        server_dir = os.getcwd()
        attempts = 0
        while True:
            attempts += 1
            code, reusable = _attempt(request, server_dir, run)
            if sock is None or not (reusable and attempts < MAX_ATTEMPTS):
                break
            request = _next_request(sock)
            if request is None:
                code = 0
                break
    except BaseException:  # noqa: BLE001 - the attempt's stderr is the only place to say it
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _attempt(request: dict, server_dir: str, run: Callable[[], object]):
    """Runs one attempt as a spawned worker would; returns its exit code and whether this
    process may run another."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    # `python -m` put the server's directory first on the path; a spawned worker would have
    # had its own working directory there (a reused child: the last attempt's).
    global _last_cwd
    if sys.path and sys.path[0] in (server_dir, _last_cwd):
        sys.path[0] = request["cwd"]
    _last_cwd = request["cwd"]
    _replace_environment(request["env"])
    try:
        again = run()
    except SystemExit as e:
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)  # as the interpreter does for sys.exit("message")
        return (e.code if isinstance(e.code, int) else (0 if e.code is None else 1)), False
    except BaseException:  # noqa: BLE001 - reported in the attempt's stderr, as Python would
        traceback.print_exc()
        return 1, False
    return 0, again is True and _alone() and not request["env"].get("CUDA_VISIBLE_DEVICES")


def _alone() -> bool:
    """True when nothing of the attempt outlives it in this process: no other thread, no
    child process (a GPU attempt is never reused either: its CUDA context is bound to the
    devices it was given)."""
    if threading.active_count() != 1:
        return False
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/children") as f:
            return not f.read().strip()
    except OSError:
        return False  # cannot tell: do not reuse


def _next_request(sock: socket.socket) -> Optional[dict]:
    """Says the attempt is done and waits for the next one; None when told to exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sock.sendall(b'{"type":"done"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                return None
            data += chunk
        return json.loads(data)
    except (OSError, ValueError):
        return None


def _replace_environment(env: dict) -> None:
    """Makes ``os.environ`` exactly ``env``, touching only what differs (most of it is the
    agent's environment, the same for every attempt: rewriting all of it costs ~0.5 ms)."""
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


class _Server:
    def __init__(self, run: Callable[[], object], wake_fds) -> None:
        self.run = run
        self.wake_fds = wake_fds
        self.selector = selectors.DefaultSelector()
        self.children: Dict[int, _Child] = {}
        # Idle children, the most recently used last (it is taken first: warmest caches).
        self.idle: List[_Child] = []
        # Done children the agent has not released yet, oldest first.
        self.unreleased: List[_Child] = []

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is not None:
                self.forget(child)
            # Reported even for an idle child: the agent ignores PIDs it does not watch.
            if os.WIFSIGNALED(status):
                _send({"type": "exited", "pid": pid, "code": None, "signal": os.WTERMSIG(status)})
            elif os.WIFEXITED(status):
                _send({"type": "exited", "pid": pid, "code": os.WEXITSTATUS(status), "signal": None})

    def forget(self, child: _Child) -> None:
        """Stops talking to ``child``: an idle one then exits; its exit is reaped as any."""
        for waiting in (self.idle, self.unreleased):
            if child in waiting:
                waiting.remove(child)
        if child.sock is not None:
            self.selector.unregister(child.sock)
            child.sock.close()
            child.sock = None

    def fork(self, request: dict) -> None:
        number = request.get("request")
        line = (json.dumps(request, separators=(",", ":")) + "\n").encode()
        driver = _driver(request)
        while True:
            # The warmest idle child of the same driver: a process never carries one driver's
            # state (globals, modules, caches) into another's work.
            same = [c for c in self.idle if c.driver == driver]
            if not same:
                break
            child = same[-1]
            self.idle.remove(child)
            try:
                child.sock.sendall(line)
            except OSError:
                self.forget(child)  # it is ending; its exit is reported when reaped
                continue
            child.state = "running"
            _send({"type": "forked", "request": number, "pid": child.pid})
            return
        try:
            ours, theirs = socket.socketpair()
        except OSError:
            ours = theirs = None  # out of descriptors: this child will not be reused
        try:
            pid = os.fork()
        except OSError as e:
            for sock in (ours, theirs):
                if sock is not None:
                    sock.close()
            _send({"type": "failed", "request": number, "error": str(e)})
            return
        if pid == 0:
            # Nothing of the server's stays open in the child.
            self.selector.close()
            for sock in [ours, *(c.sock for c in self.children.values())]:
                if sock is not None:
                    sock.close()
            for fd in (*self.wake_fds, _replies):
                os.close(fd)
            _child(request, theirs, self.run)
        if theirs is not None:
            theirs.close()
        try:
            # Also here, so that the agent never signals a group that does not exist yet.
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first, or already ended (its exit is reported)
        child = _Child(pid, ours, driver)
        self.children[pid] = child
        if ours is not None:
            self.selector.register(ours, selectors.EVENT_READ, child)
        _send({"type": "forked", "request": number, "pid": pid})

    def from_child(self, child: _Child) -> None:
        try:
            chunk = child.sock.recv(4096)
        except OSError:
            chunk = b""
        if not chunk:
            self.forget(child)  # it is ending (its exit comes through SIGCHLD)
            return
        child.pending += chunk
        *lines, child.pending = child.pending.split(b"\n")
        for line in lines:
            if line.strip() == b'{"type":"done"}' and child.state == "running":
                child.state = "done"
                child.idle_since = time.monotonic()
                self.unreleased.append(child)
                _send({"type": "done", "pid": child.pid, "code": 0})

    def release(self, pid: object) -> None:
        child = self.children.get(pid) if isinstance(pid, int) else None
        if child is None or child.sock is None or child.state != "done":
            return  # ended meanwhile, or not one to release
        self.unreleased.remove(child)
        child.state = "idle"
        child.idle_since = time.monotonic()
        self.idle.append(child)
        if len(self.idle) > MAX_IDLE:
            self.forget(self.idle[0])

    def expire(self) -> Optional[float]:
        """Ends children idle (or waiting for a release that did not come) too long; returns
        how long until the next one may expire."""
        now = time.monotonic()
        next_in = None
        for waiting in (self.idle, self.unreleased):
            while waiting and now - waiting[0].idle_since >= IDLE_TIMEOUT_S:
                self.forget(waiting[0])
            if waiting:
                left = IDLE_TIMEOUT_S - (now - waiting[0].idle_since)
                next_in = left if next_in is None else min(next_in, left)
        return next_in


def serve(run: Callable[[], object]) -> None:
    """Serves forks until stdin closes, each child calling ``run`` as the attempt (its return
    is exit code 0, ``SystemExit`` its code, an exception 1; returning ``True`` offers the
    process for reuse); children keep running after the server ends, and idle ones exit.
    Import what ``run`` needs before calling this: children inherit it."""
    global _replies
    sys.stdout.flush()
    _replies = os.dup(1)
    os.dup2(2, 1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    # The agent's Ctrl-C and stops are not for the server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = _Server(run, (wake_r, wake_w))
    server.selector.register(0, selectors.EVENT_READ, "agent")
    server.selector.register(wake_r, selectors.EVENT_READ, "wake")
    _send({"type": "ready"})
    pending = b""
    while True:
        for key, _ in server.selector.select(server.expire()):
            if key.data == "wake":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                server.reap()
            elif key.data == "agent":
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    return
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip() and not _order(server, line):
                        return
            elif isinstance(key.data, _Child) and key.data.sock is not None:
                server.from_child(key.data)


def _order(server: _Server, line: bytes) -> bool:
    """Carries out one request of the agent's; False when it is unreadable (the server ends,
    and the agent gives it up)."""
    try:
        request = json.loads(line)
    except ValueError as e:
        print(f"berth fork server: unreadable request ({e}): {line[:200]!r}", file=sys.stderr)
        return False
    kind = request.get("type")
    if kind == "fork":
        server.fork(request)
    elif kind == "release":
        server.release(request.get("pid"))
    else:
        print(f"berth fork server: unknown request {kind!r}", file=sys.stderr)
        return False
    return True
