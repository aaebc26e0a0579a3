"""Borrowing: how a process that holds refs to another process's value keeps that value alive,
and lets it go.

A value lives with the process that made it (its holder: the process that put it, or the
driver a task's result came back to), as in Ray's ownership. Each process that unpickles a ref
to it counts itself a borrower at the holder (``borrow``) before the ref can be used, over one
connection per holder; when its last ref to the value is gone it says so (``release``), and
when it ends its connection closes and every borrow on it ends with it. The holder frees the
value once no ref to it is left: none in its own process, no borrower, and no ref still on
its way (each ref sent carries a token that keeps the value until its receiver borrowed, or
``LEND_PIN_S`` passed).
"""

from __future__ import annotations

import queue
import sys
import threading
import weakref
from typing import Any, Dict, Optional, Tuple

from . import _protocol

_holders: Dict[str, "_Holder"] = {}
_holders_lock = threading.Lock()
_releases: "queue.SimpleQueue[Tuple[str, str]]" = queue.SimpleQueue()
_releaser: Optional[threading.Thread] = None


# A holder that answers nothing for this long is taken for gone (the connection is closed, and
# the next request opens another).
ASK_TIMEOUT_S = 30.0


class _Holder:
    """This process's connection to one process whose values it borrows: requests and answers
    in turn. The holder ends a connection's borrows when it closes, so a new connection
    borrows again what this process still holds."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.lock = threading.Lock()
        self.sock = None
        # The values this process counts itself a borrower of: object ID -> key.
        self.live: Dict[str, str] = {}

    def ask(self, header: dict) -> dict:
        with self.lock:
            try:
                if self.sock is None:
                    self.sock = _protocol.connect(self.address, timeout=10)
                    self.sock.settimeout(ASK_TIMEOUT_S)
                    for object_id, key in list(self.live.items()):
                        if not self._ask({"op": "borrow", "id": object_id, "key": key, "count": True}).get("ok"):
                            self.live.pop(object_id, None)  # freed meanwhile: its fetch will say so
                reply = self._ask(header)
                if header["op"] == "borrow" and header.get("count") and reply.get("ok"):
                    self.live[header["id"]] = header["key"]
                elif header["op"] == "release":
                    self.live.pop(header["id"], None)
                return reply
            except BaseException:
                if self.sock is not None:
                    self.sock.close()
                    self.sock = None
                raise

    def _ask(self, header: dict) -> dict:
        _protocol.send(self.sock, header)
        return _protocol.recv(self.sock)[0]


def _holder(address: str) -> _Holder:
    global _releaser
    with _holders_lock:
        holder = _holders.get(address)
        if holder is None:
            holder = _holders[address] = _Holder(address)
        if _releaser is None:
            _releaser = threading.Thread(target=_release_loop, daemon=True, name="berth-release")
            _releaser.start()
        return holder


def borrow(state: Any, origin: Tuple[str, str, str], token: Optional[str], new: bool) -> None:
    """Counts this process a borrower of the value at ``origin`` (``new``: the first ref to it
    here; a later one only hands in its token). A holder that cannot be reached or no longer
    has the value makes the ref lost at once."""
    from .exceptions import ObjectLostError

    address, object_id, key = origin
    try:
        reply = _holder(address).ask({"op": "borrow", "id": object_id, "key": key, "token": token, "count": new})
    except (OSError, EOFError, _protocol.ProtocolError) as e:
        state.set_error(ObjectLostError(f"{state.describe}: the process that holds it ({address}) is gone: {e}"))
        return
    if not reply.get("ok"):
        state.set_error(ObjectLostError(f"{state.describe}: its holder at {address} has it no more: "
                                        f"{reply.get('error')}"))
        return
    if new:
        weakref.finalize(state, _releases.put, (address, object_id))


def token(origin: Tuple[str, str, str]) -> Optional[str]:
    """A token from the holder for a borrowed ref this process sends on: the value is kept
    until its receiver borrowed. None when the holder is out of reach (the receiver then finds
    the value lost)."""
    address, object_id, key = origin
    try:
        reply = _holder(address).ask({"op": "lend", "id": object_id, "key": key})
    except (OSError, EOFError, _protocol.ProtocolError):
        return None
    return reply.get("token") if reply.get("ok") else None


def local_state(origin: Tuple[str, str, str], token: Optional[str]):
    """The state of a ref that came back to the process that holds its value (its token handed
    in); None for any other process's value."""
    runtime = getattr(sys.modules.get("berth._runtime"), "_current", None)
    if runtime is None or runtime.owner.address != origin[0]:
        return None
    state = runtime.owner.take_home(origin[1], origin[2], token)
    if state is None:
        from ._objects import ObjectState
        from .exceptions import ObjectLostError

        state = ObjectState("a value this process held")
        state.origin = origin
        state.set_error(ObjectLostError(f"{origin[1]}: this process held it and freed it (its last ref was gone)"))
    return state


def _release_loop() -> None:
    # Releases are sent from here, never from the finalizer that queued them: that runs
    # wherever the garbage collector does, maybe while this thread's connection is in use.
    while True:
        address, object_id = _releases.get()
        with _holders_lock:
            holder = _holders.get(address)
        if holder is None:
            continue
        try:
            holder.ask({"op": "release", "id": object_id})
        except Exception:  # noqa: BLE001 - this thread must go on releasing
            # The holder is gone, or the connection broke (ending its borrows there): either
            # way this one is over.
            with holder.lock:
                holder.live.pop(object_id, None)


def stats() -> Dict[str, int]:
    """How many holders this process borrows from, and releases not yet sent."""
    with _holders_lock:
        return {"holders": len(_holders), "releases_queued": _releases.qsize()}
