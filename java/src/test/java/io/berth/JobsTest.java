package io.berth;

import static io.berth.Rest.awaitState;
import static io.berth.Rest.eventually;
import static io.berth.Rest.get;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.logging.Level;
import org.junit.jupiter.api.Test;

/**
 * Jobs and owners from Java on a real cluster: a driver's job, what it owns and what ends with
 * it (finished, or lost when the driver is killed), detached work, work a worker creates, a job
 * the head ended, and the warning about work no node can take.
 */
class JobsTest extends ClusterTest {

  @Test
  void aDriversJobOwnsWhatItCreatesAndFinishesAtShutdown() throws Exception {
    String job = Berth.jobId();
    assertNotNull(job);
    JsonNode running = get(cluster, "/api/v1/jobs/" + job);
    assertEquals("RUNNING", running.path("state").asText());
    assertEquals(30_000, running.path("lease_ms").asLong(), "the head's default lease");
    JsonNode metadata = running.path("spec").path("metadata");
    assertEquals("java", metadata.path("sdk").asText());
    assertEquals(Long.toString(ProcessHandle.current().pid()), metadata.path("pid").asText());
    assertFalse(metadata.path("host").asText().isEmpty());
    assertTrue(metadata.path("entrypoint").asText().contains("java"), metadata.toString());
    assertFalse(running.path("spec").path("name").asText().isEmpty());

    ActorHandle<Counter> actor = Berth.actor(Counter::new, 1).remote();
    ActorHandle<Counter> detached = Berth.actor(Counter::new, 1).setLifetime(Lifetime.DETACHED).remote();
    assertEquals(2, actor.task(Counter::increase, 1).remote().get(60_000));
    assertEquals(2, detached.task(Counter::increase, 1).remote().get(60_000));
    assertEquals(9, Berth.task(Tasks::square, 3).remote().get(60_000));
    PlacementGroup group = Berth.placementGroup(List.of(Map.of("CPU", 1.0))).create();
    assertTrue(group.wait(60));
    for (String path : List.of("/api/v1/actors/" + actor.getId(), "/api/v1/actors/" + detached.getId(),
        "/api/v1/placement_groups/" + group.getId())) {
      JsonNode spec = get(cluster, path).path("spec");
      assertEquals(job, spec.path("job_id").asText(), path + ": " + spec);
      assertFalse(spec.has("owner_id"), "a driver's work is owned by its job: " + spec);
    }
    assertEquals("detached", get(cluster, "/api/v1/actors/" + detached.getId()).path("spec").path("lifetime").asText());
    for (JsonNode task : get(cluster, "/api/v1/tasks?job=" + job).path("items")) {
      assertEquals(job, task.path("spec").path("job_id").asText());
    }
    assertEquals(1, get(cluster, "/api/v1/tasks?job=" + job).path("total").asInt());

    Berth.shutdown();
    assertNull(Berth.jobId());
    JsonNode finished = get(cluster, "/api/v1/jobs/" + job);
    assertEquals("FINISHED", finished.path("state").asText(), finished.toString());
    awaitState(cluster, "/api/v1/actors/" + actor.getId(), "DEAD");
    assertTrue(get(cluster, "/api/v1/actors/" + actor.getId()).path("death_reason").asText().contains(job));
    awaitState(cluster, "/api/v1/placement_groups/" + group.getId(), "REMOVED");
    assertEquals("ALIVE", Rest.state(cluster, "/api/v1/actors/" + detached.getId()), "detached: it outlives its job");
    new Client(cluster.address, cluster.token).call("DELETE", "/api/v1/actors/" + detached.getId(), null);
  }

