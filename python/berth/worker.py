"""The worker entry point the agents start for Python tasks and actors:
``python -m berth.worker``.

It reads who it is from its environment (``BERTH_TASK_ID`` or ``BERTH_ACTOR_ID``,
``BERTH_ATTEMPT``, ``BERTH_WORK_KEY``, set by the agent; ``BERTH_OWNER`` and ``BERTH_CALL``, set
by the driver that submitted it), fetches its function or class and arguments from the owner,
and then:

- a task runs the function, hands the result (or the exception, with its traceback) to the
  owner and exits 0 (forked by a fork server, its process may instead be reused for a later
  task: ``max_calls``); a worker killed before that is retried by the head (``max_retries``)
  and the next attempt fetches the same call again (told ``done`` when an earlier attempt's
  result did arrive, it exits 0 without running it);
- an actor builds its instance, listens on a TCP port, tells the head where
  (``PUT /api/v1/actors/{id}/endpoint``, with its work key) and serves method calls, one at a
  time in the order they arrive (``max_concurrency`` > 1: that many at once).
"""

from __future__ import annotations

# Imports are kept to what a task needs: a task's worker is a new process per run, and its
# start-up is most of a small task's cost. Actors import the rest when they start serving.
import os
import socket
import sys
import types

from . import _protocol
from ._serialize import CODEC, Packed, error_payload, loads, pack

# Exit codes: the head retries or restarts on any non-zero code within its limits.
EXIT_SETUP = 3
# A caller named a later attempt of this actor: this copy is stale (the head has moved on).
EXIT_SUPERSEDED = 4
# Calls an async actor runs at once unless its max_concurrency says otherwise (Ray's default).
ASYNC_CONCURRENCY = 1000
# How long a worker keeps trying to reach the driver that owns its call: longer than a job's
# default lease (30 s), so that a killed driver's job ends (and this attempt is cancelled) first.
def _owner_wait_s() -> float:
    text = os.environ.get("BERTH_OWNER_WAIT_S") or "60"
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86400:
        print(f"berth.worker: $BERTH_OWNER_WAIT_S={text!r} is not a number of seconds from 0 to 86400",
              file=sys.stderr)
        sys.exit(EXIT_SETUP)
    return value


OWNER_WAIT_S = _owner_wait_s()


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        print(f"berth.worker: ${name} is not set: this program is started by a Berth agent", file=sys.stderr)
        sys.exit(EXIT_SETUP)
    return value


# Connections to owners, kept by a worker process that its fork server reuses for another
# attempt (most of a driver's tasks share one owner).
_owner_conns = {}
# Calls of each function this process ran, for `max_calls`.
_calls = {}
# Functions this process has unpickled, by their pickled bytes (a reused worker mostly runs
# the same few functions); bounded, as a worker may live for many tasks.
_functions = {}
_MAX_FUNCTIONS = 64


def _function(pickled: bytes):
    function = _functions.get(pickled)
    if function is None:
        if len(_functions) >= _MAX_FUNCTIONS:
            _functions.clear()
        function = _functions[pickled] = loads(pickled)
    return function


def _cached_conn(owner: str):
    """A kept connection to ``owner`` that the other side has not closed (a closed one reads
    as ready: EOF)."""
    import select

    conn = _owner_conns.pop(owner, None)
    if conn is None:
        return None
    try:
        if not select.select([conn], [], [], 0)[0]:
            return conn
    except (OSError, ValueError):
        pass
    conn.close()
    return None


def _drop_conn(owner: str, conn) -> None:
    """Forgets and closes a broken connection to ``owner``."""
    if conn is None:
        return
    if _owner_conns.get(owner) is conn:
        del _owner_conns[owner]
    try:
        conn.close()
    except OSError:
        pass


