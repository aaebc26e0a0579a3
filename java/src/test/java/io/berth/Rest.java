package io.berth;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/** What the tests ask the head directly (as a user with the CLI would), and how they wait on it. */
final class Rest {
  /** Generous: JVM workers start on a shared machine. */
  static final Duration WAIT = Duration.ofSeconds(90);

  private Rest() {}

  static JsonNode get(LocalCluster cluster, String path) {
    return new Client(cluster.address, cluster.token).call("GET", path, null);
  }

  static String state(LocalCluster cluster, String path) {
    return get(cluster, path).path("state").asText();
  }

  /** {@code check}'s first answer other than null, asked every 100 ms until {@code within} has passed. */
  static <T> T eventually(String what, Duration within, Callable<T> check) throws Exception {
    Instant deadline = Instant.now().plus(within);
    Object last = null;
    while (Instant.now().isBefore(deadline)) {
      try {
        T answer = check.call();
        if (answer != null) {
          return answer;
        }
      } catch (BerthException e) {
        last = e;
      }
      Thread.sleep(100);
    }
    throw new AssertionError("no " + what + " within " + within.toSeconds() + " s (last error: " + last + ")");
  }

  /** Waits until the object at {@code path} is in {@code state}. */
  static void awaitState(LocalCluster cluster, String path, String state) throws Exception {
    String[] seen = {null};
    try {
      eventually(path + " " + state, WAIT, () -> {
        seen[0] = state(cluster, path);
        return seen[0].equals(state) ? true : null;
      });
    } catch (AssertionError e) {
      throw new AssertionError(e.getMessage() + "; it is " + seen[0] + ": " + get(cluster, path), e);
    }
  }

  /** The records logged on {@code io.berth} while it is open. */
  static final class Captured extends Handler implements AutoCloseable {
    private final List<LogRecord> records = new ArrayList<>();
    private final Logger logger = Logger.getLogger("io.berth");

    Captured() {
      logger.addHandler(this);
    }

    @Override
    public synchronized void publish(LogRecord record) {
      records.add(record);
    }

    @Override
    public void flush() {}

    @Override
    public void close() {
      logger.removeHandler(this);
    }

    /** The messages logged at {@code level} that contain {@code fragment}. */
    synchronized List<String> messages(java.util.logging.Level level, String fragment) {
      var out = new ArrayList<String>();
      for (LogRecord r : records) {
        if (r.getLevel().equals(level) && r.getMessage().contains(fragment)) {
          out.add(r.getMessage());
        }
      }
      return out;
    }
  }

  /**
   * A JVM running {@code mainClass} with this test JVM's class path (and {@code extraClasspath}
   * first), no $BERTH_* of the machine, and {@code env}; its output is collected.
   */
  static final class Jvm {
    final Process process;
    private final StringBuffer output = new StringBuffer();
    private final CompletableFuture<Void> drained;
    private final List<String> lines = new ArrayList<>();

    Jvm(String extraClasspath, String mainClass, Map<String, String> env, String... args) throws IOException {
      var command = new ArrayList<String>();
      command.add(System.getProperty("java.home") + "/bin/java");
      command.add("-cp");
      String cp = System.getProperty("java.class.path");
      command.add(extraClasspath == null ? cp : extraClasspath + java.io.File.pathSeparator + cp);
      command.add(mainClass);
      command.addAll(List.of(args));
      var builder = new ProcessBuilder(command).redirectErrorStream(true);
      builder.environment().keySet().removeIf(k -> k.startsWith("BERTH_"));
      builder.environment().putAll(env);
      process = builder.start();
      var reader = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
      drained = CompletableFuture.runAsync(() -> {
        try {
          for (String line = reader.readLine(); line != null; line = reader.readLine()) {
            output.append(line).append('\n');
            synchronized (lines) {
              lines.add(line);
              lines.notifyAll();
            }
          }
        } catch (IOException ignored) {
          // the process ended
        }
      });
    }

    /** The first line of output that starts with {@code prefix}, waiting for it up to {@link #WAIT}. */
    String line(String prefix) throws InterruptedException {
      long deadline = System.nanoTime() + WAIT.toNanos();
      synchronized (lines) {
        while (true) {
          for (String line : lines) {
            if (line.startsWith(prefix)) {
              return line;
            }
          }
          long left = deadline - System.nanoTime();
          if (left <= 0 || (drained.isDone() && !process.isAlive())) {
            throw new AssertionError("no line \"" + prefix + "…\" from the JVM; its output:\n" + output);
          }
          lines.wait(Math.max(1, Math.min(TimeUnit.NANOSECONDS.toMillis(left), 500)));
        }
      }
    }

    /** Waits for the JVM to exit; its exit code. */
    int exit() throws Exception {
      if (!process.waitFor(WAIT.toSeconds(), TimeUnit.SECONDS)) {
        process.destroyForcibly();
        throw new AssertionError("the JVM did not exit within " + WAIT.toSeconds() + " s; its output:\n" + output);
      }
      drained.get(10, TimeUnit.SECONDS);
      return process.exitValue();
    }

    String output() {
      return output.toString();
    }
  }
}
