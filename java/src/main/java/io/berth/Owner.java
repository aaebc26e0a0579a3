package io.berth;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.security.MessageDigest;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The driver's owner service (docs/worker-protocol.md): workers fetch their call from it and
 * report a failed constructor to it, proving with the work key which work they are.
 */
final class Owner {
  /** One actor creation or task this driver owns. */
  static final class Call {
    final String id = UUID.randomUUID().toString().replace("-", "");
    final String kind;
    final byte[] payload;
    volatile String workId;
    volatile String key;
    final CountDownLatch bound = new CountDownLatch(1);
    /** Actors: called with the error when the constructor threw. */
    volatile Consumer<String> onFailed;
    /** Tasks: where the result goes, and its type. */
    final ObjectRef<Object> ref;
    final java.lang.reflect.Type type;

    Call(byte[] payload) {
      this("actor", payload, null, null);
    }

    Call(String kind, byte[] payload, ObjectRef<Object> ref, java.lang.reflect.Type type) {
      this.kind = kind;
      this.payload = payload;
      this.ref = ref;
      this.type = type;
    }
  }

  private final Map<String, Call> calls = new ConcurrentHashMap<>();
  private final ServerSocket server;
  final String address;

  Owner(String advertiseHost) throws IOException {
    server = new ServerSocket();
    server.bind(new InetSocketAddress("0.0.0.0", 0), 512);
    address = advertiseHost + ":" + server.getLocalPort();
    Thread accept = new Thread(this::accept, "berth-owner");
    accept.setDaemon(true);
    accept.start();
  }

  void add(Call call) {
    calls.put(call.id, call);
  }

  void bind(Call call, String workId, String key) {
    call.workId = workId;
    call.key = key;
    call.bound.countDown();
  }

  void close() {
    try {
      server.close();
    } catch (IOException ignored) {
      // closing
    }
  }

  private void accept() {
    while (!server.isClosed()) {
      try {
        Socket socket = server.accept();
        socket.setTcpNoDelay(true);
        Thread t = new Thread(() -> serve(socket), "berth-owner-conn");
        t.setDaemon(true);
        t.start();
      } catch (IOException e) {
        return;
      }
    }
  }

  private void serve(Socket socket) {
    try (socket) {
      var in = new DataInputStream(new BufferedInputStream(socket.getInputStream()));
      var out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream()));
      while (true) {
        Frames.Frame frame = Frames.recv(in);
        Frames.send(out, handle(frame.header(), frame.payload()), payloadFor(frame.header()));
      }
    } catch (IOException e) {
      // the worker closed the connection
    }
  }

  private byte[] payloadFor(Map<String, Object> header) {
    Call call = calls.get(String.valueOf(header.get("call")));
    return "fetch".equals(header.get("op")) && call != null && matches(call, header) ? call.payload : new byte[0];
  }

  private static boolean matches(Call call, Map<String, Object> header) {
    try {
      if (!call.bound.await(120, TimeUnit.SECONDS)) {
        return false;
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
    Object workId = header.get("work_id");
    Object key = header.get("key");
    return call.workId.equals(workId) && key instanceof String k && MessageDigest.isEqual(
        k.toLowerCase().getBytes(StandardCharsets.UTF_8), call.key.toLowerCase().getBytes(StandardCharsets.UTF_8));
  }

  private static void complete(Call call, boolean ok, byte[] payload) {
    try {
      if (ok) {
        call.ref.future.complete(Frames.JSON.readValue(payload, Frames.JSON.constructType(call.type)));
      } else {
        var error = Frames.JSON.readTree(payload);
        call.ref.future.completeExceptionally(new BerthException.TaskException(
            error.path("type").asText(), error.path("message").asText(), error.path("traceback").asText()));
      }
    } catch (IOException e) {
      call.ref.future.completeExceptionally(new BerthException(null, "cannot read the result: " + e, e));
    }
  }

  private Map<String, Object> handle(Map<String, Object> header, byte[] payload) {
    Call call = calls.get(String.valueOf(header.get("call")));
    if (call == null) {
      return Map.of("ok", false, "error", "this driver does not own that call");
    }
    if (!matches(call, header)) {
      return Map.of("ok", false, "error", "wrong work ID or key");
    }
    Object op = header.get("op");
    if ("fetch".equals(op)) {
      return Map.of("ok", true, "codec", Frames.CODEC, "kind", call.kind);
    }
    if ("result".equals(op)) {
      boolean ok = "ok".equals(header.get("status"));
      if (call.ref != null) {
        complete(call, ok, payload);
        calls.remove(call.id);
      } else if (!ok && call.onFailed != null) {
        call.onFailed.accept(Frames.text(payload));
      }
      return Map.of("ok", true);
    }
    return Map.of("ok", false, "error", "unknown op " + op);
  }
}
