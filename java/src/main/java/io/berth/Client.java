package io.berth;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLHandshakeException;
import javax.net.ssl.TrustManagerFactory;

/** The head's REST API; finds the head, token and CA file as the CLI does. */
final class Client {
  final String url;
  private final String token;
  /** The CA file that verifies an https:// head, or null. */
  private final String ca;
  private final HttpClient http;

  Client(String address, String token) {
    this(address, token, null);
  }

  /**
   * Inside a worker, the credential of its work ({@code work:<id>:<key>}, from the ID and the work
   * key its agent gave it); null outside a worker.
   */
  static String workCredential() {
    String work = System.getenv("BERTH_ACTOR_ID");
    if (work == null || work.isEmpty()) {
      work = System.getenv("BERTH_TASK_ID");
    }
    String key = System.getenv("BERTH_WORK_KEY");
    return work == null || work.isEmpty() || key == null || key.isEmpty() ? null : "work:" + work + ":" + key;
  }

  /**
   * A client of the head at {@code address} (else $BERTH_ADDRESS, else the data directory's
   * head-address) with {@code token} (else, inside a worker, its work's credential, which reaches
   * the work of the worker's own job only; else $BERTH_TOKEN, else the data directory's token) and,
   * for an https:// head, the CA file {@code ca} (else $BERTH_CA).
   */
  Client(String address, String token, String ca) {
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
      token = workCredential();
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
    if (ca == null || ca.isEmpty()) {
      ca = System.getenv("BERTH_CA");
    }
    List<String> urls = urls(address);
    SSLContext tls = tls(urls, ca);
    this.ca = tls == null ? null : ca;
    this.http = http(tls, Duration.ofSeconds(10));
    this.url = active(urls, tls);
    this.token = token;
  }

  /** Each of a head's addresses (comma-separated: itself and its standbys) as a URL, in order. */
  static List<String> urls(String addresses) {
    var urls = new ArrayList<String>();
    for (String a : addresses.split(",")) {
      String t = a.trim();
      if (!t.isEmpty()) {
        urls.add((t.contains("://") ? t : "http://" + t).replaceAll("/+$", ""));
      }
    }
    if (urls.isEmpty()) {
      throw new BerthException("address " + addresses + " names no head");
    }
    return urls;
  }

  /**
   * What verifies the heads at {@code urls}: null when none is https://, else the CA file
   * {@code ca}'s certificates (PEM) and nothing else. An https:// head without a CA file is
   * refused before any connection: nothing could prove its identity.
   */
  static SSLContext tls(List<String> urls, String ca) {
    String https = urls.stream().filter(u -> u.startsWith("https://")).findFirst().orElse(null);
    if (https == null) {
      return null;
    }
    if (ca == null || ca.isEmpty()) {
      throw new BerthException("ca", "the head at " + https + " serves TLS: give the CA file (PEM) that signed its "
          + "certificate (Berth.init(address, token, ca) or $BERTH_CA)", null);
    }
    Collection<? extends Certificate> certificates;
    try (InputStream in = Files.newInputStream(Path.of(ca))) {
      certificates = CertificateFactory.getInstance("X.509").generateCertificates(in);
    } catch (NoSuchFileException e) {
      throw new BerthException("ca", "cannot read " + ca + " (the CA for " + String.join(", ", urls) + "): no such file", e);
    } catch (IOException | CertificateException e) {
      throw new BerthException("ca", "cannot read " + ca + " as a CA certificate (PEM) for " + String.join(", ", urls)
          + ": " + e.getMessage(), e);
    }
    if (certificates.isEmpty()) {
      throw new BerthException("ca", ca + " holds no certificate (PEM: -----BEGIN CERTIFICATE-----)", null);
    }
    try {
      KeyStore trusted = KeyStore.getInstance(KeyStore.getDefaultType());
      trusted.load(null, null);
      int n = 0;
      for (Certificate certificate : certificates) {
        trusted.setCertificateEntry("berth-ca-" + n++, certificate);
      }
      TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      trust.init(trusted);
      SSLContext context = SSLContext.getInstance("TLS");
      context.init(null, trust.getTrustManagers(), null);
      return context;
    } catch (GeneralSecurityException | IOException e) {
      throw new BerthException("ca", "cannot trust the certificates of " + ca + ": " + e.getMessage(), e);
    }
  }

  /**
   * An HTTP/1.1 client, over TLS with {@code tls} when it is not null. java.net.http checks the
   * head's hostname (or IP) against its certificate: that stays on.
   */
  static HttpClient http(SSLContext tls, Duration connectTimeout) {
    var builder = HttpClient.newBuilder().connectTimeout(connectTimeout).version(HttpClient.Version.HTTP_1_1);
    if (tls != null) {
      builder.sslContext(tls);
    }
    return builder.build();
  }

  /**
   * Of a head's URLs (itself and its standbys), the first whose head is active: its /healthz
   * says "ok" (a standby says "standby"); the first when none answers. {@code tls} verifies the
   * https:// ones.
   */
  static String active(List<String> urls, SSLContext tls) {
    if (urls.size() > 1) {
      HttpClient probe = http(tls, Duration.ofSeconds(2));
      for (String candidate : urls) {
        try {
          var request = HttpRequest.newBuilder(URI.create(candidate + "/healthz")).timeout(Duration.ofSeconds(2)).build();
          var response = probe.send(request, HttpResponse.BodyHandlers.ofByteArray());
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

  /**
   * POSTs a creation (an actor, a task, a placement group) with an idempotency key, and sends
   * it again with the same key when it was cut off before its answer (the connection lost, no
   * answer in time, or 503 while the head's store or lease moved): the head makes the object
   * once, whatever reached it.
   */
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

  /** 409: the request conflicts with the cluster's state (a job that has ended, an owner without a process). */
  static final class Conflict extends BerthException {
    private static final long serialVersionUID = 1L;

    Conflict(String field, String message) {
      super(field, message, null);
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
    } catch (SSLHandshakeException e) {
      // Before any request went out: nothing to send again.
      if (causedBy(e, CertificateException.class)) {
        throw new BerthException("ca", "the certificate of the head at " + url + " could not be verified with the CA "
            + "file " + ca + ": " + rootMessage(e) + "; give the CA that signed it", e);
      }
      throw new BerthException(null, "the TLS handshake with the head at " + url + " failed: " + e.getMessage(), e);
    } catch (IOException e) {
      // However the JDK delivers it, a certificate that does not verify is the caller's setting: never retried.
      if (causedBy(e, CertificateException.class)) {
        throw new BerthException("ca", "the certificate of the head at " + url + " could not be verified with the CA "
            + "file " + ca + ": " + rootMessage(e) + "; give the CA that signed it", e);
      }
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
    if (status == 409) {
      throw new Conflict(field, message);
    }
    throw new BerthException(field, message, null);
  }

  /** The message of the innermost cause (the JDK's outer ones repeat it with class names). */
  private static String rootMessage(Throwable error) {
    Throwable root = error;
    while (root.getCause() != null) {
      root = root.getCause();
    }
    return root.getMessage() != null ? root.getMessage() : error.getMessage();
  }

  /** Whether {@code error} or one of its causes is a {@code kind}. */
  private static boolean causedBy(Throwable error, Class<? extends Throwable> kind) {
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (kind.isInstance(t)) {
        return true;
      }
    }
    return false;
  }
}
