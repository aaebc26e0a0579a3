"""Berth's worker protocol, version 1: frames over TCP, the same for every language.

A frame is a header and a payload::

    u32 big-endian  header length H
    H bytes         header: a UTF-8 JSON object
    u64 big-endian  payload length P
    P bytes         payload: opaque bytes whose encoding the header's "codec" names

The header carries everything the other side needs to route and check a message (``op``,
``work_id``, ``key``, ``seq``, ``status``...); the payload carries user data (a function and its
arguments, a return value, an error) in the encoding of the language that made it
(``python-cloudpickle``; ``json`` where languages must understand each other). The full
message list is in docs/worker-protocol.md.
"""

from __future__ import annotations

import json
import socket
import struct

VERSION = 1
# Generous but finite: a header is routing data, never user data.
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 1 << 40

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class ProtocolError(Exception):
    """The other side broke the protocol (or closed the connection mid-frame)."""


def send(sock: socket.socket, header: dict, payload: bytes = b"") -> None:
    """Sends one frame."""
    head = json.dumps(header, separators=(",", ":")).encode()
    view = memoryview(payload)
    sock.sendall(b"".join((_U32.pack(len(head)), head, _U64.pack(len(view)))))
    if len(view):
        sock.sendall(view)


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 20))
        if k == 0:
            raise EOFError("the connection was closed")
        got += k
    return bytes(buf)


def recv(sock: socket.socket) -> "tuple[dict, bytes]":
    """Receives one frame: (header, payload). Raises EOFError when the peer closed between
    frames, ProtocolError on a malformed frame."""
    first = sock.recv(4, socket.MSG_WAITALL)
    if not first:
        raise EOFError("the connection was closed")
    if len(first) < 4:
        first += _exactly(sock, 4 - len(first))
    (size,) = _U32.unpack(first)
    if size > MAX_HEADER:
        raise ProtocolError(f"a header of {size} bytes is over the {MAX_HEADER}-byte limit")
    try:
        header = json.loads(_exactly(sock, size))
        (length,) = _U64.unpack(_exactly(sock, 8))
    except EOFError:
        raise ProtocolError("the connection was closed inside a frame") from None
    except ValueError as e:
        raise ProtocolError(f"the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError("the header is not a JSON object")
    if length > MAX_PAYLOAD:
        raise ProtocolError(f"a payload of {length} bytes is over the limit")
    try:
        payload = _exactly(sock, length) if length else b""
    except EOFError:
        raise ProtocolError("the connection was closed inside a payload") from None
    return header, payload


def connect(address: str, timeout: "float | None" = 10.0) -> socket.socket:
    """A TCP connection to ``HOST:PORT`` (Nagle off: small calls must not wait)."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)
    return sock


# Binding to one of these listens on every interface: only when asked for.
EVERY_INTERFACE = ("0.0.0.0", "::")


def listen_address(toward: str, bind: "str | None" = None) -> "tuple[str, str]":
    """Where this process's listening sockets bind, and the host it tells others to dial:
    ``bind`` (``berth.init(bind=...)``), else ``$BERTH_BIND``, else (inside a worker)
    ``$BERTH_NODE_IP``, the address its node registered with; else the local address that
    routes to ``toward`` (the head). ``0.0.0.0`` or ``::`` listens on every interface and is
    announced as that outward address."""
    import os

    host = bind or os.environ.get("BERTH_BIND") or os.environ.get("BERTH_NODE_IP") or outward_ip(toward)
    return host, (outward_ip(toward) if host in EVERY_INTERFACE else host)


def listen(host: str) -> socket.socket:
    """A listening TCP socket on ``host``, port chosen by the OS; ``OSError`` when ``host`` is
    not an address of this machine."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host.strip("[]"), 0), family=family, backlog=512)


def outward_ip(toward: str) -> str:
    """The local IP address that routes to ``toward`` (a URL or HOST:PORT): what other
    machines use to reach this process. No packet is sent."""
    rest = toward.split("://", 1)[-1]
    host = rest.rsplit(":", 1)[0].strip("[]") if ":" in rest else rest
    host = host.split("/")[0]
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