class Worker:
    def __init__(self) -> None:
        self.owner_conn = None
        self.work_id = os.environ.get("BERTH_ACTOR_ID") or _env("BERTH_TASK_ID")
        self.is_actor = bool(os.environ.get("BERTH_ACTOR_ID"))
        self.attempt = int(_env("BERTH_ATTEMPT"))
        self.key = _env("BERTH_WORK_KEY")
        self.owner = _env("BERTH_OWNER")
        self.call = _env("BERTH_CALL")

    def ask_owner(self, header, payload: "bytes | Packed" = b""):
        """Sends ``header`` and ``payload`` to the driver that owns the call; its answer. A
        driver that cannot be reached is tried again for ``OWNER_WAIT_S``: one that was killed
        has its job end within its lease, and the head then ends this attempt (cancelled, not
        failed); one cut off for longer fails the attempt, which the head may retry."""
        header = dict(header, call=self.call, work_id=self.work_id, key=self.key, attempt=self.attempt)
        deadline = None
        delay = 0.1
        while True:
            if self.owner_conn is None:
                self.owner_conn = _cached_conn(self.owner)
            try:
                if self.owner_conn is None:
                    self.owner_conn = _protocol.connect(self.owner, timeout=30)
                _protocol.send(self.owner_conn, header, payload)
                reply, body = _protocol.recv(self.owner_conn)
                break
            except (OSError, EOFError, _protocol.ProtocolError) as e:
                _drop_conn(self.owner, self.owner_conn)
                self.owner_conn = None
                import time

                if deadline is None:
                    deadline = time.monotonic() + OWNER_WAIT_S
                    print(f"berth.worker: cannot reach the driver that owns {self.work_id} at {self.owner}: {e}; "
                          f"trying again for {OWNER_WAIT_S:.0f} s (if the driver is gone, its job ends and this "
                          "attempt with it)", file=sys.stderr, flush=True)
                if time.monotonic() >= deadline:
                    print(f"berth.worker: the driver that owns {self.work_id} stayed out of reach", file=sys.stderr)
                    sys.exit(EXIT_SETUP)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        if not reply.get("ok"):
            print(f"berth.worker: the driver refused {header['op']}: {reply.get('error')}", file=sys.stderr)
            sys.exit(EXIT_SETUP)
        return reply, body

    def run(self) -> bool:
        """Runs the task (True after it: this process may run another) or the actor (never
        returns)."""
        reply, body = self.ask_owner({"op": "fetch"})
        if reply.get("done"):
            # An earlier attempt handed the result back (its node died before the head heard
            # the exit): exit 0 without running the call again, and the task is FINISHED.
            print(f"berth.worker: {self.work_id}'s result has already arrived at its driver; nothing to run",
                  file=sys.stderr)
            return False
        packaged = bool(os.environ.get("BERTH_WORKING_DIR") or os.environ.get("BERTH_PY_MODULES"))
        if packaged:
            # Before the function is unpickled: it may import what they hold.
            from . import _packages

            _packages.apply(lambda digest: self.ask_owner({"op": "package", "digest": digest})[1])
        if reply.get("codec") != CODEC:
            print(f"berth.worker: cannot read codec {reply.get('codec')!r}", file=sys.stderr)
            sys.exit(EXIT_SETUP)
        spec = loads(body)
        if self.is_actor:
            self.run_actor(spec)
            return False
        again = self.run_task(spec)
        del spec, body
        borrowing = sys.modules.get("berth._borrowing")  # loaded by a task that got a ref
        if borrowing is not None:
            # Its refs are gone with its arguments: their holders hear so now, and the
            # release thread ends, so this process may run another task.
            borrowing.settle()
        _owner_conns[self.owner] = self.owner_conn
        # Its packages changed this process's path and modules: no other task may inherit them.
        return again and not packaged

    def run_task(self, spec) -> bool:
        """Runs the function and hands back its result; True when this process may run
        another task (``max_calls`` not reached)."""
        try:
            function = _function(spec["function_pickled"])
        except Exception as e:  # noqa: BLE001 - e.g. a module the driver has and this node lacks
            self.ask_owner({"op": "result", "status": "error"}, error_payload(e, "unpickling the task's function"))
            return False
        name = getattr(function, "__qualname__", repr(function))
        key = (getattr(function, "__module__", None), name)
        _calls[key] = _calls.get(key, 0) + 1
        max_calls = spec.get("max_calls") or 0
        try:
            value = function(*spec["args"], **spec["kwargs"])
            if isinstance(value, types.CoroutineType):
                import asyncio

                value = asyncio.run(value)
            elif isinstance(value, (types.GeneratorType, types.AsyncGeneratorType)):
                # Each value goes to the owner as it is yielded; the result is how many.
                value = self.stream(value)
            header, payload = {"op": "result", "status": "ok"}, _carried(value)
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
            if isinstance(e, (SystemExit, KeyboardInterrupt)) and not isinstance(e, Exception):
                e = RuntimeError(f"{name} raised {type(e).__name__}({e})")
            header, payload = {"op": "result", "status": "error"}, error_payload(e, name)
        self.ask_owner(header, payload)
        # Not imported for a task that did not use it (a task's start-up is most of its cost).
        _runtime = sys.modules.get("berth._runtime")
        if _runtime is not None and _runtime.is_initialized():
            # The task created work: what it owns ends with this process (the head hears of
            # the results that arrived first).
            _runtime.shutdown()
            return False
        return max_calls == 0 or _calls[key] < max_calls

    def stream(self, generator) -> int:
        """Hands each value of ``generator`` (or an async generator) to the owner as it is
        yielded; returns how many there were."""
        count = 0
        for value in _values(generator):
            self.ask_owner({"op": "yield", "status": "ok", "index": count}, _carried(value))
            count += 1
        return count

    def run_actor(self, spec) -> None:
        import traceback

        cls = spec["cls"]
        name = getattr(cls, "__qualname__", repr(cls))
        try:
            instance = cls(*spec["args"], **spec["kwargs"])
        except BaseException as e:  # noqa: BLE001 - reported to the owner, which kills the actor
            traceback.print_exc()
            self.ask_owner({"op": "result", "status": "error"}, error_payload(e, f"{name}.__init__"))
            sys.exit(1)
        # With standby heads the variable lists every address: register with the active one.
        from ._client import active_head

        head = active_head(_env("BERTH_ADDRESS"), os.environ.get("BERTH_CA") or None)
        # On the address its node registered with ($BERTH_NODE_IP), unless $BERTH_BIND says.
        host, advertise = _protocol.listen_address(head)
        server = ActorServer(instance, name, self.key, spec.get("max_concurrency"), host)
        register(head, self.work_id, self.attempt, self.key, f"{advertise}:{server.port}")
        server.serve_forever()