  @Test
  void aKilledDriversJobIsLostAndItsNonDetachedWorkEnds() throws Exception {
    var driver = new Rest.Jvm(null, JobDriver.class.getName(), Map.of(), cluster.address, cluster.token, "2");
    Map<String, String> ids = new HashMap<>();
    try {
      for (String pair : driver.line("READY ").substring("READY ".length()).split(" ")) {
        String[] kv = pair.split("=", 2);
        ids.put(kv[0], kv[1]);
      }
      JsonNode job = get(cluster, "/api/v1/jobs/" + ids.get("job"));
      assertEquals(2000, job.path("lease_ms").asLong());
      // Held for more than two leases while the driver lives: the SDK renews it.
      long created = job.path("created_at_ms").asLong();
      eventually("two leases since the job began", Rest.WAIT,
          () -> System.currentTimeMillis() - created > 4_000 ? true : null);
      assertEquals("RUNNING", Rest.state(cluster, "/api/v1/jobs/" + ids.get("job")));
    } finally {
      driver.process.destroyForcibly(); // SIGKILL: no shutdown hook runs
    }
    driver.exit();
    awaitState(cluster, "/api/v1/jobs/" + ids.get("job"), "LOST");
    awaitState(cluster, "/api/v1/actors/" + ids.get("actor"), "DEAD");
    awaitState(cluster, "/api/v1/placement_groups/" + ids.get("group"), "REMOVED");
    assertEquals("ALIVE", Rest.state(cluster, "/api/v1/actors/" + ids.get("detached")));
    assertEquals("CREATED", Rest.state(cluster, "/api/v1/placement_groups/" + ids.get("detachedGroup")));
    var client = new Client(cluster.address, cluster.token);
    client.call("DELETE", "/api/v1/actors/" + ids.get("detached"), null);
    client.call("DELETE", "/api/v1/placement_groups/" + ids.get("detachedGroup"), null);
    awaitState(cluster, "/api/v1/actors/" + ids.get("detached"), "DEAD");
  }

  @Test
  void aKilledDriversRunningTaskIsCancelledWithItsJobNotFailed() throws Exception {
    // Its worker cannot hand back the result; it keeps trying to reach the driver instead of
    // failing attempt after attempt, and the task ends with the job, CANCELLED.
    java.nio.file.Path started = java.nio.file.Files.createTempDirectory("berth-task").resolve("started");
    var driver = new Rest.Jvm(null, JobDriver.class.getName(), Map.of(), cluster.address, cluster.token, "4",
        started.toString());
    String job;
    try {
      job = driver.line("READY ").substring("READY job=".length()).trim();
      eventually("the task runs", Rest.WAIT, () -> java.nio.file.Files.exists(started) ? true : null);
    } finally {
      driver.process.destroyForcibly(); // SIGKILL: no shutdown hook runs
    }
    driver.exit();
    awaitState(cluster, "/api/v1/jobs/" + job, "LOST");
    String taskId = get(cluster, "/api/v1/tasks?job=" + job).path("items").get(0).path("task_id").asText();
    JsonNode task = eventually("the task ended", Rest.WAIT, () -> {
      JsonNode t = get(cluster, "/api/v1/tasks/" + taskId);
      return List.of("FINISHED", "FAILED", "CANCELLED").contains(t.path("state").asText()) ? t : null;
    });
    assertEquals("CANCELLED", task.path("state").asText(), task.toString());
    assertEquals(1, task.path("attempts").asInt(), "no attempt spent on the missing driver: " + task);
  }

  @Test
  void workAWorkerCreatesJoinsItsJobAndEndsWithItsProcess() throws Exception {
    String job = Berth.jobId();
    int jobs = get(cluster, "/api/v1/jobs").path("total").asInt();
    ActorHandle<Parent> parent = Berth.actor(Parent::new).remote();
    Map<String, Object> spawned = parent.task(Parent::spawn).remote().get(120_000);
    assertEquals(7, spawned.get("value"));
    assertTrue(String.valueOf(spawned.get("nodes")).contains("a work credential cannot GET /api/v1/nodes"),
        String.valueOf(spawned.get("nodes")));
    assertEquals(job, spawned.get("job"), "inside a worker, Berth.jobId() is the worker's job");
    String child = (String) spawned.get("child");
    JsonNode spec = get(cluster, "/api/v1/actors/" + child).path("spec");
    assertEquals(job, spec.path("job_id").asText(), spec.toString());
    assertEquals(parent.getId(), spec.path("owner_id").asText(), spec.toString());
    assertEquals(jobs, get(cluster, "/api/v1/jobs").path("total").asInt(), "a worker's Berth.init makes no job");

    Berth.kill(parent);
    awaitState(cluster, "/api/v1/actors/" + child, "DEAD");
    String reason = get(cluster, "/api/v1/actors/" + child).path("death_reason").asText();
    assertTrue(reason.contains(parent.getId()), reason);
  }

