package io.berth;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A head serving TLS ({@code berth start --head --tls-cert --tls-key}) reached from Java with a
 * CA file: a task and an actor run on a real agent that joined over TLS (its JVM workers reach
 * the head with the CA the agent gives them as $BERTH_CA), and a head that cannot prove its
 * identity (no CA given, another CA) is refused. The certificates are made for each run with
 * the {@code openssl} CLI.
 */
class TlsTest {
  /** Generous: the first JVM worker starts on a shared machine. */
  private static final Duration WAIT = Duration.ofSeconds(120);

  private static final String OPENSSL_CONFIG = String.join("\n",
      "[req]",
      "distinguished_name = dn",
      "prompt = no",
      "[dn]",
      "CN = berth-test",
      "[ca]",
      "basicConstraints = critical, CA:TRUE",
      "keyUsage = critical, keyCertSign, cRLSign",
      "subjectKeyIdentifier = hash",
      "[head]",
      "basicConstraints = critical, CA:FALSE",
      "keyUsage = critical, digitalSignature",
      "extendedKeyUsage = serverAuth",
      "subjectAltName = DNS:localhost, IP:127.0.0.1",
      "subjectKeyIdentifier = hash",
      "authorityKeyIdentifier = keyid",
      "");

  @TempDir
  static Path dir;

  /** The head and the agent, in the order they started, with their log files. */
  private static final Map<Process, Path> processes = new LinkedHashMap<>();
  private static String url;
  private static String token;
  private static Path ca;
  private static Path otherCa;

