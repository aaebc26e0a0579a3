package io.berth;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.jar.JarFile;

/**
 * A driver's job (docs/guide.md, "Jobs and owners"): created by {@link Berth#init}, held by a
 * lease renewed every sixth of it on a daemon thread, finished by {@link Berth#shutdown} or,
 * when the program exits without it, by a JVM shutdown hook. A driver killed outright stops
 * renewing, and the head ends the job (LOST) and what it owns within a lease.
 */
final class JobLease {
  private static final System.Logger LOG = System.getLogger("io.berth");
  /** The head's limits for {@code lease_s}. */
  static final Duration MIN_LEASE = Duration.ofSeconds(1);
  static final Duration MAX_LEASE = Duration.ofDays(1);
  /** The head's limit for a metadata value. */
  static final int MAX_METADATA_BYTES = 4096;

  final String jobId;
  final long leaseMs;
  private final Client client;
  private final ScheduledExecutorService renewer;
  final ScheduledFuture<?> renewals;
  private final AtomicBoolean ended = new AtomicBoolean();
  private final Thread hook;
  /** Whether the last renewal failed (the next success says so once). */
  private volatile boolean failing;

  private JobLease(Client client, JsonNode job) {
    this.client = client;
    this.jobId = job.get("job_id").asText();
    this.leaseMs = job.path("lease_ms").asLong(30_000);
    this.renewer = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "berth-job-renew");
      t.setDaemon(true);
      return t;
    });
    long every = Math.max(1, leaseMs / 6);
    this.renewals = renewer.scheduleWithFixedDelay(this::renew, every, every, TimeUnit.MILLISECONDS);
    this.hook = new Thread(() -> finish("its driver's JVM exited", Duration.ofSeconds(5)), "berth-job-finish");
    Runtime.getRuntime().addShutdownHook(hook);
  }

  /**
   * Creates this driver's job: named after the main class, with the SDK, host, PID and command
   * line as metadata, held for {@code lease} (null: the head's default, 30 s).
   */
  static JobLease create(Client client, String namespace, Duration lease) {
    var body = new LinkedHashMap<String, Object>();
    body.put("name", mainClass());
    body.put("namespace", namespace);
    if (lease != null) {
      body.put("lease_s", leaseSeconds(lease));
    }
    body.put("metadata", metadata());
    return new JobLease(client, client.create("/api/v1/jobs", body));
  }

  /** A lease as the head's {@code lease_s}, checked against its limits. */
  static double leaseSeconds(Duration lease) {
    if (lease.compareTo(MIN_LEASE) < 0 || lease.compareTo(MAX_LEASE) > 0) {
      throw new BerthException("lease_s", lease.toMillis() / 1000.0 + " is not from 1 to 86400 seconds", null);
    }
    return lease.toMillis() / 1000.0;
  }

  private void renew() {
    try {
      client.call("POST", "/api/v1/jobs/" + jobId + "/renew", null, Duration.ofMillis(Math.max(1000, leaseMs / 3)), false);
      if (failing) {
        failing = false;
        LOG.log(System.Logger.Level.INFO, "renewed " + jobId + "'s lease again");
      }
    } catch (Client.Conflict e) {
      if (ended.get()) {
        return; // finished by this driver while the renewal was in flight
      }
      // The head ended the job (stopped by a user, or lost): renewing cannot bring it back.
      renewals.cancel(false);
      LOG.log(System.Logger.Level.ERROR, "the head ended this driver's job " + jobId + ": " + e.getMessage()
          + "; its actors, tasks and placement groups have ended, and new ones are refused; "
          + "no longer renewing its lease");
    } catch (RuntimeException e) {
      if (ended.get()) {
        return; // interrupted by finish()
      }
      failing = true;
      LOG.log(System.Logger.Level.WARNING, "cannot renew " + jobId + "'s lease (" + leaseMs + " ms): " + e.getMessage()
          + "; retrying in " + Math.max(1, leaseMs / 6) + " ms (the head ends the job if none succeeds within the lease)");
    }
  }

  /** Run just before the job is finished (once): the session tells the head what arrived. */
  volatile Runnable beforeFinish;

  /**
   * Finishes the job (FINISHED; the head ends what it owns) and stops renewing; once only, and
   * never throws: a head that cannot be reached ends the job itself when the lease runs out.
   */
  void finish(String reason, Duration timeout) {
    if (!ended.compareAndSet(false, true)) {
      return;
    }
    Runnable before = beforeFinish;
    if (before != null) {
      before.run();
    }
    renewals.cancel(false);
    renewer.shutdownNow();
    if (Thread.currentThread() != hook) {
      try {
        Runtime.getRuntime().removeShutdownHook(hook);
      } catch (IllegalStateException e) {
        // the JVM is shutting down already: the hook runs and finds the job finished
      }
    }
    try {
      client.call("POST", "/api/v1/jobs/" + jobId + "/finish", reason == null ? null : Map.of("reason", reason),
          timeout, false);
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.WARNING, "cannot finish " + jobId + ": " + e.getMessage()
          + "; the head ends it (LOST) once its lease of " + leaseMs + " ms runs out");
    }
  }

  /** The program's main class (a jar's Main-Class), or "java" when the JVM does not say. */
  static String mainClass() {
    String command = System.getProperty("sun.java.command", "").trim();
    String first = command.isEmpty() ? "" : command.split("\\s+", 2)[0];
    if (first.endsWith(".jar")) {
      try (JarFile jar = new JarFile(first)) {
        String main = jar.getManifest() == null ? null : jar.getManifest().getMainAttributes().getValue("Main-Class");
        return main != null && !main.isBlank() ? main.trim() : Path.of(first).getFileName().toString();
      } catch (IOException e) {
        return Path.of(first).getFileName().toString();
      }
    }
    // A module's main class is given as module/class.
    first = first.substring(first.indexOf('/') + 1);
    return first.isEmpty() ? "java" : first;
  }

  /** What the job says about its driver: the SDK, host, PID and command line. */
  static Map<String, String> metadata() {
    var metadata = new LinkedHashMap<String, String>();
    metadata.put("sdk", "java");
    String host;
    try {
      host = InetAddress.getLocalHost().getHostName();
    } catch (IOException e) {
      host = System.getenv().getOrDefault("HOSTNAME", "unknown");
    }
    metadata.put("host", truncate(host, MAX_METADATA_BYTES));
    ProcessHandle self = ProcessHandle.current();
    metadata.put("pid", Long.toString(self.pid()));
    String entrypoint = self.info().commandLine().orElse(System.getProperty("sun.java.command", "java"));
    metadata.put("entrypoint", truncate(entrypoint, MAX_METADATA_BYTES));
    return metadata;
  }

  /** {@code text} cut to at most {@code maxBytes} bytes of UTF-8, never inside a character. */
  static String truncate(String text, int maxBytes) {
    if (text.getBytes(StandardCharsets.UTF_8).length <= maxBytes) {
      return text;
    }
    int bytes = 0;
    int end = 0;
    while (end < text.length()) {
      int cp = text.codePointAt(end);
      int size = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
      if (bytes + size > maxBytes) {
        break;
      }
      bytes += size;
      end += Character.charCount(cp);
    }
    return text.substring(0, end);
  }
}
