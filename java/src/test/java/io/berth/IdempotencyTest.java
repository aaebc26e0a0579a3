package io.berth;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpServer;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * A creation cut off before its answer is sent again with the same idempotency key: against a
 * real HTTP server on loopback that closes the first two exchanges without an answer (as a head
 * killed right after it acted would).
 */
class IdempotencyTest {
  @Test
  void aCutOffCreationIsSentAgainWithTheSameKey() throws Exception {
    List<String> keys = new ArrayList<>();
    HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/api/v1/actors", exchange -> {
      JsonNode body = Frames.JSON.readTree(exchange.getRequestBody());
      synchronized (keys) {
        keys.add(body.get("idempotency_key").asText());
        if (keys.size() <= 2) {
          exchange.close();
          return;
        }
      }
      byte[] answer = "{\"actor_id\": \"actor-1\"}".getBytes(StandardCharsets.UTF_8);
      exchange.getResponseHeaders().add("Content-Type", "application/json");
      exchange.sendResponseHeaders(201, answer.length);
      exchange.getResponseBody().write(answer);
      exchange.close();
    });
    server.start();
    try {
      var client = new Client("http://127.0.0.1:" + server.getAddress().getPort(), "t");
      JsonNode actor = client.create("/api/v1/actors", new LinkedHashMap<>());
      assertEquals("actor-1", actor.get("actor_id").asText());
      assertEquals(3, keys.size(), keys.toString());
      assertTrue(keys.get(0).startsWith("berth-java-"), keys.toString());
      assertEquals(1, keys.stream().distinct().count(), keys.toString());
    } finally {
      server.stop(0);
    }
  }

  @Test
  void aCreationsHintsAreLoggedAsWarnings() throws Exception {
    HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/api/v1/tasks", exchange -> {
      exchange.getRequestBody().readAllBytes();
      byte[] answer = ("{\"task_id\": \"task-1\", \"diagnosis\": {\"hints\": "
          + "[\"no node has the resource \\\"cpu\\\"; did you mean \\\"CPU\\\"?\"]}}")
          .getBytes(StandardCharsets.UTF_8);
      exchange.getResponseHeaders().add("Content-Type", "application/json");
      exchange.sendResponseHeaders(201, answer.length);
      exchange.getResponseBody().write(answer);
      exchange.close();
    });
    List<java.util.logging.LogRecord> logged = new ArrayList<>();
    var handler = new java.util.logging.Handler() {
      @Override public void publish(java.util.logging.LogRecord record) { logged.add(record); }
      @Override public void flush() {}
      @Override public void close() {}
    };
    var logger = java.util.logging.Logger.getLogger("io.berth");
    logger.addHandler(handler);
    server.start();
    try {
      var client = new Client("http://127.0.0.1:" + server.getAddress().getPort(), "t");
      client.create("/api/v1/tasks", new LinkedHashMap<>());
      assertEquals(1, logged.size(), logged.toString());
      assertEquals(java.util.logging.Level.WARNING, logged.get(0).getLevel());
      assertTrue(logged.get(0).getMessage().contains("task-1: no node has the resource \"cpu\"; did you mean \"CPU\"?"),
          logged.get(0).getMessage());
    } finally {
      logger.removeHandler(handler);
      server.stop(0);
    }
  }

  @Test
  void nothingListeningIsSaidAtOnce() throws Exception {
    int port;
    try (var socket = new ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    var client = new Client("http://127.0.0.1:" + port, "t");
    long started = System.nanoTime();
    assertThrows(Client.Unreachable.class, () -> client.create("/api/v1/actors", new LinkedHashMap<>()));
    // Not retried: the waits between attempts alone would take seconds.
    assertTrue(System.nanoTime() - started < 60_000_000_000L);
  }
}