def register(head: str, actor_id: str, attempt: int, key: str, address: str) -> None:
    """Tells the head where this actor's process listens."""
    import json
    import ssl
    import urllib.request

    url = f"{head.rstrip('/')}/api/v1/actors/{actor_id}/endpoint"
    body = json.dumps({"attempt": attempt, "address": address}).encode()
    request = urllib.request.Request(url, data=body, method="PUT", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        context = None
        if url.startswith("https://"):
            ca = os.environ.get("BERTH_CA")
            if not ca:
                # Trust the head's CA only, never the system's: the agent always sets it.
                raise ValueError(f"the head at {head} serves TLS and $BERTH_CA names no CA file")
            context = ssl.create_default_context(cafile=ca)
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            answer.read()
    except Exception as e:  # noqa: BLE001 - without it no caller can reach us: stop
        detail = e.read().decode(errors="replace") if hasattr(e, "read") else ""
        print(f"berth.worker: the head refused {actor_id}'s endpoint: {e} {detail}", file=sys.stderr)
        sys.exit(EXIT_SETUP)


def _carried(value) -> Packed:
    """A task's value pickled with the values of the refs in it: its process ends after."""
    objects = sys.modules.get("berth._objects")  # loaded by anything that made or got a ref
    if objects is None:
        return pack(value)
    with objects.inlining():
        return pack(value)


def _values(generator):
    """The values of a generator, or of an async generator (run on an event loop of its own)."""
    if isinstance(generator, types.GeneratorType):
        yield from generator
        return
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(generator.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.close()


class ActorServer:
    """Serves method calls of one instance; callers must present the actor's work key."""

    def __init__(self, instance, name: str, key: str, concurrency, host: str) -> None:
        import inspect
        import queue
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.instance, self.name, self.key = instance, name, key
        self.sock = _protocol.listen(host)
        self.port = self.sock.getsockname()[1]
        self.calls = queue.Queue()
        # An actor with an `async def` method is an async actor (as in Ray): every call runs
        # on one event loop, at most max_concurrency at once (1000 by default).
        cls = type(instance)
        self.loop = None
        self.pool = None
        if any(inspect.iscoroutinefunction(m) or inspect.isasyncgenfunction(m)
               for n in dir(cls) if not n.startswith("__") for m in [getattr(cls, n, None)]):
            import asyncio

            self.loop = asyncio.new_event_loop()
            limit = int(concurrency or ASYNC_CONCURRENCY)
            threading.Thread(target=self.loop.run_forever, daemon=True, name="berth-actor-loop").start()

            async def slots():
                return asyncio.Semaphore(limit)

            # Made on its loop (before Python 3.10 a semaphore binds to the loop it is made on).
            self.slots = asyncio.run_coroutine_threadsafe(slots(), self.loop).result()
        elif int(concurrency or 1) > 1:
            # max_concurrency > 1 runs that many calls at once, on threads.
            self.pool = ThreadPoolExecutor(int(concurrency), thread_name_prefix="berth-actor")
        # Otherwise one thread runs the calls in arrival order.
        threading.Thread(target=self._run_calls, daemon=True, name="berth-actor-calls").start()

    def serve_forever(self) -> None:
        import threading

        while True:
            conn, _ = self.sock.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="berth-actor-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        import threading

        send_lock = threading.Lock()
        with conn:
            try:
                hello, _ = _protocol.recv(conn, lambda header, length: "a hello takes no payload")
                key = hello.get("key")
                if hello.get("op") != "hello" or not isinstance(key, str) or key.lower() != self.key.lower():
                    _protocol.send(conn, {"ok": False, "error": "wrong work key"})
                    return
                mine = int(os.environ.get("BERTH_ATTEMPT", "0"))
                wanted = hello.get("attempt")
                if isinstance(wanted, int) and wanted != mine:
                    # The caller knows another attempt than this one: never answer for it.
                    _protocol.send(conn, {"ok": False, "error": f"this is attempt {mine}, not {wanted}",
                                          "attempt": mine})
                    if wanted > mine:
                        # A later attempt exists: this process is a stale copy, and ends.
                        print(f"berth.worker: attempt {mine} superseded by attempt {wanted}; exiting",
                              file=sys.stderr, flush=True)
                        os._exit(EXIT_SUPERSEDED)
                    return
                _protocol.send(conn, {"ok": True, "attempt": mine})
                while True:
                    # Unnamed: a call's arguments must not outlive it here.
                    self.calls.put((conn, send_lock, *_protocol.recv(conn)))
            except (EOFError, OSError, _protocol.ProtocolError):
                return

    def _run_calls(self) -> None:
        import asyncio

        while True:
            item = self.calls.get()
            if self.loop is not None:
                # Scheduled in arrival order; each waits for a slot on the loop.
                asyncio.run_coroutine_threadsafe(self._acall(*item), self.loop)
            elif self.pool is not None:
                self.pool.submit(self._call, *item)
            else:
                self._call(*item)
            del item

    def _call(self, conn: socket.socket, send_lock, header: dict, payload: "bytes | Packed") -> None:
        seq = header.get("seq")
        full = f"{self.name}.{header.get('method')}"
        try:
            method, args, kwargs = self._method(header, payload)
            value = method(*args, **kwargs)
            if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType)):
                value = self._stream(conn, send_lock, seq, _values(value))
            reply, body = {"seq": seq, "status": "ok"}, pack(value)
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
            reply, body = self._failed(seq, e, full)
        self._reply(conn, send_lock, reply, body)

    async def _acall(self, conn: socket.socket, send_lock, header: dict, payload: "bytes | Packed") -> None:
        """A call of an async actor, on its event loop: a coroutine method is awaited (other
        calls run meanwhile), a plain one runs on the loop as Ray runs it."""
        import inspect

        seq = header.get("seq")
        full = f"{self.name}.{header.get('method')}"
        async with self.slots:
            try:
                method, args, kwargs = self._method(header, payload)
                value = method(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
                elif isinstance(value, types.AsyncGeneratorType):
                    count = 0
                    async for item in value:  # each sent as soon as it is yielded
                        self._yielded(conn, send_lock, seq, count, item)
                        count += 1
                    value = count
                elif isinstance(value, types.GeneratorType):
                    value = self._stream(conn, send_lock, seq, value)
                reply, body = {"seq": seq, "status": "ok"}, pack(value)
            except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
                reply, body = self._failed(seq, e, full)
        self._reply(conn, send_lock, reply, body)

    def _stream(self, conn: socket.socket, send_lock, seq, values) -> int:
        """Sends each of ``values`` to the caller as it comes; returns how many."""
        count = 0
        for item in values:
            self._yielded(conn, send_lock, seq, count, item)
            count += 1
        return count

    def _yielded(self, conn: socket.socket, send_lock, seq, index: int, item) -> None:
        self._reply(conn, send_lock, {"seq": seq, "status": "yield", "index": index}, pack(item))

    def _method(self, header: dict, payload: "bytes | Packed"):
        args, kwargs = loads(payload)
        return getattr(self.instance, str(header.get("method"))), args, kwargs

    @staticmethod
    def _failed(seq, e: BaseException, full: str):
        if isinstance(e, SystemExit):
            # An actor that exits ends its process (the head may restart it).
            os._exit(int(e.code) if isinstance(e.code, int) else 1)
        return {"seq": seq, "status": "error"}, error_payload(e, full)

    @staticmethod
    def _reply(conn: socket.socket, send_lock, reply: dict, body: "bytes | Packed") -> None:
        try:
            with send_lock:
                _protocol.send(conn, reply, body)
        except OSError:
            pass


def main() -> None:
    """Runs the worker; never returns for actors. Started by an agent as a fork server
    (``BERTH_FORK_SERVER=1``), serves forks of itself instead (see ``_fork_server``)."""
    if os.environ.get("BERTH_FORK_SERVER") == "1":
        # What a task's worker would import on its first connection, done once here so that
        # every child has it for free (the IDNA codec is imported by the first getaddrinfo of
        # a name: ~1 ms per child otherwise). Actors' heavier imports (urllib) are left to
        # them: each module in the server makes every fork slower.
        import encodings.idna  # noqa: F401
        import traceback  # noqa: F401

        try:
            socket.getaddrinfo("localhost", 0)
        except OSError:
            pass  # no name resolution here: children pay for it themselves, as spawned ones do
        from . import _fork_server

        _fork_server.serve(lambda: Worker().run())
        return
    Worker().run()


if __name__ == "__main__":
    main()
