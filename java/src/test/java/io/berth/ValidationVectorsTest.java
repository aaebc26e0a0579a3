package io.berth;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Consumer;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The shared validation vectors (crates/berth-core/tests/vectors/validation.json), checked
 * against the SDK's client-side rules: each input gets the verdict the Rust code (the head's)
 * gives it, so the two cannot drift. No cluster: the checks run in the driver.
 *
 * <p>The file is the system property {@code berth.vectors} (the POM sets it), else found from
 * the working directory (java/ under Surefire). A vector marked {@code "sdk": "server"} is one
 * the SDK leaves to the head: its check must accept it. One whose {@code inexpressible} lists
 * {@code java} cannot be written with the SDK's API (an EXISTS expression with values).
 */
class ValidationVectorsTest {
  private static final Map<String, Consumer<JsonNode>> CHECKS = new LinkedHashMap<>();

  static {
    CHECKS.put("label_key", v -> Labels.checkKey("labels.k", v.get("input").asText()));
    CHECKS.put("label_value", v -> Labels.checkValue("labels.k", "k", v.get("input").asText()));
    CHECKS.put("actor_label", v -> {
      JsonNode in = v.get("input");
      Labels.checkActorLabels("labels", Map.of(in.get("key").asText(), in.get("value").asText()));
    });
    CHECKS.put("expression", v -> Labels.checkSelector("label_selector", Map.of("k", v.get("input").asText())));
    CHECKS.put("selector", v -> {
      var selector = strings(v.get("input"));
      Labels.checkSelector("label_selector", selector);
      Labels.checkSelector("tolerations", selector);
    });
    CHECKS.put("affinity", v -> {
      JsonNode in = v.get("input");
      String key = in.get("key").asText();
      List<String> values = new ArrayList<>();
      in.get("values").forEach(value -> values.add(value.asText()));
      switch (in.get("operator").asText()) {
        case "IN":
          ActorAffinityMatchExpression.in(key, values, false);
          break;
        case "NOT_IN":
          ActorAffinityMatchExpression.notIn(key, values, false);
          break;
        case "EXISTS":
          assertTrue(values.isEmpty(), "EXISTS with values is not expressible in Java");
          ActorAffinityMatchExpression.exists(key, false);
          break;
        case "DOES_NOT_EXIST":
          assertTrue(values.isEmpty(), "DOES_NOT_EXIST with values is not expressible in Java");
          ActorAffinityMatchExpression.doesNotExist(key, false);
          break;
        default:
          fail("unknown operator " + in.get("operator"));
      }
    });
    CHECKS.put("resource_name", v -> WorkOptions.resourceName("resources.x", v.get("input").asText()));
    CHECKS.put("amount", v -> amount(v.has("resource") ? v.get("resource").asText() : "CPU", v.get("input"), false));
    CHECKS.put("gpu", v -> {
      JsonNode in = v.get("input");
      amount(in.get("resource").asText(), in.get("amount"), in.get("in").asText().equals("bundle"));
    });
  }

  /** A JSON number as a Java caller gives it (a double), a string as text ("16Gi"). */
  private static void amount(String resource, JsonNode amount, boolean bundle) {
    if (amount.isNumber()) {
      WorkOptions.amount(resource, amount.doubleValue(), bundle);
    } else {
      WorkOptions.amount(resource, amount.asText(), bundle);
    }
  }

  private static Map<String, String> strings(JsonNode object) {
    var out = new LinkedHashMap<String, String>();
    object.fields().forEachRemaining(e -> out.put(e.getKey(), e.getValue().asText()));
    return out;
  }

  private static JsonNode vectors() throws IOException {
    String property = System.getProperty("berth.vectors");
    Path path = property != null
        ? Path.of(property)
        : Path.of("").toAbsolutePath().resolveSibling("crates/berth-core/tests/vectors/validation.json");
    assertTrue(Files.exists(path), "no vectors file at " + path + "; set -Dberth.vectors=PATH");
    return new ObjectMapper().readTree(path.toFile());
  }

  @Test
  void everyGroupHasACheck() throws IOException {
    Set<String> groups = new TreeSet<>();
    vectors().fieldNames().forEachRemaining(groups::add);
    groups.remove("about");
    assertEquals(new TreeSet<>(CHECKS.keySet()), groups, "a group of the vectors file has no check here, or a check no group");
  }

  @TestFactory
  Stream<DynamicTest> everyVectorGetsItsVerdict() throws IOException {
    JsonNode file = vectors();
    List<DynamicTest> tests = new ArrayList<>();
    CHECKS.forEach((group, check) -> {
      JsonNode vectors = file.get(group);
      for (int i = 0; i < vectors.size(); i++) {
        JsonNode vector = vectors.get(i);
        String name = group + "[" + i + "] " + vector.get("input");
        tests.add(DynamicTest.dynamicTest(name, () -> verdict(name, vector, check)));
      }
    });
    return tests.stream();
  }

  private static void verdict(String name, JsonNode vector, Consumer<JsonNode> check) {
    boolean valid = vector.get("valid").asBoolean();
    for (JsonNode sdk : vector.path("inexpressible")) {
      if (sdk.asText().equals("java")) {
        assertFalse(valid, name + ": only a refused input may be inexpressible");
        return;
      }
    }
    boolean expectError = !valid && !vector.path("sdk").asText().equals("server");
    try {
      check.accept(vector);
    } catch (BerthException e) {
      assertTrue(expectError, name + ": expected accepted, refused: " + e.getMessage());
      String fragment = vector.get("error").asText();
      assertTrue(e.getMessage().contains(fragment), name + ": expected \"" + fragment + "\" in the error: " + e.getMessage());
      return;
    }
    assertFalse(expectError, name + ": expected \"" + vector.path("error").asText() + "\", accepted");
  }
}
