"""Object references: the future result of a task, an actor call or a placement group."""

from __future__ import annotations

import logging
import threading
import time
import uuid
import warnings
import weakref
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

log = logging.getLogger("berth")

# One condition for every object: berth.wait wakes when any of them resolves.
_resolved = threading.Condition()

_PENDING = object()

# A call that has waited this long asks the head whether what it waits on can be placed at all,
# then again this often, until it has warned once; each time about at most CHECK_MAX objects
# (one request each).
CHECK_AFTER_S = 5.0
CHECK_EVERY_S = 30.0
CHECK_MAX = 8
# The head's collection of each kind of ID (``task-7``, ``actor-3``, ``pg-2``).
_COLLECTIONS = {"task": "tasks", "actor": "actors", "pg": "placement_groups"}


class ObjectState:
    """Where a result lands: set once, by whichever side learns it first."""

    __slots__ = ("value", "error", "event", "work_id", "describe", "bound", "shared", "origin", "fetching",
                 "packed", "size", "__weakref__")

    def __init__(self, describe: str) -> None:
        self.value: Any = _PENDING
        self.error: Optional[BaseException] = None
        self.event = threading.Event()
        self.work_id: Optional[str] = None
        self.describe = describe
        # Set once the head accepted the work (``work_id`` known).
        self.bound = threading.Event()
        # (object ID, key) once this process's owner service lends it to others.
        self.shared: Optional[Tuple[str, str]] = None
        # (owner address, object ID, key) of a value another process holds: fetched from
        # there on first use.
        self.origin: Optional[Tuple[str, str, str]] = None
        self.fetching = False
        # A put's value, as pickled when it was put (read by unpickling: numpy arrays come
        # back as read-only views of it, as Ray's do).
        self.packed = None
        # Bytes this process holds for it, once known (its pickled size).
        self.size = 0

    def start(self) -> None:
        """Starts fetching a value another process holds (once); nothing for a local one."""
        if self.origin is None or self.event.is_set():
            return
        with _resolved:
            if self.fetching:
                return
            self.fetching = True
        threading.Thread(target=_fetch, args=(self,), daemon=True, name=f"berth-fetch-{self.describe}").start()

    @property
    def done(self) -> bool:
        return self.event.is_set()

    def set_value(self, value: Any, size: int = 0) -> bool:
        """Resolves with a value (``size``: the bytes it arrived as); False when it was already
        resolved."""
        if size:
            self.size = size
            _held.add(self)
        return self._set(value, None)

    def read(self) -> Any:
        """The value (set, or unpickled from what was put)."""
        return self.value if self.packed is None else _loads(self.packed)

    def set_error(self, error: BaseException) -> bool:
        """Resolves with an error; False when it was already resolved."""
        return self._set(None, error)

    def _set(self, value: Any, error: Optional[BaseException]) -> bool:
        with _resolved:
            if self.event.is_set():
                return False
            self.value, self.error = value, error
            self.event.set()
            _resolved.notify_all()
        return True


def _loads(packed):
    from ._serialize import loads

    return loads(packed)


# The states that hold a value of a known size, for berth.internal.stats().
_held: "weakref.WeakSet[ObjectState]" = weakref.WeakSet()

# The states whose refs are pickled on this thread now (``collect``).
_collected = threading.local()


def collect(dump: Callable[[Any], None], value: Any) -> List["ObjectState"]:
    """Runs ``dump(value)`` (a pickler's); returns the states of the refs it pickled on this
    thread: what the pickled value must keep alive (``Packed.holds``)."""
    holds: List[ObjectState] = []
    outer = getattr(_collected, "states", None)
    _collected.states = holds
    try:
        dump(value)
    finally:
        _collected.states = outer
    return holds


