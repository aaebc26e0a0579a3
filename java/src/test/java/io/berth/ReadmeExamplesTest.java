package io.berth;

import static io.berth.Rest.awaitState;
import static io.berth.Rest.eventually;
import static io.berth.Rest.get;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Java examples of the READMEs, taken from the files, compiled and run as programs of their
 * own against a real cluster: each exits 0 and leaves nothing running (its job FINISHED, its
 * actors DEAD and their processes gone, its tasks ended, its groups removed).
 */
class ReadmeExamplesTest extends ClusterTest {
  /** The repository's root (Surefire runs in java/). */
  private static final Path REPO = Path.of("").toAbsolutePath().getParent();

  @TempDir
  Path dir;

  @Test
  void theJavaReadmesFirstProgramLeavesNothingRunning() throws Exception {
    run(javaBlock(REPO.resolve("java/README.md"), "## A first program"));
  }

  @Test
  void theReadmesJavaTeaserLeavesNothingRunning() throws Exception {
    // A fragment: put in a program with the Counter of java/README.md.
    String teaser = javaBlock(REPO.resolve("README.md"), "The [Java SDK](java/README.md)");
    run(String.join("\n", "import io.berth.*;", "import java.util.List;", "", "public class Main {",
        "  public static class Counter {",
        "    private int value;",
        "    public Counter(int start) { value = start; }",
        "    public int increase(int by) { value += by; return value; }",
        "  }",
        "",
        "  public static void main(String[] args) {",
        teaser,
        "  }",
        "}", ""));
  }

  /** The first ```java block after {@code marker} in {@code file}. */
  private static String javaBlock(Path file, String marker) throws Exception {
    String text = Files.readString(file);
    int at = text.indexOf(marker);
    assertTrue(at >= 0, "no \"" + marker + "\" in " + file);
    int start = text.indexOf("```java\n", at);
    assertTrue(start >= 0, "no java block after \"" + marker + "\" in " + file);
    start += "```java\n".length();
    return text.substring(start, text.indexOf("\n```", start));
  }

  /** Compiles {@code source} (class Main), runs it, and checks what it leaves. */
  private void run(String source) throws Exception {
    Path src = Files.createDirectories(dir.resolve("src"));
    Path classes = Files.createDirectories(dir.resolve("classes"));
    Files.writeString(src.resolve("Main.java"), source);
    var errors = new ByteArrayOutputStream();
    int compiled = ToolProvider.getSystemJavaCompiler().run(null, errors, errors, "-d", classes.toString(), "-cp",
        System.getProperty("java.class.path"), src.resolve("Main.java").toString());
    assertEquals(0, compiled, errors.toString(StandardCharsets.UTF_8) + "\n" + source);

    var program = new Rest.Jvm(classes.toString(), "Main",
        Map.of("BERTH_ADDRESS", cluster.address, "BERTH_TOKEN", cluster.token));
    assertEquals(0, program.exit(), program.output());

    String pid = Long.toString(program.process.pid());
    JsonNode job = null;
    for (JsonNode candidate : get(cluster, "/api/v1/jobs").path("items")) {
      if (candidate.path("spec").path("metadata").path("pid").asText().equals(pid)) {
        job = candidate;
      }
    }
    assertNotNull(job, "no job with the program's PID " + pid);
    String id = job.path("job_id").asText();
    assertEquals("Main", job.path("spec").path("name").asText());
    awaitState(cluster, "/api/v1/jobs/" + id, "FINISHED");

    JsonNode actors = get(cluster, "/api/v1/actors?job=" + id).path("items");
    assertFalse(actors.isEmpty());
    List<Long> pids = new ArrayList<>();
    for (JsonNode actor : actors) {
      awaitState(cluster, "/api/v1/actors/" + actor.path("actor_id").asText(), "DEAD");
      for (JsonNode event : actor.path("history")) {
        String message = event.path("message").asText();
        if (event.path("kind").asText().equals("started") && message.startsWith("pid ")) {
          pids.add(Long.parseLong(message.substring(4)));
        }
      }
    }
    assertFalse(pids.isEmpty(), "the actors' processes: " + actors);
    for (long worker : pids) {
      eventually("process " + worker + " gone", Rest.WAIT,
          () -> ProcessHandle.of(worker).map(ProcessHandle::isAlive).orElse(false) ? null : true);
    }
    for (JsonNode task : get(cluster, "/api/v1/tasks?job=" + id).path("items")) {
      String state = get(cluster, "/api/v1/tasks/" + task.path("task_id").asText()).path("state").asText();
      assertTrue(Set.of("FINISHED", "FAILED", "CANCELLED").contains(state), task.toString());
    }
    for (JsonNode group : get(cluster, "/api/v1/placement_groups?job=" + id).path("items")) {
      awaitState(cluster, "/api/v1/placement_groups/" + group.path("group_id").asText(), "REMOVED");
    }
  }
}