  @Test
  void aLeaseOutsideTheHeadsLimitsAndANullLifetimeAreRefusedNamingTheirFields() {
    var lifetime = assertThrows(BerthException.class, () -> Berth.actor(Counter::new, 1).setLifetime(null));
    assertEquals("lifetime", lifetime.field());
    var groupLifetime = assertThrows(BerthException.class,
        () -> Berth.placementGroup(List.of(Map.of("CPU", 1.0))).setLifetime(null));
    assertEquals("lifetime", groupLifetime.field());
    Berth.shutdown();
    for (Duration lease : List.of(Duration.ofMillis(500), Duration.ofDays(2))) {
      var refused = assertThrows(BerthException.class,
          () -> Berth.init(cluster.address, cluster.token, null, lease));
      assertEquals("lease_s", refused.field());
      assertTrue(refused.getMessage().contains("is not from 1 to 86400 seconds"), refused.getMessage());
      assertNull(Berth.jobId());
    }
  }

  @Test
  void aJobTheHeadEndedIsSaidOnceAndNoLongerRenewed() throws Exception {
    Berth.shutdown();
    Berth.init(cluster.address, cluster.token, null, Duration.ofSeconds(3));
    String job = Berth.jobId();
    JobLease lease = Berth.session().job;
    assertEquals(3000, lease.leaseMs);
    try (var log = new Rest.Captured()) {
      new Client(cluster.address, cluster.token).call("POST", "/api/v1/jobs/" + job + "/stop",
          Map.of("reason", "stopped by the test"));
      // The next renewal (every 0.5 s) hears 409: said once, and renewing ends.
      eventually("the SEVERE record", Rest.WAIT, () -> log.messages(Level.SEVERE, job).isEmpty() ? null : true);
      eventually("renewals to stop", Rest.WAIT, () -> lease.renewals.isDone() ? true : null);
      List<String> severe = log.messages(Level.SEVERE, job);
      assertEquals(1, severe.size(), severe.toString());
      assertTrue(severe.get(0).contains("the head ended") && severe.get(0).contains("stopped by the test"), severe.get(0));
      // Creations in the ended job are refused by the head, naming it.
      var refused = assertThrows(BerthException.class, () -> Berth.actor(Counter::new, 1).remote());
      assertTrue(refused.getMessage().contains(job + " has ended"), refused.getMessage());
      Berth.shutdown();
      assertEquals(List.of(), log.messages(Level.WARNING, job), "finishing an ended job is answered as it is");
    }
    assertEquals("STOPPED", Rest.state(cluster, "/api/v1/jobs/" + job));
  }

  @Test
  void waitingOnWhatNoNodeCanTakeIsWarnedOnceWithTheHeadsDiagnosis() throws Exception {
    try (var log = new Rest.Captured()) {
      var task = Berth.task(Tasks::square, 2).setResource("quantum_widget", 1).remote();
      ActorHandle<Counter> actor = Berth.actor(Counter::new, 1).setResource("quantum_widget", 1).remote();
      var call = actor.task(Counter::getValue).remote();
      PlacementGroup group = Berth.placementGroup(List.of(Map.of("quantum_widget", 1.0))).create();
      // Three waits side by side, each past its first check at 5 s.
      var waits = List.of(
          CompletableFuture.runAsync(() -> assertThrows(BerthException.GetTimeoutException.class, () -> task.get(6_500))),
          CompletableFuture.runAsync(() -> assertThrows(BerthException.GetTimeoutException.class, () -> call.get(6_500))),
          CompletableFuture.runAsync(() -> assertFalse(group.wait(7))));
      CompletableFuture.allOf(waits.toArray(CompletableFuture[]::new)).get();
      String taskId = get(cluster, "/api/v1/tasks?job=" + Berth.jobId()).path("items").get(0).path("task_id").asText();
      for (String id : List.of(taskId, actor.getId(), group.getId())) {
        List<String> warned = log.messages(Level.WARNING, id + " cannot be placed");
        assertEquals(1, warned.size(), id + ": " + warned);
        assertTrue(warned.get(0).contains("no node has the resource \"quantum_widget\""), warned.get(0));
      }
    }
  }

  @Test
  void workThatCanBePlacedIsNotWarnedAbout() throws Exception {
    try (var log = new Rest.Captured()) {
      ActorHandle<Counter> counter = Berth.actor(Counter::new, 0).remote();
      // Waits past the first check on an actor that is placed: no warning.
      assertEquals(5_500, counter.task(Counter::sleep, 5_500).remote().get(60_000));
      assertEquals(List.of(), log.messages(Level.WARNING, "cannot be placed"));
    }
  }
}