class ObjectRef:
    """A reference to a result that may not exist yet: pass it to :func:`berth.get`."""

    __slots__ = ("_state", "_id", "__weakref__")

    def __init__(self, state: ObjectState) -> None:
        self._state = state
        self._id = uuid.uuid4().hex

    def hex(self) -> str:
        """A unique ID of this reference (driver-local)."""
        return self._id

    @property
    def work_id(self) -> Optional[str]:
        """The task or actor that produces it (``task-7``), once the head accepted it."""
        return self._state.work_id

    def future(self):
        """A ``concurrent.futures.Future`` resolved with the result."""
        import concurrent.futures

        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._state.start()

        def watch() -> None:
            self._state.event.wait()
            if self._state.error is not None:
                fut.set_exception(self._state.error)
            else:
                fut.set_result(self._state.read())

        threading.Thread(target=watch, daemon=True, name="berth-future").start()
        return fut

    def __repr__(self) -> str:
        where = f", {self._state.work_id}" if self._state.work_id else ""
        return f"ObjectRef({self._state.describe}{where})"

    def __copy__(self) -> "ObjectRef":
        return self

    def __deepcopy__(self, memo: dict) -> "ObjectRef":
        return self

    def __reduce__(self):
        """Inside another value (a list, a dict, an object), a ref travels as a ref: the process
        that receives it fetches the value from the process that holds it, straight, when it
        first gets it. Each ref sent carries a token that keeps the value at its holder until
        the receiver has counted itself a borrower (``_borrowing``)."""
        state = self._state
        if state.origin is None and getattr(_inlining, "on", False):
            # A task's process ends once it returned: what it holds goes with its result.
            state.event.wait()
            if state.error is not None:
                from ._serialize import error_payload

                return (_inline_ref, (state.describe, None, error_payload(state.error, state.describe)))
            return (_inline_ref, (state.describe, state.read(), None))
        held = getattr(_collected, "states", None)
        if held is not None:
            held.append(state)
        if state.origin is None:
            owner = _lender()
            object_id, key, token = owner.lend(state)
            origin = (owner.address, object_id, key)
        else:
            from . import _borrowing

            origin = state.origin
            token = _borrowing.token(origin)
        return (_remote_ref, (origin, state.describe, state.work_id, token))


def _lender():
    """This process's owner service, which lends its values to the processes that get them."""
    import sys

    runtime = getattr(sys.modules.get("berth._runtime"), "_current", None)
    if runtime is None:
        from . import _runtime

        runtime = _runtime.current()
    return runtime.owner


# The values of other processes this process holds refs to: one state per object, however
# many refs name it (a value is fetched and held once per process).
_remote: "weakref.WeakValueDictionary[Tuple[str, str], ObjectState]" = weakref.WeakValueDictionary()


# Set while a task's result is pickled: the refs in it carry their values.
_inlining = threading.local()


class inlining:
    """While active (on this thread), the refs pickled carry their values instead of being
    lent: what a task's process returns must not need that process afterwards."""

    def __enter__(self) -> None:
        _inlining.on = True

    def __exit__(self, *exc: object) -> None:
        _inlining.on = False


def _inline_ref(describe: str, value: Any, error: Optional[bytes]) -> "ObjectRef":
    """A ref that arrived with its value (or its error)."""
    state = ObjectState(describe)
    if error is not None:
        from ._serialize import error_from

        state.set_error(error_from(error))
    else:
        state.set_value(value)
    return ObjectRef(state)


def _remote_ref(origin: Tuple[str, str, str], describe: str, work_id: Optional[str],
                token: Optional[str] = None) -> "ObjectRef":
    """A ref unpickled from another process: the value is at ``origin`` (holder, ID, key).
    This process counts itself a borrower at the holder before the ref is used (once per
    object, however many refs name it), and stops when its last ref is gone."""
    from . import _borrowing

    local = _borrowing.local_state(origin, token)
    if local is not None:
        return ObjectRef(local)  # a ref to this process's own value, back home
    with _resolved:
        state = _remote.get(origin[:2])
        new = state is None
        if new:
            state = ObjectState(describe)
            state.origin, state.work_id = origin, work_id
            state.bound.set()
            _remote[origin[:2]] = state
    _borrowing.borrow(state, origin, token, new)
    return ObjectRef(state)


def _fetch(state: ObjectState) -> None:
    """Gets a value another process holds, from it (never through the head)."""
    from . import _protocol
    from ._serialize import error_from, loads, size_of

    owner, object_id, key = state.origin
    try:
        with _protocol.connect(owner, timeout=30) as sock:
            sock.settimeout(None)
            _protocol.send(sock, {"op": "object", "id": object_id, "key": key})
            reply, payload = _protocol.recv(sock)
        if not reply.get("ok"):
            raise LookupError(f"{state.describe}: its holder at {owner} refused it: {reply.get('error')}")
        if reply.get("status") == "ok":
            state.set_value(loads(payload), size_of(payload))
        else:
            state.set_error(error_from(payload))
    except BaseException as e:  # noqa: BLE001 - handed to whoever gets the ref
        from .exceptions import ObjectLostError

        if isinstance(e, (OSError, EOFError)):
            e = ObjectLostError(f"{state.describe}: the process that holds it ({owner}) is gone: {e}")
        state.set_error(e)


