"""``@berth.remote``: functions that run as tasks, classes whose instances live in actors, and
the handles through which a driver calls them."""

from __future__ import annotations

import functools
import inspect
import itertools
import socket
import threading
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from . import _options, _protocol, _runtime
from ._objects import ObjectRef, ObjectRefGenerator, ObjectState, get
from ._owner import Call
from ._serialize import Packed, dumps, error_from, loads, pack, ship_by_value, size_of
from .exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    BerthError,
    NotFoundError,
    RequestError,
)

WORKER_ARGS = ["-m", "berth.worker"]


def _worker_env(runtime, call: Call, options: Dict[str, Any]) -> Dict[str, str]:
    """The worker's own variables: its owner and call, and the packages its runtime_env names
    (each directory packed once per session)."""
    env = {
        "BERTH_OWNER": runtime.owner.address,
        "BERTH_CALL": call.id,
        "BERTH_DRIVER": runtime.driver_id,
    }
    runtime_env = options.get("runtime_env")
    if isinstance(runtime_env, dict) and ("working_dir" in runtime_env or "py_modules" in runtime_env):
        from . import _packages

        env.update(_packages.runtime_env_packages(runtime_env, runtime.owner.packages, runtime.packed))
    return env


def _has_refs(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(a, ObjectRef) for a in itertools.chain(args, kwargs.values()))


def _resolve(args: tuple, kwargs: dict) -> Tuple[tuple, dict]:
    """Top-level ObjectRef arguments replaced by their values (their errors raised)."""
    args = tuple(get(a) if isinstance(a, ObjectRef) else a for a in args)
    kwargs = {k: get(v) if isinstance(v, ObjectRef) else v for k, v in kwargs.items()}
    return args, kwargs


# ---------------------------------------------------------------------------------------------
# Tasks.


class RemoteFunction:
    """A function that runs as a Berth task: ``f.remote(...)`` returns an ``ObjectRef``."""

    def __init__(self, function: Callable, options: Dict[str, Any]) -> None:
        self._function = function
        self._options = _options.validate_options(dict(options), "task")
        self._pickled: Optional[bytes] = None
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"remote function {self._function.__qualname__} cannot be called directly: use "
            f"{self._function.__name__}.remote(...)"
        )

    def options(self, **options: Any) -> "RemoteFunction":
        """The same function with these options changed (``num_cpus``, ``label_selector``...)."""
        merged = dict(self._options)
        merged.update(options)
        clone = RemoteFunction(self._function, merged)
        clone._pickled = self._pickled
        return clone

    def remote(self, *args: Any, **kwargs: Any):
        """Submits one run; returns its ``ObjectRef`` (a list of ``num_returns`` refs when that
        is more than 1). Options are checked here, before anything is sent."""
        runtime = _runtime.current()
        name = self._function.__qualname__
        streaming = _streams(self._function, self._options.get("num_returns"))
        num_returns = 1 if streaming else int(self._options.get("num_returns", 1) or 1)
        states = [ObjectState(name) for _ in range(num_returns)]
        refs = [ObjectRef(s) for s in states]
        if self._pickled is None:
            ship_by_value(self._function)
            self._pickled = dumps(self._function)
        call = Call("task", b"", states, name)
        if streaming:
            call.stream = ObjectRefGenerator(states[0])
        body = _options.task_body(self._options, runtime.python, WORKER_ARGS, _worker_env(runtime, call, self._options))
        body["fork_server"] = runtime.fork_server
        body.setdefault("name", name[:253])
        body.setdefault("namespace", runtime.namespace)
        body.update(runtime.ownership())
        pickled = self._pickled
        if _has_refs(args, kwargs):
            # Submitted once its arguments' results are in, from a submitter thread.
            runtime.submitter.submit(_submit_task, runtime, call, body, pickled, args, kwargs, self._options)
        else:
            call.payload = _task_payload(pickled, args, kwargs, self._options)
            runtime.tasks.submit(call, body)
        if call.stream is not None:
            return call.stream
        return refs[0] if num_returns == 1 else refs


