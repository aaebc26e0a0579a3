package io.berth;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A driver's job against a real HTTP server on loopback playing the head, which fails renewals
 * on purpose: what init sends, renewals that fail (a warning each, and retried), one that hears
 * the job has ended (said once, renewing stops), and the finish at shutdown.
 */
class RenewalTest {
  private HttpServer server;

  @AfterEach
  void stop() {
    Berth.shutdown();
    if (server != null) {
      server.stop(0);
    }
  }

  private static void answer(HttpExchange exchange, int status, String body) throws IOException {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    exchange.getResponseHeaders().add("Content-Type", "application/json");
    exchange.sendResponseHeaders(status, bytes.length);
    exchange.getResponseBody().write(bytes);
    exchange.close();
  }

  @Test
  void failedRenewalsAreWarnedAndRetriedAndAnEndedJobIsSaidOnce() throws Exception {
    String job = "{\"job_id\": \"job-1\", \"state\": \"RUNNING\", \"lease_ms\": 1000}";
    List<JsonNode> created = new ArrayList<>();
    List<String> finished = new ArrayList<>();
    AtomicInteger renewals = new AtomicInteger();
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/api/v1/cluster/status", exchange -> answer(exchange, 200, "{}"));
    server.createContext("/api/v1/jobs", exchange -> {
      byte[] body = exchange.getRequestBody().readAllBytes();
      String path = exchange.getRequestURI().getPath();
      if (path.equals("/api/v1/jobs")) {
        synchronized (created) {
          created.add(Frames.JSON.readTree(body));
        }
        answer(exchange, 201, job);
      } else if (path.equals("/api/v1/jobs/job-1/renew")) {
        // Two failures, two renewals, then the job has ended.
        int n = renewals.incrementAndGet();
        if (n <= 2) {
          answer(exchange, 500, "{\"error\": \"internal\", \"message\": \"the store is busy\"}");
        } else if (n <= 4) {
          answer(exchange, 200, job);
        } else {
          answer(exchange, 409, "{\"error\": \"conflict\", \"message\": \"job job-1 has ended (STOPPED: by a user)\"}");
        }
      } else if (path.equals("/api/v1/jobs/job-1/finish")) {
        synchronized (finished) {
          finished.add(new String(body, StandardCharsets.UTF_8));
        }
        answer(exchange, 200, job);
      } else {
        answer(exchange, 404, "{}");
      }
    });
    server.start();

    try (var log = new Rest.Captured()) {
      Berth.init("http://127.0.0.1:" + server.getAddress().getPort(), "t", null, Duration.ofSeconds(1));
      assertEquals("job-1", Berth.jobId());
      JobLease lease = Berth.session().job;
      Rest.eventually("renewals to stop", Rest.WAIT, () -> lease.renewals.isDone() ? true : null);
      assertEquals(5, renewals.get(), "retried after each failure, none after the job ended");
      List<String> warnings = log.messages(Level.WARNING, "cannot renew job-1's lease");
      assertEquals(2, warnings.size(), warnings.toString());
      assertTrue(warnings.get(0).contains("the store is busy") && warnings.get(0).contains("retrying"), warnings.get(0));
      assertEquals(1, log.messages(Level.INFO, "renewed job-1's lease again").size());
      List<String> severe = log.messages(Level.SEVERE, "job-1");
      assertEquals(1, severe.size(), severe.toString());
      assertTrue(severe.get(0).contains("the head ended this driver's job job-1")
          && severe.get(0).contains("STOPPED: by a user"), severe.get(0));
    }

    assertEquals(1, created.size());
    JsonNode body = created.get(0);
    assertEquals(1.0, body.path("lease_s").asDouble());
    assertTrue(body.path("idempotency_key").asText().startsWith("berth-java-"), body.toString());
    assertTrue(body.path("name").asText().startsWith("org.apache.maven.surefire"), "the main class: " + body);
    JsonNode metadata = body.path("metadata");
    assertEquals("java", metadata.path("sdk").asText());
    assertEquals(Long.toString(ProcessHandle.current().pid()), metadata.path("pid").asText());
    assertTrue(!metadata.path("host").asText().isEmpty(), metadata.toString());
    String entrypoint = metadata.path("entrypoint").asText();
    assertTrue(entrypoint.contains("java"), entrypoint);
    assertTrue(entrypoint.getBytes(StandardCharsets.UTF_8).length <= 4096, "at most the head's 4096 bytes");

    Berth.shutdown();
    assertEquals(1, finished.size(), "shutdown finishes the job: " + finished);
  }

  @Test
  void metadataIsCutAtACharacterWithin4096Bytes() {
    assertEquals("abc", JobLease.truncate("abc", 4096));
    String euros = "€".repeat(2000); // 3 bytes each
    String cut = JobLease.truncate(euros, 4096);
    assertEquals(1365, cut.length());
    assertEquals(4095, cut.getBytes(StandardCharsets.UTF_8).length);
    assertEquals("a", JobLease.truncate("a😀", 4));
  }
}
