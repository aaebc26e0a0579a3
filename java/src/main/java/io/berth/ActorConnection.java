package io.berth;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.lang.reflect.Type;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * This driver's calls to one actor: sent in order over one connection, answered by sequence
 * number; when the process stops, unsent calls wait for the next attempt (found through the
 * head) and sent ones fail.
 */
final class ActorConnection {
  private record Pending(long seq, String method, String signature, byte[] args, ObjectRef<Object> ref, Type type) {}

  private final Berth.Session session;
  private final String actorId;
  private final String key;
  /** Calls wait on the actor: placed, or why not. */
  private final Infeasible placement;
  private final ArrayDeque<Pending> queue = new ArrayDeque<>();
  private final Map<Long, Pending> inflight = new HashMap<>();
  private long nextSeq = 1;
  private Socket socket;
  private DataOutputStream out;
  private int attempt;
  private BerthException dead;
  private boolean closed;

  ActorConnection(Berth.Session session, String actorId, String key) {
    this.session = session;
    this.actorId = actorId;
    this.key = key;
    this.placement = new Infeasible(session.client, "actors", actorId);
    Thread sender = new Thread(this::sendLoop, "berth-" + actorId);
    sender.setDaemon(true);
    sender.start();
  }

  @SuppressWarnings("unchecked")
  <R> ObjectRef<R> call(String method, String signature, List<Object> args, Type returnType) {
    var ref = new ObjectRef<Object>(actorId + "." + method);
    ref.waitsOn = placement;
    synchronized (this) {
      if (dead != null) {
        ref.future.completeExceptionally(dead);
      } else {
        queue.add(new Pending(nextSeq++, method, signature, Frames.json(args), ref, returnType));
        notifyAll();
      }
    }
    return (ObjectRef<R>) ref;
  }

  synchronized void fail(BerthException error) {
    if (dead == null) {
      dead = error;
    }
    for (Pending p : queue) {
      p.ref.future.completeExceptionally(error);
    }
    for (Pending p : inflight.values()) {
      p.ref.future.completeExceptionally(error);
    }
    queue.clear();
    inflight.clear();
    notifyAll();
  }

  synchronized void close() {
    closed = true;
    try {
      if (socket != null) {
        socket.close();
      }
    } catch (IOException ignored) {
      // closing
    }
    notifyAll();
  }

  private boolean connect() {
    while (true) {
      synchronized (this) {
        if (closed || dead != null) {
          return false;
        }
      }
      JsonNode answer;
      try {
        answer = session.client.call("GET",
            "/api/v1/actors/" + actorId + "/endpoint?after_attempt=" + attempt + "&timeout_s=30", null,
            Duration.ofSeconds(60), true);
      } catch (BerthException e) {
        fail(new BerthException(null, "cannot find " + actorId + ": " + e.getMessage(), e));
        return false;
      }
      if (answer == null) {
        continue;
      }
      if ("DEAD".equals(answer.path("state").asText())) {
        fail(new BerthException.ActorDiedException(
            "actor " + actorId + " is dead: " + answer.path("death_reason").asText("dead")));
        return false;
      }
      JsonNode endpoint = answer.get("endpoint");
      attempt = endpoint.get("attempt").asInt();
      String address = endpoint.get("address").asText();
      int colon = address.lastIndexOf(':');
      try {
        Socket s = new Socket();
        s.connect(new InetSocketAddress(address.substring(0, colon), Integer.parseInt(address.substring(colon + 1))), 10_000);
        s.setTcpNoDelay(true);
        var o = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
        var in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
        Frames.send(o, Map.of("op", "hello", "key", key, "version", 1, "attempt", attempt), new byte[0]);
        Frames.Frame reply = Frames.recv(in);
        if (!Boolean.TRUE.equals(reply.header().get("ok")) && reply.header().containsKey("attempt")) {
          // Another attempt than the head named listens there: ask the head again.
          s.close();
          continue;
        }
        if (!Boolean.TRUE.equals(reply.header().get("ok"))) {
          fail(new BerthException(actorId + " refused this driver: " + reply.header().get("error")));
          return false;
        }
        synchronized (this) {
          socket = s;
          out = o;
        }
        Thread receiver = new Thread(() -> receiveLoop(s, in), "berth-" + actorId + "-replies");
        receiver.setDaemon(true);
        receiver.start();
        return true;
      } catch (IOException e) {
        // that process is gone already: wait for a later attempt
      }
    }
  }

  private void sendLoop() {
    while (true) {
      Pending next;
      Socket s;
      DataOutputStream o;
      synchronized (this) {
        while (!closed && dead == null && queue.isEmpty()) {
          try {
            wait();
          } catch (InterruptedException e) {
            return;
          }
        }
        if (closed || dead != null) {
          return;
        }
        s = socket;
        o = out;
        next = s == null ? null : queue.poll();
        if (next != null) {
          inflight.put(next.seq, next);
        }
      }
      if (s == null) {
        if (!connect()) {
          return;
        }
        continue;
      }
      try {
        Frames.send(o, Map.of("op", "call", "seq", next.seq, "method", next.method, "signature", next.signature), next.args);
      } catch (IOException e) {
        broken(s);
      }
    }
  }

  private void receiveLoop(Socket s, DataInputStream in) {
    while (true) {
      Frames.Frame frame;
      try {
        frame = Frames.recv(in);
      } catch (IOException e) {
        broken(s);
        return;
      }
      Pending p;
      synchronized (this) {
        p = inflight.remove(((Number) frame.header().get("seq")).longValue());
      }
      if (p == null) {
        continue;
      }
      try {
        if ("ok".equals(frame.header().get("status"))) {
          Object value = Frames.JSON.readValue(frame.payload(), Frames.JSON.constructType(p.type));
          p.ref.future.complete(value);
        } else {
          JsonNode error = Frames.JSON.readTree(frame.payload());
          p.ref.future.completeExceptionally(new BerthException.TaskException(
              error.path("type").asText(), error.path("message").asText(), error.path("traceback").asText()));
        }
      } catch (IOException e) {
        p.ref.future.completeExceptionally(new BerthException(null, "cannot read the answer: " + e, e));
      }
    }
  }

  private void broken(Socket s) {
    List<Pending> lost;
    synchronized (this) {
      if (socket != s) {
        return;
      }
      socket = null;
      out = null;
      lost = List.copyOf(inflight.values());
      inflight.clear();
      notifyAll();
    }
    try {
      s.close();
    } catch (IOException ignored) {
      // already broken
    }
    for (Pending p : lost) {
      p.ref.future.completeExceptionally(new BerthException(
          actorId + "'s process (attempt " + attempt + ") stopped before answering"));
    }
  }
}
