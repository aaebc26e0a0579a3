"""How Python values travel: cloudpickle, with user modules shipped by value.

cloudpickle pickles a function or class of an importable module *by reference* (module name
and attribute), so a worker on another machine would need the user's source on its path.
Modules that are not installed packages (a script's own modules, test files) are registered
to travel *by value* instead, so only installed packages (and the same Python) are needed on
the nodes.
"""

from __future__ import annotations

import io
import pickle
import sys
from typing import Any, Dict, List, Optional, Union

import cloudpickle

CODEC = "python-cloudpickle"

# ``bytes`` and ``bytearray`` values at least this long travel beside the pickle (as numpy
# arrays do), so that neither side copies them: smaller ones cost less inside it.
OUT_OF_BAND_MIN = 64 * 1024
# At most this many parts in one payload (the receiver's limit too).
MAX_PARTS = 1 << 16

_by_value: set = set()


def _installed() -> tuple:
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple(p for p in {paths.get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")} if p)


def ship_by_value(obj: Any) -> None:
    """Registers the module defining ``obj`` to be pickled by value, unless it is installed
    (or part of Python, or berth itself)."""
    name = getattr(obj, "__module__", None)
    if not name or name == "__main__" or name in _by_value:
        return
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if module is None or path is None or name.split(".")[0] == "berth":
        return
    if any(path.startswith(p) for p in _installed()) or "site-packages" in path:
        return
    try:
        cloudpickle.register_pickle_by_value(module)
    except (ValueError, TypeError):
        return
    _by_value.add(name)


def dumps(value: Any) -> bytes:
    """Pickles ``value`` (protocol 5) into one ``bytes``: for what this SDK sends itself (a
    function, an error); user values go through :func:`pack`."""
    return cloudpickle.dumps(value, protocol=5)


class Packed:
    """A value as it travels: the pickle stream, then the buffers that travel beside it (numpy
    arrays, large ``bytes``), each sent from and received into memory of its own, so that a
    value is never copied whole on the way. ``writable``: the indexes (1 and up) of buffers
    the receiver must be able to change (a writable array stays writable); the others arrive
    as ``bytes``. ``by_id``: how many of the last buffers the stream names by index (large
    ``bytes`` and ``bytearray``s) rather than takes in order (pickle's own out-of-band
    buffers). ``holds``: the objects whose refs were pickled into it, kept alive as long as
    this is (a call's arguments keep what they name until the call ends)."""

    __slots__ = ("parts", "writable", "by_id", "holds")

    def __init__(self, parts: List[Any], writable: "List[int] | None" = None, by_id: int = 0,
                 holds: "List[Any] | None" = None) -> None:
        self.parts = parts
        self.writable = writable or []
        self.by_id = by_id
        self.holds = holds or []

    @property
    def size(self) -> int:
        """Bytes in all."""
        return sum(memoryview(p).nbytes for p in self.parts)


def size_of(payload: "Union[bytes, Packed]") -> int:
    """Bytes a payload takes."""
    return payload.size if isinstance(payload, Packed) else len(payload)


_ATOMS = (int, float, str, bool, type(None))


def _large_buffers(value: Any) -> bool:
    """Whether ``value`` seems to hold a ``bytes`` or ``bytearray`` worth sending beside the
    pickle: a look at most 256 objects into containers and objects' attributes, 4 levels
    deep. Only then is the slower pickler used that sees each of them (pickle's own never
    lets a ``bytes`` out of its stream)."""
    budget = 256
    stack = [(value, 4)]
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is bytes or kind is bytearray:
            if len(value) >= OUT_OF_BAND_MIN:
                return True
            continue
        if depth == 0 or kind in _ATOMS:
            continue
        if kind is dict:
            items = value.values()
        elif kind is tuple or kind is list or kind is set or kind is frozenset:
            items = value
        else:
            attributes = getattr(value, "__dict__", None)
            if type(attributes) is not dict:
                continue
            items = attributes.values()
        for item in items:
            budget -= 1
            if budget <= 0:
                return False
            if type(item) not in _ATOMS:
                stack.append((item, depth - 1))
    return False


class _BufferPickler(cloudpickle.Pickler):
    """Sends each large ``bytes`` and ``bytearray`` beside the stream, named by its index."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.named: List[Any] = []
        # Persistent IDs come before pickle's memo: the same object twice is one part.
        self.index: Dict[int, int] = {}

    def persistent_id(self, obj: Any) -> Any:
        kind = type(obj)
        if (kind is bytes or kind is bytearray) and len(obj) >= OUT_OF_BAND_MIN:
            index = self.index.get(id(obj))
            if index is None:
                index = self.index[id(obj)] = len(self.named)
                self.named.append(obj)
            return index
        return None


class _BufferUnpickler(pickle.Unpickler):
    def __init__(self, stream: Any, buffers: List[Any], named: List[Any]) -> None:
        super().__init__(stream, buffers=buffers)
        self.named = named

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is not int or not 0 <= pid < len(self.named):
            raise pickle.UnpicklingError(f"no buffer {pid!r} beside this value")
        return self.named[pid]


def _as(kind: type, buffer: Any) -> Any:
    # A part that arrived as the kind it was sent as is the value itself: no copy.
    return buffer if type(buffer) is kind else kind(buffer)


def pack(value: Any, snapshot: bool = False) -> Packed:
    """Pickles ``value`` with its large buffers out of band, referenced rather than copied.
    ``snapshot``: copy each buffer that could still change (a writable array, a ``bytearray``)
    so that the value sent later is the value now (a call's arguments, a ``put``); ``bytes``
    never change and are never copied."""
    stream = io.BytesIO()
    buffers: List[pickle.PickleBuffer] = []

    def beside(buffer: pickle.PickleBuffer) -> bool:
        # True keeps a small buffer (a small array) inside the stream.
        if memoryview(buffer).nbytes < OUT_OF_BAND_MIN:
            return True
        buffers.append(buffer)
        return False

    pickler = (_BufferPickler if _large_buffers(value) else cloudpickle.Pickler)(
        stream, protocol=5, buffer_callback=beside)
    holds: List[Any] = []
    objects = sys.modules.get("berth._objects")  # loaded by anything that made or got a ref
    if objects is None:
        pickler.dump(value)
    else:
        holds = objects.collect(pickler.dump, value)
    named = getattr(pickler, "named", None)
    if not buffers and not named:
        # A small pickle is cheaper as bytes; a large one is not copied again.
        return Packed([stream.getvalue() if stream.tell() < OUT_OF_BAND_MIN else stream.getbuffer()], holds=holds)
    parts: List[Any] = [stream.getbuffer()]
    writable = []
    for buffer in buffers:
        raw = buffer.raw()
        if not raw.readonly:
            writable.append(len(parts))
            if snapshot:
                raw = bytes(raw)
        parts.append(raw)
    for obj in named or ():
        if type(obj) is bytearray:
            writable.append(len(parts))
            if snapshot:
                obj = bytes(obj)
        parts.append(obj)
    if len(parts) > MAX_PARTS:
        raise ValueError(f"the value holds {len(parts) - 1} large buffers; at most {MAX_PARTS - 1} can be sent in one")
    return Packed(parts, writable, len(named or ()), holds)


def loads(data: "Union[bytes, Packed]") -> Any:
    """Unpickles what :func:`dumps` or :func:`pack` made."""
    if isinstance(data, Packed):
        split = len(data.parts) - data.by_id
        if not data.by_id:
            return pickle.loads(data.parts[0], buffers=data.parts[1:])
        writable = set(data.writable)
        named = [_as(bytearray if i in writable else bytes, p)
                 for i, p in enumerate(data.parts[split:], start=split)]
        return _BufferUnpickler(io.BytesIO(data.parts[0]), data.parts[1:split], named).load()
    return cloudpickle.loads(data)


def error_payload(exc: BaseException, function_name: str) -> bytes:
    """An exception as it travels: its text and traceback always, the object when it pickles."""
    import traceback

    info: Dict[str, Any] = {
        "function": function_name,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "repr": repr(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "exception": None,
    }
    try:
        info["exception"] = dumps(exc)
    except Exception:  # noqa: BLE001 - any pickling failure leaves the text only
        pass
    return dumps(info)


def error_from(payload: bytes):
    """The ``TaskError`` a failed call's payload describes (an instance of the original
    exception's class too, when it could be rebuilt)."""
    from .exceptions import TaskError

    info = loads(payload)
    cause: Optional[BaseException] = None
    if info.get("exception") is not None:
        try:
            cause = loads(info["exception"])
        except Exception:  # noqa: BLE001 - the class may not exist here
            cause = None
    error = TaskError(info.get("function", "?"), info.get("repr", "?"), info.get("traceback", ""), cause)
    return error.as_instanceof_cause()
