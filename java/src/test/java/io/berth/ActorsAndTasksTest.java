package io.berth;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Restarts, timeouts, tasks and placement groups from Java, on a real cluster. */
class ActorsAndTasksTest extends ClusterTest {

  @Test
  void ofSeveralHeadAddressesTheFirstActiveOneIsUsed() throws Exception {
    int closed;
    try (var socket = new java.net.ServerSocket(0)) {
      closed = socket.getLocalPort();
    }
    String down = "127.0.0.1:" + closed;
    assertEquals("http://" + cluster.address, new Client(down + "," + cluster.address, cluster.token).url);
    assertEquals("http://" + down, new Client(down + ", " + down, cluster.token).url);
  }

  @Test
  void aRestartedActorIsReachedThroughTheSameHandle() throws Exception {
    ActorHandle<Counter> counter = Berth.actor(Counter::new, 5).setMaxRestarts(1).remote();
    assertEquals(6, counter.task(Counter::increase, 1).remote().get(60_000));
    long first = counter.task(Counter::pid).remote().get(60_000);
    ProcessHandle.of(first).orElseThrow().destroyForcibly();
    long second = -1;
    for (int i = 0; i < 100 && second < 0; i++) {
      try {
        second = counter.task(Counter::pid).remote().get(60_000);
      } catch (BerthException e) {
        // the call in flight when the process died fails; the next goes to the restarted one
      }
    }
    assertNotEquals(first, second);
    assertEquals(6, counter.task(Counter::increase, 1).remote().get(60_000), "the constructor ran again");
  }

  /** Says `hello` to the worker at `address` naming attempt `wanted`: its reply's header. */
  private static Map<String, Object> hello(String address, String key, int wanted) throws Exception {
    int colon = address.lastIndexOf(':');
    try (var socket = new java.net.Socket(address.substring(0, colon), Integer.parseInt(address.substring(colon + 1)))) {
      var out = new java.io.DataOutputStream(new java.io.BufferedOutputStream(socket.getOutputStream()));
      var in = new java.io.DataInputStream(new java.io.BufferedInputStream(socket.getInputStream()));
      Frames.send(out, Map.of("op", "hello", "key", key, "version", 1, "attempt", wanted), new byte[0]);
      return Frames.recv(in).header();
    }
  }

  @Test
  void aCopyNeverAnswersForAnotherAttempt() throws Exception {
    ActorHandle<Counter> counter = Berth.actor(Counter::new, 5).setMaxRestarts(1).remote();
    assertEquals(6, counter.task(Counter::increase, 1).remote().get(60_000));
    var client = new Client(cluster.address, cluster.token);
    var endpoint = client.call("GET", "/api/v1/actors/" + counter.getId() + "/endpoint", null);
    String address = endpoint.path("endpoint").path("address").asText();
    int attempt = endpoint.path("endpoint").path("attempt").asInt();
    String key = endpoint.path("work_key").asText();
    assertEquals(Boolean.TRUE, hello(address, key, attempt).get("ok"));
    // An earlier attempt named (a caller behind the head): refused; the copy stays.
    var behind = hello(address, key, attempt - 1);
    assertEquals(Boolean.FALSE, behind.get("ok"));
    assertEquals(attempt, ((Number) behind.get("attempt")).intValue());
    assertEquals(7, counter.task(Counter::increase, 1).remote().get(60_000));
    // A later attempt named: this copy is stale, refuses and ends; the handle finds the next.
    assertEquals(attempt, ((Number) hello(address, key, attempt + 1).get("attempt")).intValue());
    long deadline = System.nanoTime() + 60_000_000_000L;
    while (true) {
      var actor = client.call("GET", "/api/v1/actors/" + counter.getId(), null);
      if ("ALIVE".equals(actor.path("state").asText()) && actor.path("restarts").asInt() == 1) {
        break;
      }
      assertTrue(System.nanoTime() < deadline, actor.toString());
      Thread.sleep(50);
    }
    assertEquals(6, counter.task(Counter::increase, 1).remote().get(60_000), "the constructor ran again");
  }

  @Test
  void theRuntimeContextSaysTheJobTheWorkAndWhatWasReserved() {
    RuntimeContext driver = Berth.getRuntimeContext();
    assertEquals(Berth.jobId(), driver.getCurrentJobId());
    assertEquals(null, driver.getCurrentTaskId());
    assertEquals(0, driver.getAttempt());
    assertTrue(driver.getAssignedResources().isEmpty());
    Map<String, Object> inTask = Berth.task(Tasks::context).setResource("CPU", 0.5).remote().get(60_000);
    assertEquals(Berth.jobId(), inTask.get("job"));
    assertTrue(String.valueOf(inTask.get("task")).startsWith("task-"), inTask.toString());
    assertEquals(1, inTask.get("attempt"));
    assertEquals("default", inTask.get("namespace"));
    assertEquals(Map.of("CPU", 0.5), inTask.get("resources"));
    assertEquals(Map.of(), inTask.get("ids"));
    assertEquals(4.0 * (1L << 30), RuntimeContext.amount("4Gi"));
  }