def put(value: Any) -> "ObjectRef":
    """Stores ``value`` in this process and returns a ref to it (as ``ray.put``): pass it to
    tasks and actors, at the top level or inside other values; they fetch it from here. The
    value is pickled once, now (later changes to it are not seen), and held once: ``bytes``
    are kept as they are, other buffers (numpy arrays) copied; ``get`` gives numpy arrays as
    read-only views of what is held, as Ray does. It is freed when the last ref to it is gone,
    in this process and in every process it was sent to."""
    if isinstance(value, ObjectRef):
        raise TypeError("put() of an ObjectRef: pass the ref itself")
    from ._serialize import pack

    state = ObjectState("put")
    state.packed = pack(value, snapshot=True)
    state.set_value(None, state.packed.size)
    return ObjectRef(state)


class ObjectRefGenerator:
    """The values of a generator task or actor method, as Ray's: iterate to get one
    ``ObjectRef`` per value, each ready as soon as the value was yielded (``berth.get`` it).
    Iteration ends when the generator returned; an error it raised (or its worker's death) comes
    as one last ref holding it. ``end`` resolves with how many values there were."""

    def __init__(self, end: ObjectState) -> None:
        self.end = end
        self._values: List[ObjectState] = []
        self._next = 0
        self._raised = False

    def _yielded(self, index: int, value: Any, size: int = 0) -> None:
        """Value ``index`` arrived (again, from a retried attempt: ignored); ``size``: the bytes
        it arrived as."""
        with _resolved:
            if index != len(self._values) or self.end.done:
                return
            state = ObjectState(f"{self.end.describe}[{index}]")
            state.work_id = self.end.work_id
            state.bound.set()
            self._values.append(state)
        state.set_value(value, size)

    def __iter__(self) -> "ObjectRefGenerator":
        return self

    def __next__(self) -> "ObjectRef":
        with _resolved:
            while self._next >= len(self._values) and not self.end.done:
                _resolved.wait()
            if self._next < len(self._values):
                self._next += 1
                return ObjectRef(self._values[self._next - 1])
            if self.end.error is not None and not self._raised:
                self._raised = True
                return ObjectRef(self.end)
        raise StopIteration

    def completed(self) -> "ObjectRef":
        """A ref resolved with the number of values once the generator returned."""
        return ObjectRef(self.end)

    def __repr__(self) -> str:
        return f"ObjectRefGenerator({self.end.describe}, {len(self._values)} yielded)"


class Stall:
    """One waiting call's checks that what it waits on can be placed: the first after
    ``CHECK_AFTER_S``, then every ``CHECK_EVERY_S``, until one finds work the head says is
    infeasible and warns (``BerthInfeasibleWarning``, and the ``berth`` logger) with the
    head's summary. A value that is ready costs nothing: the first check is 5 s in."""

    def __init__(self) -> None:
        self.next = time.monotonic() + CHECK_AFTER_S
        self.warned = False

    def until_next(self) -> Optional[float]:
        """Seconds to the next check; None when there is none to make."""
        return None if self.warned else max(0.0, self.next - time.monotonic())

    def due(self) -> bool:
        return not self.warned and time.monotonic() >= self.next

    def check(self, waited: Iterable[Tuple[Optional[str], str]]) -> None:
        """Asks the head about the objects waited on, ``(work ID, what it is)`` each; warns at
        the caller's caller (the user's ``get``, ``wait``)."""
        self.next = time.monotonic() + CHECK_EVERY_S
        from . import _runtime

        runtime = _runtime._current
        if runtime is None:
            return
        asked = set()
        for work_id, describe in waited:
            collection = _COLLECTIONS.get(work_id.rsplit("-", 1)[0]) if work_id else None
            if collection is None or work_id in asked:
                continue
            asked.add(work_id)
            try:
                record = runtime.client.request("GET", f"/api/v1/{collection}/{work_id}", timeout=5)[1]
            except Exception:  # noqa: BLE001 - a check that cannot be made is not the caller's error
                record = None
            diagnosis = (record if isinstance(record, dict) else {}).get("diagnosis") or {}
            if diagnosis.get("infeasible"):
                from .exceptions import BerthInfeasibleWarning

                what = work_id if describe.startswith(work_id) else f"{work_id} ({describe})"
                message = (f"{what} cannot be placed: {diagnosis.get('summary') or 'no node can take it'}; still "
                           f"waiting, in case a node that can take it joins (berth.explain({work_id!r}) says more)")
                log.warning("berth: %s", message)
                warnings.warn(message, BerthInfeasibleWarning, stacklevel=3)
                self.warned = True
                return
            if len(asked) >= CHECK_MAX:
                return


