package io.berth;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;

/** A real `berth up --config` cluster on a free port for the tests, stopped at the end. */
final class LocalCluster {
  final Process process;
  final String address;
  final String token;
  /** The cluster's data directory: its token, store, agents' work and logs. */
  private final Path data;

  LocalCluster() throws IOException {
    String bin = System.getProperty("berth.bin", "berth");
    String config = System.getProperty("berth.cluster");
    data = Files.createTempDirectory("berth-java-tests");
    process = new ProcessBuilder(bin, "up", "--config", config, "--port", "0", "--data-dir", data.toString(),
        "--heartbeat-timeout", "3", "--log-level", "warn").redirectErrorStream(true).start();
    var lines = new BufferedReader(new InputStreamReader(process.getInputStream()));
    String found = null;
    var seen = new StringBuilder();
    for (String line = lines.readLine(); line != null; line = lines.readLine()) {
      seen.append(line).append('\n');
      int at = line.indexOf("listening on http://");
      if (at >= 0) {
        found = line.substring(at + "listening on http://".length()).trim().split("\\s+")[0];
        break;
      }
    }
    if (found == null) {
      process.destroyForcibly();
      throw new IOException("berth up did not start:\n" + seen);
    }
    Thread drain = new Thread(() -> {
      try {
        lines.transferTo(java.io.Writer.nullWriter());
      } catch (IOException ignored) {
        // the cluster stopped
      }
    });
    drain.setDaemon(true);
    drain.start();
    address = found;
    token = Files.readString(data.resolve("token")).trim();
  }

  /** Stops the cluster and deletes its data directory (no test run leaves one behind). */
  void close() throws InterruptedException, IOException {
    process.destroy();
    if (!process.waitFor(30, java.util.concurrent.TimeUnit.SECONDS)) {
      process.destroyForcibly();
      process.waitFor();
    }
    // Best effort: a file still held by a process that is only now exiting stays behind.
    try (var paths = Files.walk(data)) {
      for (Path path : paths.sorted(java.util.Comparator.reverseOrder()).toList()) {
        try {
          Files.deleteIfExists(path);
        } catch (IOException ignored) {
          // left for the system's temporary-file cleaning
        }
      }
    }
  }
}