def _streams(function: Any, num_returns: Any) -> bool:
    """Whether calling ``function`` returns an ``ObjectRefGenerator``: a generator function (or
    ``num_returns="streaming"``, Ray's name; ``"dynamic"`` is taken the same way)."""
    return (num_returns in ("streaming", "dynamic") or inspect.isgeneratorfunction(function)
            or inspect.isasyncgenfunction(function))


def _task_payload(pickled: bytes, args: tuple, kwargs: dict, options: Dict[str, Any]) -> Packed:
    """What the task's worker fetches: the function (as pickled once per function: a reused
    worker unpickles it only the first time), its arguments (as they are now), and how many
    calls its process may run (``max_calls``, 0 for no limit) before it must exit."""
    return pack({"function_pickled": pickled, "args": args, "kwargs": kwargs,
                  "max_calls": options.get("max_calls", 0)}, snapshot=True)


def _submit_task(runtime, call: Call, body: dict, pickled: bytes, args: tuple, kwargs: dict,
                 options: Dict[str, Any]) -> None:
    """Waits for the results the arguments name, then queues the task for the batcher."""
    try:
        args, kwargs = _resolve(args, kwargs)
        call.payload = _task_payload(pickled, args, kwargs, options)
    except BaseException as e:  # noqa: BLE001 - the caller sees it in get()
        for state in call.states:
            state.set_error(e)
        return
    runtime.tasks.submit(call, body)


# ---------------------------------------------------------------------------------------------
# Actors.


def _method_names(cls: type) -> Dict[str, int]:
    """Public method names and their ``num_returns`` (``@berth.method``)."""
    return {n: "streaming" if _streams(m, getattr(m, "__berth_num_returns__", 1))
            else getattr(m, "__berth_num_returns__", 1)
            for n, m in inspect.getmembers(cls) if callable(m) and not n.startswith("__")}


class ActorClass:
    """A class whose instances live in Berth actors: ``Cls.remote(...)`` returns an
    ``ActorHandle``."""

    def __init__(self, cls: type, options: Dict[str, Any]) -> None:
        self._cls = cls
        self._options = _options.validate_options(dict(options), "actor")
        self._pickled: Optional[bytes] = None
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__doc__ = cls.__doc__
        self.__module__ = cls.__module__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"actor class {self._cls.__qualname__} cannot be instantiated directly: use "
            f"{self._cls.__name__}.remote(...)"
        )

    def options(self, **options: Any) -> "ActorClass":
        """The same class with these options changed (``labels``, ``scheduling_strategy``...)."""
        merged = dict(self._options)
        merged.update(options)
        clone = ActorClass(self._cls, merged)
        clone._pickled = self._pickled
        return clone

    def remote(self, *args: Any, **kwargs: Any) -> "ActorHandle":
        """Creates the actor (accepted by the head on return; placed now or when it can be)."""
        runtime = _runtime.current()
        if self._pickled is None:
            ship_by_value(self._cls)
            self._pickled = dumps(self._cls)
        args, kwargs = _resolve(args, kwargs)
        name = self._cls.__qualname__
        spec = {"cls": loads(self._pickled), "args": args, "kwargs": kwargs,
                "max_concurrency": self._options.get("max_concurrency")}
        call = Call("actor", pack(spec, snapshot=True), [], name)
        body = _options.actor_body(self._options, runtime.python, WORKER_ARGS, _worker_env(runtime, call, self._options))
        body["fork_server"] = runtime.fork_server
        body.setdefault("namespace", runtime.namespace)
        body.update(runtime.ownership())
        runtime.owner.add(call)
        try:
            actor = runtime.client.create("/api/v1/actors", body)
        except BaseException:
            runtime.owner.forget(call)
            raise
        handle = ActorHandle(actor["actor_id"], actor["work_key"], name, _method_names(self._cls),
                             actor.get("namespace", runtime.namespace), actor.get("name"))
        connection = handle._connection()

        def constructor_failed(error: BaseException) -> None:
            connection.fail(ActorDiedError(actor["actor_id"], f"its constructor raised: {error}", cause=error))
            runtime.submitter.submit(_kill_quietly, runtime, actor["actor_id"])

        # Set before binding: binding lets the worker fetch its spec, and a constructor that
        # raises at once reports before this function returns. Bound first, the report found no
        # hook and the caller saw only "exited with code 1".
        call.on_failed = constructor_failed
        runtime.owner.bind(call, actor["actor_id"], actor["work_key"])
        return handle


