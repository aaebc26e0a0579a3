package io.berth;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The owner service's side of the worker protocol (docs/worker-protocol.md), spoken over real
 * TCP on loopback: a task's call is fetched, its result handed back, and a later attempt's fetch
 * is answered {@code "done": true}; a real {@link Worker} process told so exits 0 without running
 * the call. No cluster: the test is the head that binds calls to work and starts the workers.
 */
class OwnerTest {
  private static final String KEY = "ab".repeat(32);
  private Owner owner;

  @TempDir
  Path dir;

  @AfterEach
  void close() {
    if (owner != null) {
      owner.close();
    }
  }

  /** A task call of {@code Tasks.touch(path)}, bound to work {@code workId}. */
  private Owner.Call task(String workId, Path path) {
    var spec = new LinkedHashMap<String, Object>();
    spec.put("class", Tasks.class.getName());
    spec.put("method", "touch");
    spec.put("signature", "(Ljava/lang/String;)Ljava/lang/String;");
    spec.put("args", List.of(path.toString()));
    var call = new Owner.Call("task", Frames.json(spec), new ObjectRef<>("touch"), String.class);
    owner.add(call);
    owner.bind(call, workId, KEY);
    return call;
  }

  /** One request on a connection of its own, as a worker's attempt sends it. */
  private Frames.Frame request(Owner.Call call, String workId, String key, String op, Map<String, Object> extra,
      byte[] payload) throws IOException {
    int colon = owner.address.lastIndexOf(':');
    try (Socket socket = new Socket("127.0.0.1", Integer.parseInt(owner.address.substring(colon + 1)))) {
      var out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream()));
      var in = new DataInputStream(new BufferedInputStream(socket.getInputStream()));
      var header = new LinkedHashMap<String, Object>(Map.of("op", op, "call", call.id, "work_id", workId, "key", key,
          "attempt", 1));
      header.putAll(extra);
      Frames.send(out, header, payload);
      return Frames.recv(in);
    }
  }

  private Frames.Frame fetch(Owner.Call call, String workId) throws IOException {
    return request(call, workId, KEY, "fetch", Map.of(), new byte[0]);
  }

  @Test
  void aFetchAfterTheResultArrivedIsAnsweredDone() throws Exception {
    owner = new Owner(new String[] {"127.0.0.1", "127.0.0.1"});
    var call = task("task-1", dir.resolve("ran"));
    Frames.Frame first = fetch(call, "task-1");
    assertEquals(Map.of("ok", true, "codec", "json", "kind", "task"), first.header());
    assertArrayEquals(call.payload, first.payload());

    var ack = request(call, "task-1", KEY, "result", Map.of("status", "ok"), Frames.json("the value"));
    assertEquals(Map.of("ok", true), ack.header());
    assertEquals("the value", call.ref.get(1000));

    // A later attempt (the first was killed after its result arrived, before it exited).
    Frames.Frame again = fetch(call, "task-1");
    assertEquals(Map.of("ok", true, "done", true), again.header());
    assertEquals(0, again.payload().length);
    // A second result changes nothing: the first is kept.
    assertEquals(Map.of("ok", true),
        request(call, "task-1", KEY, "result", Map.of("status", "ok"), Frames.json("another")).header());
    assertEquals("the value", call.ref.get(1000));
    // Still only the work's own processes are answered.
    var wrongKey = request(call, "task-1", "cd".repeat(32), "fetch", Map.of(), new byte[0]).header();
    assertEquals(false, wrongKey.get("ok"));
    assertEquals(false, fetch(call, "task-2").header().get("ok"));
  }

  @Test
  void anActorsCallIsFetchedByEveryAttempt() throws Exception {
    owner = new Owner(new String[] {"127.0.0.1", "127.0.0.1"});
    var call = new Owner.Call(Frames.json(Map.of("class", "io.berth.Counter", "signature", "(I)V", "args", List.of(1))));
    owner.add(call);
    owner.bind(call, "actor-1", KEY);
    for (int attempt = 0; attempt < 2; attempt++) {
      Frames.Frame reply = fetch(call, "actor-1");
      assertEquals("actor", reply.header().get("kind"), "a restarted actor builds its object again");
      assertArrayEquals(call.payload, reply.payload());
    }
  }

  @Test
  void whatTheOwnerRemembersIsBounded() throws Exception {
    owner = new Owner(new String[] {"127.0.0.1", "127.0.0.1"}, 2);
    var calls = List.of(task("task-1", dir.resolve("1")), task("task-2", dir.resolve("2")),
        task("task-3", dir.resolve("3")));
    for (int i = 0; i < calls.size(); i++) {
      var ack = request(calls.get(i), "task-" + (i + 1), KEY, "result", Map.of("status", "ok"), Frames.json("v"));
      assertEquals(Map.of("ok", true), ack.header());
    }
    // The oldest is forgotten: told (as for any call it does not know) that this owner has no such call.
    var forgotten = fetch(calls.get(0), "task-1").header();
    assertEquals(false, forgotten.get("ok"), forgotten.toString());
    assertEquals(true, fetch(calls.get(1), "task-2").header().get("done"));
    assertEquals(true, fetch(calls.get(2), "task-3").header().get("done"));
  }

  @Test
  void aWorkerToldDoneExitsZeroWithoutRunningTheCall() throws Exception {
    owner = new Owner(new String[] {"127.0.0.1", "127.0.0.1"});
    Path ran = dir.resolve("ran");
    var call = task("task-1", ran);
    // Attempt 1 runs the call and hands back its result; attempt 2 finds it done.
    assertEquals(0, worker(call, 1));
    assertEquals(ran.toString(), call.ref.get(1000));
    assertEquals("ran\n", Files.readString(ran, StandardCharsets.UTF_8));
    assertEquals(0, worker(call, 2));
    assertEquals("ran\n", Files.readString(ran, StandardCharsets.UTF_8), "the call ran once");
    assertFalse(call.ref.future.isCompletedExceptionally());
    assertTrue(call.ref.future.isDone());
  }

  /** Runs {@code java io.berth.Worker} as an agent would for attempt {@code attempt} of task-1; its exit code. */
  private int worker(Owner.Call call, int attempt) throws Exception {
    var jvm = new Rest.Jvm(null, Worker.class.getName(), Map.of("BERTH_TASK_ID", "task-1", "BERTH_ATTEMPT",
        Integer.toString(attempt), "BERTH_WORK_KEY", KEY, "BERTH_OWNER", owner.address, "BERTH_CALL", call.id));
    int code = jvm.exit();
    assertEquals(0, code, jvm.output());
    return code;
  }
}