  @Test
  void theOwnerServiceListensOnTheAddressThatReachesTheHeadNotEveryInterface() throws Exception {
    String[] listen = Berth.listenAddress("http://" + cluster.address);
    assertEquals("127.0.0.1", listen[0], "loopback toward a local head");
    assertEquals("127.0.0.1", listen[1]);
    assertTrue(Berth.session().owner.address.startsWith("127.0.0.1:"), Berth.session().owner.address);
    System.setProperty("berth.bind", "0.0.0.0");
    try {
      String[] every = Berth.listenAddress("http://" + cluster.address);
      assertEquals("0.0.0.0", every[0]);
      assertEquals("127.0.0.1", every[1], "announced as the outward address");
      System.setProperty("berth.bind", "192.0.2.1");
      var refused = assertThrows(BerthException.class, () -> Berth.listen(Berth.listenAddress("x")[0]));
      assertEquals("bind", refused.field());
    } finally {
      System.clearProperty("berth.bind");
    }
  }

  @Test
  void putValuesAndRefsPassedAsRefsAreFetchedFromTheirHolder() {
    ObjectRef<Integer> twenty = Berth.put(20);
    assertEquals(20, twenty.get());
    ObjectRef<Integer> pending = Berth.task(Tasks::square, 5).remote();
    assertEquals(45, Berth.task(Tasks::total, twenty, pending).remote().get(60_000));
    var refused = assertThrows(BerthException.class, () -> Berth.put(twenty));
    assertTrue(refused.getMessage().contains("put() of an ObjectRef"), refused.getMessage());
  }

  @Test
  void getTimesOut() {
    ActorHandle<Counter> counter = Berth.actor(Counter::new, 0).remote();
    assertEquals(0, counter.task(Counter::getValue).remote().get(60_000));
    var slow = counter.task(Counter::sleep, 3000).remote();
    assertThrows(BerthException.GetTimeoutException.class, () -> slow.get(200));
    assertEquals(3000, slow.get(60_000));
  }

  @Test
  void staticMethodsRunAsTasks() {
    List<ObjectRef<Integer>> refs = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      refs.add(Berth.task(Tasks::square, i).remote());
    }
    for (int i = 0; i < 5; i++) {
      assertEquals(i * i, refs.get(i).get(60_000));
    }
    assertEquals("cpu-a", Berth.task(Tasks::node).setLabelSelector(Map.of("berth.io/market-type", "spot"))
        .remote().get(60_000));
    var error = assertThrows(BerthException.TaskException.class,
        () -> Berth.task(Tasks::fail, "on purpose").setMaxRetries(0).remote().get(60_000));
    assertEquals("java.lang.IllegalArgumentException", error.remoteType());
    assertTrue(error.getMessage().contains("on purpose"));
  }

  @Test
  void placementGroupsWithBundleSelectorsAndTolerations() {
    PlacementGroup group = Berth.placementGroup(List.of(Map.of("CPU", 1.0), Map.of("GPU", 1.0), Map.of("GPU", 1.0)))
        .setStrategy("PACK")
        .setBundleLabelSelector(List.of(Map.of("berth.io/market-type", "spot"),
            Map.of("berth.io/accelerator-type", "nvidia-h100"), Map.of("berth.io/accelerator-type", "nvidia-h100")))
        .setTolerations(Map.of("gpu_node", "exists()"))
        .create();
    assertTrue(group.wait(60));
    assertEquals(List.of("cpu-a", "gpu-b", "gpu-b"), group.bundleNodes());
    ActorHandle<Counter> inside = Berth.actor(Counter::new, 0).setResource("GPU", 1)
        .setSchedulingStrategy(group.bundle(1)).remote();
    assertEquals("gpu-b", inside.task(Counter::node).remote().get(60_000));
    Berth.removePlacementGroup(group);
    var bad = assertThrows(BerthException.class, () -> Berth.placementGroup(List.of(Map.of("GPU", 1.0)))
        .setBundleLabelSelector(List.of(Map.of(), Map.of())));
    assertEquals("bundle_label_selector", bad.field());
  }

  @Test
  void badAmountsAreRefusedBeforeAnythingIsSent() {
    var error = assertThrows(BerthException.class, () -> Berth.actor(Counter::new, 1).setResource("GPU", 1.5));
    assertEquals("resources.GPU", error.field());
    assertTrue(error.getMessage().contains("shared per instance"), error.getMessage());
    assertEquals("resources.CPU", assertThrows(BerthException.class,
        () -> Berth.task(Tasks::node).setResource("CPU", -1)).field());
    assertEquals("resources.CPU", assertThrows(BerthException.class,
        () -> Berth.task(Tasks::node).setResource("CPU", 0.12345)).field());
  }
}