def _kill_quietly(runtime, actor_id: str) -> None:
    try:
        runtime.client.request("DELETE", f"/api/v1/actors/{actor_id}", allow=(404,))
    except BerthError:
        pass


class ActorMethod:
    """``handle.method``: call it with ``.remote(...)``."""

    def __init__(self, handle: "ActorHandle", name: str, num_returns: int = 1) -> None:
        self._handle, self._name, self._num_returns = handle, name, num_returns

    def remote(self, *args: Any, **kwargs: Any):
        """Sends the call (after every earlier call of this handle); returns its ``ObjectRef``."""
        if _has_refs(args, kwargs):
            args, kwargs = _resolve(args, kwargs)
        return self._handle._connection().call(self._name, args, kwargs, self._num_returns)

    def options(self, num_returns: Any = 1, **unknown: Any) -> "ActorMethod":
        """Per-call options: ``num_returns`` (``"streaming"``: an ``ObjectRefGenerator``)."""
        if unknown:
            from .exceptions import InvalidRequestError

            raise InvalidRequestError("options", f"unknown method option(s) {sorted(unknown)}; known: num_returns")
        if num_returns in ("streaming", "dynamic"):
            return ActorMethod(self._handle, self._name, "streaming")
        if not isinstance(num_returns, int) or num_returns < 1:
            from .exceptions import InvalidRequestError

            raise InvalidRequestError("num_returns", f"{num_returns!r} is not an integer of at least 1")
        return ActorMethod(self._handle, self._name, num_returns)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"actor method {self._name} cannot be called directly: use .{self._name}.remote(...)")


class ActorHandle:
    """A handle on an actor: ``handle.method.remote(...)``. Calls through one handle run in the
    order they were made. The handle follows the actor across restarts."""

    def __init__(self, actor_id: str, key: str, class_name: str, methods: Optional[Dict[str, int]],
                 namespace: str, name: Optional[str]) -> None:
        self._actor_id, self._key, self._class_name = actor_id, key, class_name
        self._methods = methods
        self._namespace, self._name = namespace, name

    @property
    def actor_id(self) -> str:
        """The actor's ID (``actor-3``)."""
        return self._actor_id

    def _connection(self) -> "ActorConnection":
        return connection_for(self._actor_id, self._key)

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("__"):
            raise AttributeError(name)
        if self._methods is not None and name not in self._methods:
            raise AttributeError(
                f"actor {self._class_name} ({self._actor_id}) has no method {name!r}; it has "
                f"{', '.join(sorted(self._methods)) or 'none'}"
            )
        return ActorMethod(self, name, self._methods.get(name, 1) if self._methods else 1)

    def __repr__(self) -> str:
        return f"ActorHandle({self._class_name}, {self._actor_id})"

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._key, self._class_name, self._methods,
                              self._namespace, self._name))


_connections: Dict[str, "ActorConnection"] = {}
_connections_lock = threading.Lock()


def connection_for(actor_id: str, key: str) -> "ActorConnection":
    with _connections_lock:
        conn = _connections.get(actor_id)
        if conn is None:
            conn = _connections[actor_id] = ActorConnection(actor_id, key)
        return conn


def actor_died(actor_id: str, error: BaseException) -> None:
    """Fails every call of this driver on ``actor_id`` (it was killed here)."""
    with _connections_lock:
        conn = _connections.get(actor_id)
    if conn is not None:
        conn.fail(error)


def close_connections() -> None:
    with _connections_lock:
        conns = list(_connections.values())
        _connections.clear()
    for conn in conns:
        conn.close()