def _shorter(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """The shorter of two waits, None being forever."""
    return b if a is None else a if b is None else min(a, b)


def get(refs, timeout: Optional[float] = None):
    """The value of one reference, or a list of values for a list of references; waits at
    most ``timeout`` seconds in all (``GetTimeoutError``). A failed task's exception is
    raised again, with the remote traceback."""
    from .exceptions import GetTimeoutError

    single = isinstance(refs, ObjectRef)
    items: Sequence[Any] = [refs] if single else refs
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"get() takes an ObjectRef or a list of them, not {type(refs).__name__}")
    for ref in items:
        if not isinstance(ref, ObjectRef):
            raise TypeError(f"get() takes ObjectRefs, not {type(ref).__name__}")
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout: {timeout} is negative")
    deadline = None if timeout is None else time.monotonic() + timeout
    stall = Stall()
    out: List[Any] = []
    for ref in items:
        ref._state.start()
    for i, ref in enumerate(items):
        state = ref._state
        while not state.event.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise GetTimeoutError(f"get() timed out after {timeout} s waiting for {ref!r}")
            if state.event.wait(_shorter(left, stall.until_next())):
                break
            if stall.due():
                stall.check((r._state.work_id, r._state.describe) for r in items[i:] if not r._state.done)
        if state.error is not None:
            raise state.error
        out.append(state.read())
    return out[0] if single else out


def wait(refs: List[ObjectRef], *, num_returns: int = 1, timeout: Optional[float] = None,
         fetch_local: bool = True) -> Tuple[List[ObjectRef], List[ObjectRef]]:
    """Waits until ``num_returns`` of ``refs`` are ready (resolved with a value or an error) or
    ``timeout`` passed; returns (ready, not ready), each in the order given."""
    if not isinstance(refs, (list, tuple)) or not all(isinstance(r, ObjectRef) for r in refs):
        raise TypeError("wait() takes a list of ObjectRefs")
    if len({id(r) for r in refs}) != len(refs):
        raise ValueError("refs: wait() takes each ObjectRef once")
    if not 0 <= num_returns <= len(refs):
        raise ValueError(f"num_returns: {num_returns} is not between 0 and {len(refs)}")
    deadline = None if timeout is None else time.monotonic() + timeout
    stall = Stall()
    for ref in refs:
        ref._state.start()
    while True:
        with _resolved:
            ready = [r for r in refs if r._state.done]
            left = None if deadline is None else deadline - time.monotonic()
            if len(ready) >= num_returns or (left is not None and left <= 0):
                break
            if not stall.due():
                _resolved.wait(_shorter(left, stall.until_next()))
                continue
        # Outside the lock: every result resolves under it.
        stall.check((r._state.work_id, r._state.describe) for r in refs if not r._state.done)
    ready = ready[: max(num_returns, 0)] if len(ready) > num_returns else ready
    chosen = {id(r) for r in ready}
    return ready, [r for r in refs if id(r) not in chosen]


def resolved_ref(describe: str, produce: Callable[[], Any], work_id: Optional[str] = None) -> ObjectRef:
    """A reference resolved by ``produce()`` run in a background thread (its exception, if
    any, is the reference's error); ``work_id``: the task or group it waits on."""
    state = ObjectState(describe)
    if work_id is not None:
        state.work_id = work_id
        state.bound.set()

    def run() -> None:
        try:
            state.set_value(produce())
        except BaseException as e:  # noqa: BLE001 - handed to whoever gets the ref
            state.set_error(e)

    threading.Thread(target=run, daemon=True, name=f"berth-{describe}").start()
    return ObjectRef(state)
