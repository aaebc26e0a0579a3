"""The worker as a fork server (``BERTH_FORK_SERVER=1``): a warm interpreter, with what a
task's worker imports already imported, from which the agent forks each attempt instead of starting
Python anew (about 1 ms instead of 50). The protocol is described in
``docs/worker-protocol.md`` (§ Fork servers); the agent's side is
``crates/berth-agent/src/process/fork_server.rs``.

The server stays single-threaded (forking a threaded process is unsafe): one loop reads the
agent's requests from stdin and learns of ended children through ``SIGCHLD`` written to a
wake-up pipe. Each child becomes exactly what a spawned worker would be: its own process
group, its log files as stdout and stderr, its working directory, its environment, and then
the worker's ``run``.
"""

from __future__ import annotations

# Standard library only: the agent's tests run this server with their own `run`.
import json
import os
import select
import signal
import sys
import traceback
from typing import Callable

# The agent reads replies from here: stdout as it was given, moved off fd 1 so that nothing
# printed by accident can break a line.
_replies = -1


def _send(message: dict) -> None:
    data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
    while data:
        data = data[os.write(_replies, data):]


def _child(request: dict, wake_fds, run: Callable[[], None]) -> None:
    """In the forked child: become the attempt, run the worker, never return."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in (*wake_fds, _replies):
            os.close(fd)
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        server_dir = os.getcwd()
        os.chdir(request["cwd"])
        # `python -m` put the server's directory first on the path; a spawned worker would
        # have had its own working directory there.
        if sys.path and sys.path[0] == server_dir:
            sys.path[0] = request["cwd"]
        _replace_environment(request["env"])
        run()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)  # as the interpreter does for sys.exit("message")
    except BaseException:  # noqa: BLE001 - reported in the attempt's stderr, as Python would
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _replace_environment(env: dict) -> None:
    """Makes ``os.environ`` exactly ``env``, touching only what differs (most of it is the
    agent's environment, the same for every attempt: rewriting all of it costs ~0.5 ms)."""
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if os.WIFSIGNALED(status):
            _send({"type": "exited", "pid": pid, "code": None, "signal": os.WTERMSIG(status)})
        elif os.WIFEXITED(status):
            _send({"type": "exited", "pid": pid, "code": os.WEXITSTATUS(status), "signal": None})


def _fork(request: dict, wake_fds, run: Callable[[], None]) -> None:
    number = request.get("request")
    try:
        pid = os.fork()
    except OSError as e:
        _send({"type": "failed", "request": number, "error": str(e)})
        return
    if pid == 0:
        _child(request, wake_fds, run)
    try:
        # Also here, so that the agent never signals a group that does not exist yet.
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it first, or already ended (its exit is reported)
    _send({"type": "forked", "request": number, "pid": pid})


def serve(run: Callable[[], None]) -> None:
    """Serves forks until stdin closes, each child calling ``run`` as the attempt (its return
    is exit code 0, ``SystemExit`` its code, an exception 1); children keep running after the
    server ends. Import what ``run`` needs before calling this: children inherit it."""
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
    _send({"type": "ready"})
    pending = b""
    while True:
        readable, _, _ = select.select([0, wake_r], [], [])
        if wake_r in readable:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            _reap()
        if 0 in readable:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                except ValueError as e:
                    print(f"berth fork server: unreadable request ({e}): {line[:200]!r}", file=sys.stderr)
                    return
                if request.get("type") != "fork":
                    print(f"berth fork server: unknown request {request.get('type')!r}", file=sys.stderr)
                    return
                _fork(request, (wake_r, wake_w), run)