class ActorConnection:
    """The calls of this driver to one actor: sent in order over one TCP connection, answered
    by sequence number. When the actor's process stops, calls not yet sent wait for the next
    attempt; calls already sent fail (they may or may not have run)."""

    def __init__(self, actor_id: str, key: str) -> None:
        self.actor_id, self.key = actor_id, key
        self._cond = threading.Condition()
        self._queue: Deque[Tuple[int, str, Packed, List[ObjectState]]] = deque()
        self._inflight: Dict[int, List[ObjectState]] = {}
        # What the arguments of calls sent name, kept until their answers: the values of the
        # refs in them must outlive the call.
        self._holds: Dict[int, list] = {}
        # Calls of generator methods: where their values go as they are yielded.
        self._streams: Dict[int, ObjectRefGenerator] = {}
        self._seq = itertools.count(1)
        self._sock: Optional[socket.socket] = None
        self._attempt = 0
        self._dead: Optional[BaseException] = None
        self._closed = False
        threading.Thread(target=self._send_loop, daemon=True, name=f"berth-{actor_id}").start()

    def call(self, method: str, args: tuple, kwargs: dict, num_returns):
        payload = pack((args, kwargs), snapshot=True)
        streaming = num_returns == "streaming"
        states = [ObjectState(f"{self.actor_id}.{method}") for _ in range(1 if streaming else num_returns)]
        for s in states:
            s.work_id = self.actor_id
            s.bound.set()
        stream = ObjectRefGenerator(states[0]) if streaming else None
        with self._cond:
            if self._dead is not None:
                for s in states:
                    s.set_error(self._dead)
            else:
                seq = next(self._seq)
                if stream is not None:
                    self._streams[seq] = stream
                self._queue.append((seq, method, payload, states))
                self._cond.notify_all()
        if stream is not None:
            return stream
        refs = [ObjectRef(s) for s in states]
        return refs[0] if num_returns == 1 else refs

    def fail(self, error: BaseException) -> None:
        """The actor is gone for good: every call, queued or sent, fails with ``error``."""
        with self._cond:
            if self._dead is None:
                self._dead = error
            pending = [states for _, _, _, states in self._queue] + list(self._inflight.values())
            self._queue.clear()
            self._inflight.clear()
            self._holds.clear()
            self._streams.clear()
            self._cond.notify_all()
        for states in pending:
            for s in states:
                s.set_error(error)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            sock, self._sock = self._sock, None
            self._cond.notify_all()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _connect(self) -> bool:
        """Finds the current attempt's endpoint at the head and connects; False when the actor
        is dead (then every call has failed)."""
        runtime = _runtime.current()
        while not self._closed:
            try:
                _, answer = runtime.client.request(
                    "GET", f"/api/v1/actors/{self.actor_id}/endpoint",
                    query={"after_attempt": self._attempt, "timeout_s": 30}, timeout=60, allow=(408,))
            except NotFoundError:
                self.fail(ActorDiedError(self.actor_id, "the head does not know it (it ended and was forgotten)"))
                return False
            except RequestError as e:
                self.fail(ActorUnavailableError(f"cannot find {self.actor_id}: {e}"))
                return False
            except BerthError as e:
                self.fail(ActorUnavailableError(f"cannot find {self.actor_id}: {e}"))
                return False
            if not isinstance(answer, dict) or "state" not in answer:
                continue  # 408: not listening yet; ask again
            if answer["state"] == "DEAD":
                self.fail(ActorDiedError(self.actor_id, answer.get("death_reason") or "dead"))
                return False
            endpoint = answer["endpoint"]
            self._attempt = int(endpoint["attempt"])
            try:
                sock = _protocol.connect(endpoint["address"])
                hello = {"op": "hello", "key": self.key, "version": _protocol.VERSION, "attempt": self._attempt}
                _protocol.send(sock, hello)
                reply, _ = _protocol.recv(sock)
            except (OSError, EOFError, _protocol.ProtocolError):
                continue  # that process is gone already: wait for a later attempt
            if not reply.get("ok") and "attempt" in reply:
                # Another attempt than the head named listens there: ask the head again.
                sock.close()
                continue
            if not reply.get("ok"):
                self.fail(ActorUnavailableError(f"{self.actor_id} refused this driver: {reply.get('error')}"))
                return False
            with self._cond:
                self._sock = sock
            threading.Thread(target=self._receive_loop, args=(sock,), daemon=True,
                             name=f"berth-{self.actor_id}-replies").start()
            return True
        return False

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._dead is None and not self._queue:
                    self._cond.wait()
                if self._closed or self._dead is not None:
                    return
                sock = self._sock
            if sock is None:
                if not self._connect():
                    return
                continue
            with self._cond:
                if self._sock is not sock or not self._queue:
                    continue
                seq, method, payload, states = self._queue.popleft()
                self._inflight[seq] = states
                if payload.holds:
                    self._holds[seq] = payload.holds
            try:
                _protocol.send(sock, {"op": "call", "seq": seq, "method": method}, payload)
            except OSError:
                self._broken(sock)
            # The call's arguments stay alive through _holds only, until its answer.
            del payload, states

    def _receive_loop(self, sock: socket.socket) -> None:
        while True:
            try:
                self._answer(_protocol.recv(sock))
            except (EOFError, OSError, _protocol.ProtocolError):
                self._broken(sock)
                return
            except BaseException:  # noqa: BLE001 - calls in flight must fail, never hang
                self._broken(sock)
                raise

    def _answer(self, message) -> None:
        """One answer from the actor: a yielded value, a result or an error (a function of its
        own, so nothing it received outlives it)."""
        header, payload = message
        if header.get("status") == "yield":
            with self._cond:
                stream = self._streams.get(header.get("seq"))
            if stream is not None:
                try:
                    stream._yielded(int(header.get("index", -1)), loads(payload), size_of(payload))
                except Exception as e:  # noqa: BLE001 - a value this driver cannot read
                    stream.end.set_error(e)
            return
        with self._cond:
            states = self._inflight.pop(header.get("seq"), None)
            self._holds.pop(header.get("seq"), None)
            self._streams.pop(header.get("seq"), None)
        if states is None:
            return
        try:
            if header.get("status") == "ok":
                value = loads(payload)
                if len(states) == 1:
                    states[0].set_value(value, size_of(payload))
                else:
                    values = list(value)
                    if len(values) != len(states):
                        raise ValueError(f"a call on {self.actor_id} returned "
                                         f"{len(values)} values, not num_returns={len(states)}")
                    for s, v in zip(states, values):
                        s.set_value(v, size_of(payload) // len(values))
            else:
                error = error_from(payload)
                for s in states:
                    s.set_error(error)
        except Exception as e:  # noqa: BLE001 - a reply this driver cannot read
            for s in states:
                s.set_error(e)

    def _broken(self, sock: socket.socket) -> None:
        with self._cond:
            if self._sock is not sock:
                return
            self._sock = None
            lost = list(self._inflight.values())
            self._inflight.clear()
            self._holds.clear()
            self._streams.clear()
            self._cond.notify_all()
        try:
            sock.close()
        except OSError:
            pass
        if not lost:
            return
        error: BaseException = ActorUnavailableError(
            f"{self.actor_id}'s process (attempt {self._attempt}) stopped before answering; later "
            "calls go to its next attempt if the head restarts it"
        )
        try:
            actor = _runtime.current().client.get(f"/api/v1/actors/{self.actor_id}")
            if actor["state"] == "DEAD":
                error = ActorDiedError(self.actor_id, actor.get("death_reason") or "dead")
        except BerthError:
            pass
        for states in lost:
            for s in states:
                s.set_error(error)


# ---------------------------------------------------------------------------------------------
# The decorator.


def remote(*args: Any, **options: Any):
    """``@berth.remote`` or ``@berth.remote(**options)`` on a function (a task) or a class (an
    actor)."""
    if len(args) == 1 and not options and (inspect.isfunction(args[0]) or inspect.isclass(args[0])):
        return _make(args[0], {})
    if args:
        raise TypeError("use @berth.remote or @berth.remote(option=value, ...)")

    def decorate(target: Any):
        return _make(target, options)

    return decorate


def _make(target: Any, options: Dict[str, Any]):
    if inspect.isclass(target):
        return ActorClass(target, options)
    if callable(target):
        return RemoteFunction(target, options)
    raise TypeError(f"@berth.remote takes a function or a class, not {type(target).__name__}")


def method(num_returns: int = 1):
    """``@berth.method(num_returns=N)`` on an actor method: its calls return N ``ObjectRef``s
    (per call, ``.options(num_returns=...)`` overrides it)."""
    if not isinstance(num_returns, int) or isinstance(num_returns, bool) or num_returns < 1:
        from .exceptions import InvalidRequestError

        raise InvalidRequestError("num_returns", f"{num_returns!r} is not an integer of at least 1")

    def decorate(fn: Callable) -> Callable:
        fn.__berth_num_returns__ = num_returns
        return fn

    return decorate
