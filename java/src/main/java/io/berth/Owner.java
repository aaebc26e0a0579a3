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
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The driver's owner service (docs/worker-protocol.md): workers fetch their call from it and
 * report a failed constructor to it, proving with the work key which work they are. A task's
 * fetch after its result arrived (a retried attempt) is answered {@code "done": true}: the
 * worker exits at once instead of running the call twice.
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

  /** A task call whose result this owner holds: enough to know its worker again. */
  private record Delivered(String workId, String key) {}

  /** A task whose result arrived, and when ({@link System#nanoTime}). */
  private record Recent(long at, String workId) {}

  /** How long a delivered task counts as recent, and how many are kept (the head's limit). */
  private static final long RECENT_NANOS = 60_000_000_000L;
  private static final int RECENT_KEPT = 10_000;

  /** Tasks whose results arrived lately, oldest first; guarded by {@link #delivered}. */
  private final java.util.ArrayDeque<Recent> recent = new java.util.ArrayDeque<>();

  /**
   * The tasks whose results arrived in the last minute: those the head may not have seen end
   * yet, told to it when this process ends so that they are not cancelled with it.
   */
  List<String> recentlyDelivered() {
    long since = System.nanoTime() - RECENT_NANOS;
    synchronized (delivered) {
      return recent.stream().filter(r -> r.at() - since >= 0).map(Recent::workId).toList();
    }
  }

  /** How many delivered calls the owner remembers (the oldest are forgotten first). */
  static final int REMEMBERED = 100_000;

  private final Map<String, Call> calls = new ConcurrentHashMap<>();
  /**
   * Task calls whose result arrived, by call ID, so that a later attempt of the same task (its
   * worker killed after handing back the result, before it exited) is told "done" instead of
   * running the call again. Guarded by itself, as is moving a call here from {@link #calls}.
   */
  private final Map<String, Delivered> delivered;
  private final ServerSocket server;
  final String address;

  /** An owner service listening on {@code listen}: {host to bind, host to announce}. */
  Owner(String[] listen) throws IOException {
    this(listen, REMEMBERED);
  }

  Owner(String[] listen, int remembered) throws IOException {
    delivered = new LinkedHashMap<>() {
      private static final long serialVersionUID = 1L;

      @Override
      protected boolean removeEldestEntry(Map.Entry<String, Delivered> eldest) {
        return size() > remembered;
      }
    };
    server = Berth.listen(listen[0]);
    address = listen[1] + ":" + server.getLocalPort();
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
        Frames.Frame reply = handle(frame.header(), frame.payload());
        Frames.send(out, reply.header(), reply.payload());
      }
    } catch (IOException e) {
      // the worker closed the connection
    }
  }

  private static final byte[] NONE = new byte[0];

  private static Frames.Frame reply(Map<String, Object> header) {
    return new Frames.Frame(header, NONE);
  }

  /** Whether the request comes from the work's process: its work ID and key. */
  private static boolean matches(String workId, String key, Map<String, Object> header) {
    return workId.equals(header.get("work_id")) && header.get("key") instanceof String k && MessageDigest.isEqual(
        k.toLowerCase().getBytes(StandardCharsets.UTF_8), key.toLowerCase().getBytes(StandardCharsets.UTF_8));
  }

  /** Whether the request comes from the call's work, once the head has said which work that is. */
  private static boolean matches(Call call, Map<String, Object> header) {
    try {
      if (!call.bound.await(120, TimeUnit.SECONDS)) {
        return false;
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
    return matches(call.workId, call.key, header);
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

  /** Values lent to other processes (refs passed as arguments), by object ID: {ref, key}. */
  private final Map<String, Object[]> lent = new ConcurrentHashMap<>();

  /**
   * Makes {@code ref}'s value fetchable by the processes a ref to it is sent to: its object ID
   * and the key a fetch must show (kept while this process lives).
   */
  synchronized String[] lend(ObjectRef<?> ref) {
    if (ref.lentAs == null) {
      ref.lentAs = new String[] {UUID.randomUUID().toString().replace("-", ""), UUID.randomUUID().toString()};
      lent.put(ref.lentAs[0], new Object[] {ref, ref.lentAs[1]});
    }
    return ref.lentAs;
  }

  /** A lent value, once it is there (JSON), or its error. */
  private Frames.Frame object(Map<String, Object> header) {
    Object[] entry = lent.get(String.valueOf(header.get("id")));
    if (entry == null || !(header.get("key") instanceof String k) || !MessageDigest.isEqual(
        k.getBytes(StandardCharsets.UTF_8), ((String) entry[1]).getBytes(StandardCharsets.UTF_8))) {
      return reply(Map.of("ok", false, "error", "no such object here (wrong ID or key)"));
    }
    ObjectRef<?> ref = (ObjectRef<?>) entry[0];
    try {
      return new Frames.Frame(Map.of("ok", true, "status", "ok"), Frames.json(ref.get()));
    } catch (BerthException.TaskException e) {
      return new Frames.Frame(Map.of("ok", true, "status", "error"), Frames.json(Map.of("type", e.remoteType(),
          "message", e.getMessage(), "traceback", e.remoteTrace())));
    } catch (BerthException e) {
      return new Frames.Frame(Map.of("ok", true, "status", "error"),
          Frames.json(Map.of("type", e.getClass().getName(), "message", String.valueOf(e.getMessage()),
              "traceback", "")));
    }
  }

  private Frames.Frame handle(Map<String, Object> header, byte[] payload) {
    if ("object".equals(header.get("op"))) {
      return object(header);
    }
    String id = String.valueOf(header.get("call"));
    Object op = header.get("op");
    Delivered done;
    Call call;
    synchronized (delivered) {
      done = delivered.get(id);
      call = done == null ? calls.get(id) : null;
    }
    if (done != null) {
      if (!matches(done.workId, done.key, header)) {
        return reply(Map.of("ok", false, "error", "wrong work ID or key"));
      }
      // An earlier attempt handed back the result: this one has nothing to run (fetch), and a
      // second result changes nothing (the first is kept).
      return "fetch".equals(op) ? reply(Map.of("ok", true, "done", true))
          : "result".equals(op) ? reply(Map.of("ok", true))
          : reply(Map.of("ok", false, "error", "unknown op " + op));
    }
    if (call == null) {
      return reply(Map.of("ok", false, "error", "this driver does not own that call"));
    }
    if (!matches(call, header)) {
      return reply(Map.of("ok", false, "error", "wrong work ID or key"));
    }
    if ("fetch".equals(op)) {
      return new Frames.Frame(Map.of("ok", true, "codec", Frames.CODEC, "kind", call.kind), call.payload);
    }
    if ("result".equals(op)) {
      boolean ok = "ok".equals(header.get("status"));
      if (call.ref != null) {
        complete(call, ok, payload);
        synchronized (delivered) {
          delivered.put(call.id, new Delivered(call.workId, call.key));
          calls.remove(call.id);
          if (call.workId != null && call.workId.startsWith("task-")) {
            recent.addLast(new Recent(System.nanoTime(), call.workId));
            if (recent.size() > RECENT_KEPT) {
              recent.removeFirst();
            }
          }
        }
      } else if (!ok && call.onFailed != null) {
        call.onFailed.accept(Frames.text(payload));
      }
      return reply(Map.of("ok", true));
    }
    return reply(Map.of("ok", false, "error", "unknown op " + op));
  }
}
