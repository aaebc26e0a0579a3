package io.berth;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.UUID;

/** The head's REST API; finds the head and token as the CLI does. */
final class Client {
  final String url;
  private final String token;
  private final HttpClient http =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).version(HttpClient.Version.HTTP_1_1).build();

  /** Asks each of several head addresses whether it is the active head. */
  private static final HttpClient PROBE =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).version(HttpClient.Version.HTTP_1_1).build();

  Client(String address, String token) {
    Path dir = dataDir();
    if (address == null || address.isEmpty()) {
      address = System.getenv("BERTH_ADDRESS");
    }
    if (address == null || address.isEmpty()) {
      try {
        address = Files.readString(dir.resolve("head-address")).trim();
      } catch (IOException e) {
        throw new BerthException("no Berth head to connect to: give Berth.init(address), set $BERTH_ADDRESS, "
            + "or start one (berth up); looked at $BERTH_ADDRESS and " + dir.resolve("head-address"));
      }
    }
    if (token == null || token.isEmpty()) {
      token = System.getenv("BERTH_TOKEN");
    }
    if (token == null || token.isEmpty()) {
      try {
        token = Files.readString(dir.resolve("token")).trim();
      } catch (IOException e) {
        token = null;
      }
    }
    this.url = active(address);
    this.token = token;
  }

  /**
   * Of a head's addresses (comma-separated: itself and its standbys), the first whose head is
   * active: its /healthz says "ok" (a standby says "standby"); the first when none answers.
   */
  static String active(String addresses) {
    var urls = new java.util.ArrayList<String>();
    for (String a : addresses.split(",")) {
      String t = a.trim();
      if (!t.isEmpty()) {
        urls.add((t.contains("://") ? t : "http://" + t).replaceAll("/+$", ""));
      }
    }
    if (urls.isEmpty()) {
      throw new BerthException("address " + addresses + " names no head");
    }
    if (urls.size() > 1) {
      for (String candidate : urls) {
        try {
          var request = HttpRequest.newBuilder(URI.create(candidate + "/healthz")).timeout(Duration.ofSeconds(2)).build();
          var response = PROBE.send(request, HttpResponse.BodyHandlers.ofByteArray());
          if (response.statusCode() == 200 && "ok".equals(Frames.JSON.readTree(response.body()).path("status").asText())) {
            return candidate;
          }
        } catch (IOException | IllegalArgumentException e) {
          // Unreachable or not a head: try the next.
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          break;
        }
      }
    }
    return urls.get(0);
  }

  static Path dataDir() {
    String env = System.getenv("BERTH_DATA_DIR");
    if (env != null && !env.isEmpty()) {
      return Path.of(env);
    }
    String home = System.getenv("HOME");
    return home == null ? Path.of(".berth") : Path.of(home, ".berth");
  }

  JsonNode call(String method, String path, Object body) {
    return call(method, path, body, Duration.ofSeconds(60), false);
  }

  /** A creation is sent at most this many times (waits of 0.2, 0.4, 0.8, 1.6 and 2 s). */
  static final int CREATE_ATTEMPTS = 6;

  /**
   * POSTs a creation (an actor, a task, a placement group) with an idempotency key, and sends
   * it again with the same key when it was cut off before its answer (the connection lost, no
   * answer in time, or 503 while the head's store or lease moved): the head makes the object
   * once, whatever reached it.
   */
  /**
   * Logs (as a warning, on the {@code io.berth} logger) the hints of a creation's answer: a
   * name no node has that looks like one the cluster has ({@code cpu} for {@code CPU}).
   */
  static void warnHints(JsonNode answer) {
    if (answer == null) {
      return;
    }
    for (JsonNode hint : answer.path("diagnosis").path("hints")) {
      String id = answer.path("actor_id").asText(answer.path("task_id").asText(answer.path("group_id").asText("request")));
      System.getLogger("io.berth").log(System.Logger.Level.WARNING, id + ": " + hint.asText());
    }
  }

  JsonNode create(String path, Map<String, Object> body) {
    body.putIfAbsent("idempotency_key", "berth-java-" + UUID.randomUUID());
    long delay = 200;
    for (int attempt = 1; ; attempt++) {
      try {
        JsonNode answer = call("POST", path, body);
        warnHints(answer);
        return answer;
      } catch (MaybeSent e) {
        if (attempt >= CREATE_ATTEMPTS) {
          throw e;
        }
      } catch (Unreachable e) {
        // Nothing listened at first: said at once. Later, the head may be restarting.
        if (attempt == 1 || attempt >= CREATE_ATTEMPTS) {
          throw e;
        }
      }
      try {
        Thread.sleep(delay);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new BerthException(null, "interrupted", e);
      }
      delay = Math.min(delay * 2, 2000);
    }
  }

  /** A request that may have reached the head, whose answer never came (or was 503). */
  static final class MaybeSent extends BerthException {
    private static final long serialVersionUID = 1L;

    MaybeSent(String field, String message, Throwable cause) {
      super(field, message, cause);
    }
  }

  /** Nothing listened at the head's address. */
  static final class Unreachable extends BerthException {
    private static final long serialVersionUID = 1L;

    Unreachable(String message, Throwable cause) {
      super(null, message, cause);
    }
  }

  /** Sends one request; a 408 answers null when {@code allowTimeout}. */
  JsonNode call(String method, String path, Object body, Duration timeout, boolean allowTimeout) {
    var request = HttpRequest.newBuilder(URI.create(url + path)).timeout(timeout).header("Accept", "application/json");
    if (token != null) {
      request.header("Authorization", "Bearer " + token);
    }
    if (body != null) {
      request.header("Content-Type", "application/json");
      request.method(method, HttpRequest.BodyPublishers.ofByteArray(Frames.json(body)));
    } else {
      request.method(method, HttpRequest.BodyPublishers.noBody());
    }
    HttpResponse<byte[]> response;
    try {
      response = http.send(request.build(), HttpResponse.BodyHandlers.ofByteArray());
    } catch (ConnectException e) {
      throw new Unreachable("cannot reach the Berth head at " + url + ": " + e.getMessage()
          + "; is it running (berth up)?", e);
    } catch (IOException e) {
      throw new MaybeSent(null, "the head at " + url + " did not answer " + method + " " + path + ": " + e, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new BerthException(null, "interrupted", e);
    }
    int status = response.statusCode();
    JsonNode answer;
    try {
      answer = response.body().length == 0 ? null : Frames.JSON.readTree(response.body());
    } catch (IOException e) {
      answer = null;
    }
    if (status >= 200 && status < 300) {
      return answer;
    }
    if (status == 408 && allowTimeout) {
      return null;
    }
    String message = answer != null && answer.has("message") ? answer.get("message").asText() : "HTTP " + status;
    String field = answer != null && answer.hasNonNull("field") ? answer.get("field").asText() : null;
    if (status == 401) {
      message += " (Berth.init(address, token) or $BERTH_TOKEN)";
    }
    if (status == 503) {
      throw new MaybeSent(field, message, null);
    }
    throw new BerthException(field, message, null);
  }
}
