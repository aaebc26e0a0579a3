package io.berth;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A result that may not exist yet: a task's or an actor method call's. Waiting on one whose
 * task or actor the head cannot place (infeasible) logs a warning with the head's diagnosis
 * after 5 s, then keeps waiting.
 */
public final class ObjectRef<R> {
  final CompletableFuture<R> future = new CompletableFuture<>();
  private final String describe;
  /** What the result waits on (its task or actor), checked while a caller waits; null: nothing. */
  volatile Infeasible waitsOn;
  /** {object ID, key} once this process lends the value to others. */
  String[] lentAs;
  /** {owner address, object ID, key} of a value another process holds; null for a local one. */
  private final String[] origin;
  private final java.lang.reflect.Type type;
  private final java.util.concurrent.atomic.AtomicBoolean fetching = new java.util.concurrent.atomic.AtomicBoolean();

  ObjectRef(String describe) {
    this.describe = describe;
    this.origin = null;
    this.type = Object.class;
  }

  private ObjectRef(String describe, String[] origin, java.lang.reflect.Type type) {
    this.describe = describe;
    this.origin = origin;
    this.type = type;
  }

  /** A ref resolved with {@code value} (what {@link Berth#put} returns). */
  static <T> ObjectRef<T> of(T value) {
    var ref = new ObjectRef<T>("put");
    ref.future.complete(value);
    return ref;
  }

  /**
   * How a ref travels inside an argument (a method parameter declared {@code ObjectRef<T>}): its
   * holder's owner service, an object ID and a key; the process that gets it fetches the value
   * from there, straight, on its first {@code get}.
   */
  @com.fasterxml.jackson.annotation.JsonValue
  java.util.Map<String, Object> toJson() {
    String[] at = origin;
    if (at == null) {
      String[] lent = Berth.session().owner.lend(this);
      at = new String[] {Berth.session().owner.address, lent[0], lent[1]};
    }
    return java.util.Map.of("berth_ref", java.util.Map.of("owner", at[0], "id", at[1], "key", at[2],
        "describe", describe));
  }

  /** The ref {@link #toJson} made, in the process that got it, its value of {@code type}. */
  static ObjectRef<Object> fromJson(com.fasterxml.jackson.databind.JsonNode json, java.lang.reflect.Type type) {
    var ref = json.path("berth_ref");
    for (String field : new String[] {"owner", "id", "key"}) {
      if (!ref.path(field).isTextual() || ref.path(field).asText().isEmpty()) {
        throw new IllegalArgumentException("an ObjectRef parameter takes a ref (berth_ref." + field
            + " missing), not " + json);
      }
    }
    if (ref.path("owner").asText().lastIndexOf(':') < 1) {
      throw new IllegalArgumentException("berth_ref.owner: " + ref.path("owner").asText() + " is not HOST:PORT");
    }
    return new ObjectRef<>(ref.path("describe").asText("ref"), new String[] {ref.path("owner").asText(),
        ref.path("id").asText(), ref.path("key").asText()}, type);
  }

  /** Fetches a value another process holds, once, on a thread of its own. */
  private void fetch() {
    if (origin == null || future.isDone() || !fetching.compareAndSet(false, true)) {
      return;
    }
    Thread t = new Thread(() -> {
      int colon = origin[0].lastIndexOf(':');
      try (var socket = new java.net.Socket()) {
        socket.connect(new java.net.InetSocketAddress(origin[0].substring(0, colon),
            Integer.parseInt(origin[0].substring(colon + 1))), 30_000);
        var out = new java.io.DataOutputStream(new java.io.BufferedOutputStream(socket.getOutputStream()));
        var in = new java.io.DataInputStream(new java.io.BufferedInputStream(socket.getInputStream()));
        Frames.send(out, java.util.Map.of("op", "object", "id", origin[1], "key", origin[2]), new byte[0]);
        Frames.Frame reply = Frames.recv(in);
        if (!Boolean.TRUE.equals(reply.header().get("ok"))) {
          throw new BerthException(describe + ": its holder refused it: " + reply.header().get("error"));
        }
        if ("ok".equals(reply.header().get("status"))) {
          @SuppressWarnings("unchecked")
          R value = (R) Frames.JSON.readValue(reply.payload(), Frames.JSON.constructType(type));
          future.complete(value);
        } else {
          var error = Frames.JSON.readTree(reply.payload());
          future.completeExceptionally(new BerthException.TaskException(error.path("type").asText(),
              error.path("message").asText(), error.path("traceback").asText()));
        }
      } catch (com.fasterxml.jackson.core.JacksonException e) {
        future.completeExceptionally(new BerthException(null, describe + ": its value is not a " + type
            + ": " + e.getOriginalMessage(), e));
      } catch (java.io.IOException e) {
        future.completeExceptionally(new BerthException(null, describe + ": the process that holds it ("
            + origin[0] + ") is gone: " + e.getMessage(), e));
      } catch (RuntimeException e) {
        future.completeExceptionally(e);
      }
    }, "berth-fetch");
    t.setDaemon(true);
    t.start();
  }

  /** Waits for the result; a remote exception is thrown as {@link BerthException.TaskException}. */
  public R get() {
    return await(Long.MAX_VALUE, -1);
  }

  /** Waits at most {@code timeoutMs} milliseconds ({@link BerthException.GetTimeoutException}). */
  public R get(long timeoutMs) {
    return await(TimeUnit.MILLISECONDS.toNanos(Math.max(0, timeoutMs)), timeoutMs);
  }

  /** Waits {@code timeoutNanos} (Long.MAX_VALUE: without end), checking what it waits on as it goes. */
  private R await(long timeoutNanos, long timeoutMs) {
    fetch();
    long start = System.nanoTime();
    Infeasible target = waitsOn;
    Infeasible.Watch watch = target == null ? null : target.watch();
    while (true) {
      long left = timeoutNanos == Long.MAX_VALUE ? Long.MAX_VALUE : timeoutNanos - (System.nanoTime() - start);
      long slice = watch == null ? left : Math.min(left, watch.untilCheck());
      try {
        return future.get(Math.max(0, slice), TimeUnit.NANOSECONDS);
      } catch (TimeoutException e) {
        if (timeoutNanos != Long.MAX_VALUE && System.nanoTime() - start >= timeoutNanos) {
          throw new BerthException.GetTimeoutException("get() timed out after " + timeoutMs + " ms waiting for " + describe);
        }
        if (watch != null) {
          watch.checkIfDue();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new BerthException(null, "interrupted", e);
      } catch (ExecutionException e) {
        throw unwrap(e);
      }
    }
  }

  private static BerthException unwrap(ExecutionException e) {
    return e.getCause() instanceof BerthException b ? b : new BerthException(null, String.valueOf(e.getCause()), e.getCause());
  }

  @Override
  public String toString() {
    return "ObjectRef(" + describe + ")";
  }
}