  @BeforeAll
  static void start() throws Exception {
    Files.writeString(dir.resolve("openssl.cnf"), OPENSSL_CONFIG);
    ca = makeCa("ca");
    otherCa = makeCa("other-ca");
    openssl("req", "-new", "-config", "openssl.cnf", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-subj", "/CN=localhost", "-keyout", "head.key", "-out", "head.csr");
    openssl("x509", "-req", "-in", "head.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "2", "-days", "2",
        "-extfile", "openssl.cnf", "-extensions", "head", "-out", "head.pem");

    Path headDir = Files.createDirectory(dir.resolve("head"));
    spawn("head", Map.of(), "start", "--head", "--port", "0", "--data-dir", headDir.toString(),
        "--tls-cert", dir.resolve("head.pem").toString(), "--tls-key", dir.resolve("head.key").toString());
    url = poll("an https:// address in head-address", () -> {
      String text = Files.readString(headDir.resolve("head-address")).trim();
      return text.startsWith("https://") ? text : null;
    });
    token = Files.readString(headDir.resolve("token")).trim();
    // The agent token by environment, not argument: it stays out of the process list. The CA
    // as the CLI's help shows it, relative to where the agent starts: its workers, each in its
    // own directory, must still find it.
    String agentToken = Files.readString(headDir.resolve("agent-token")).trim();
    spawn("agent", Map.of("BERTH_AGENT_TOKEN", agentToken), "start", "--address", url, "--ca", "ca.pem",
        "--node-id", "tls-node", "--num-cpus", "2", "--data-dir", Files.createDirectory(dir.resolve("agent")).toString(),
        "--stop-work-on-exit");
    Client client = new Client(url, token, ca.toString());
    poll("tls-node ALIVE (the agent joined over TLS)", () -> {
      for (JsonNode node : client.call("GET", "/api/v1/nodes", null).path("items")) {
        if (node.path("node_id").asText().equals("tls-node") && node.path("state").asText().equals("ALIVE")) {
          return true;
        }
      }
      return null;
    });
  }

  /** Stops the agent (and the work it started), then the head. */
  @AfterAll
  static void stop() throws Exception {
    var started = new ArrayList<>(processes.keySet());
    for (int i = started.size() - 1; i >= 0; i--) {
      Process process = started.get(i);
      process.destroy();
      if (!process.waitFor(30, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        process.waitFor();
      }
    }
  }

  @AfterEach
  void disconnect() {
    Berth.shutdown();
  }

  @Test
  void aTaskAndAnActorRunOverTls() {
    Berth.init(url, token, ca.toString());
    assertEquals(49, Berth.task(Tasks::square, 7).remote().get(WAIT.toMillis()));
    assertEquals("tls-node", Berth.task(Tasks::node).remote().get(WAIT.toMillis()));
    // An actor's worker registers its endpoint with the head itself: over TLS, with $BERTH_CA.
    ActorHandle<Counter> counter = Berth.actor(Counter::new, 40).remote();
    assertEquals(42, counter.task(Counter::increase, 2).remote().get(WAIT.toMillis()));
    assertEquals("tls-node", counter.task(Counter::node).remote().get(WAIT.toMillis()));
  }

  @Test
  void anHttpsHeadWithoutACaIsRefusedNamingCa() {
    assumeTrue(System.getenv("BERTH_CA") == null, "$BERTH_CA is set: it would be the CA");
    var refused = assertThrows(BerthException.class, () -> Berth.init(url, token));
    assertEquals("ca", refused.field());
    assertTrue(refused.getMessage().contains(url) && refused.getMessage().contains("$BERTH_CA"), refused.getMessage());
  }

  @Test
  void aHeadWhoseCertificateAnotherCaSignedIsRefused() {
    var refused = assertThrows(BerthException.class, () -> Berth.init(url, token, otherCa.toString()));
    assertEquals("ca", refused.field());
    String message = refused.getMessage();
    assertTrue(message.contains("could not be verified") && message.contains(url)
        && message.contains(otherCa.toString()), message);
  }

  @Test
  void aCaFileThatCannotBeReadIsRefusedNamingIt() {
    Path missing = dir.resolve("missing.pem");
    var refused = assertThrows(BerthException.class, () -> Berth.init(url, token, missing.toString()));
    assertEquals("ca", refused.field());
    assertTrue(refused.getMessage().contains(missing.toString()), refused.getMessage());
  }

  /** A throwaway CA (P-256): NAME.pem and its key NAME.key in {@link #dir}; the certificate. */
  private static Path makeCa(String name) throws Exception {
    openssl("req", "-x509", "-config", "openssl.cnf", "-extensions", "ca", "-newkey", "ec", "-pkeyopt",
        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=" + name, "-keyout", name + ".key",
        "-out", name + ".pem");
    return dir.resolve(name + ".pem");
  }

  private static void openssl(String... args) throws Exception {
    var command = new ArrayList<>(List.of("openssl"));
    command.addAll(List.of(args));
    Process process = new ProcessBuilder(command).directory(dir.toFile()).redirectErrorStream(true).start();
    String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(0, process.waitFor(), String.join(" ", command) + ":\n" + output);
  }

  /**
   * Starts {@code berth ARGS} in {@link #dir}, with its output in NAME.log there; stopped by
   * {@link #stop}.
   */
  private static void spawn(String name, Map<String, String> env, String... args) throws IOException {
    var command = new ArrayList<>(List.of(System.getProperty("berth.bin", "berth")));
    command.addAll(List.of(args));
    command.addAll(List.of("--log-level", "warn"));
    Path log = dir.resolve(name + ".log");
    var builder = new ProcessBuilder(command).directory(dir.toFile()).redirectErrorStream(true)
        .redirectOutput(log.toFile());
    // Only what the test gives: no $BERTH_ADDRESS, $BERTH_CA or token of the machine's own head.
    builder.environment().keySet().removeIf(k -> k.startsWith("BERTH_"));
    builder.environment().putAll(env);
    processes.put(builder.start(), log);
  }

  /**
   * {@code check}'s first answer other than null, asked until {@link #WAIT} has passed; fails
   * at once, with its log, if a process it waits on exits.
   */
  private static <T> T poll(String what, Callable<T> check) throws Exception {
    Instant deadline = Instant.now().plus(WAIT);
    Exception last = null;
    while (Instant.now().isBefore(deadline)) {
      for (var entry : processes.entrySet()) {
        if (!entry.getKey().isAlive()) {
          fail("waiting for " + what + ": " + entry.getValue().getFileName() + "'s process exited with "
              + entry.getKey().exitValue() + ":\n" + Files.readString(entry.getValue()));
        }
      }
      try {
        T answer = check.call();
        if (answer != null) {
          return answer;
        }
      } catch (IOException | BerthException e) {
        last = e;
      }
      Thread.sleep(50);
    }
    throw new AssertionError("no " + what + " within " + WAIT.toSeconds() + " s (last error: " + last + ")");
  }
}
