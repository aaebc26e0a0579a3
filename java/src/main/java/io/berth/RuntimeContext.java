package io.berth;

import com.fasterxml.jackson.core.type.TypeReference;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * This process in Berth, as Ray's runtime context says it: its job and namespace, and inside a
 * worker its actor or task, attempt, node, and what was reserved for it. Read from the
 * environment its agent gave it (and the session, in a driver): nothing connects.
 */
public final class RuntimeContext {
  RuntimeContext() {}

  private static String env(String name) {
    String value = System.getenv(name);
    return value == null || value.isEmpty() ? null : value;
  }

  /** The job this process's work belongs to: a driver's own once connected, a worker's work's. */
  public String getCurrentJobId() {
    String job = Berth.jobId();
    return job != null ? job : env("BERTH_JOB_ID");
  }

  /** Inside an actor's process, its ID ({@code actor-5}); else null. */
  public String getCurrentActorId() {
    return env("BERTH_ACTOR_ID");
  }

  /** Inside a task's process, its ID ({@code task-9}); else null. */
  public String getCurrentTaskId() {
    return env("BERTH_TASK_ID");
  }

  /** Inside a worker, the ID of the node it runs on; null in a driver. */
  public String getCurrentNodeId() {
    return env("BERTH_NODE_ID");
  }

  /** The namespace of the actors this process creates and looks up. */
  public String getNamespace() {
    String namespace = env("BERTH_NAMESPACE");
    return namespace != null ? namespace : "default";
  }

  /** Inside a worker, its attempt (1, then one more per restart or retry); 0 in a driver. */
  public int getAttempt() {
    String attempt = env("BERTH_ATTEMPT");
    return attempt == null ? 0 : Integer.parseInt(attempt);
  }

  /** True in an actor's process that is a restart (attempt 2 or later). */
  public boolean wasCurrentActorRestarted() {
    return getCurrentActorId() != null && getAttempt() > 1;
  }

  /** Inside a worker, what was reserved for its work, by resource ({@code CPU -> 0.5}). */
  public Map<String, Double> getAssignedResources() {
    Map<String, Double> out = new LinkedHashMap<>();
    for (var entry : parse("BERTH_RESOURCES", new TypeReference<Map<String, String>>() {}).entrySet()) {
      out.put(entry.getKey(), amount(entry.getValue()));
    }
    return out;
  }

  /** Inside a worker, the instance IDs reserved for its work, by resource ({@code GPU -> [0]}). */
  public Map<String, List<Long>> getResourceIds() {
    return parse("BERTH_INSTANCES", new TypeReference<Map<String, List<Long>>>() {});
  }

  private static <T> Map<String, T> parse(String variable, TypeReference<Map<String, T>> type) {
    String text = env(variable);
    if (text == null) {
      return Map.of();
    }
    try {
      return Frames.JSON.readValue(text, type);
    } catch (java.io.IOException e) {
      throw new BerthException(null, "$" + variable + " is not what the agent writes: " + e.getMessage(), e);
    }
  }

  /** A quantity of the head's ({@code 0.5}, {@code 4Gi}, {@code 512M}) as a number (bytes for memory). */
  static double amount(String text) {
    String[][] suffixes = {{"Ki", "1024"}, {"Mi", "1048576"}, {"Gi", "1073741824"}, {"Ti", "1099511627776"},
        {"K", "1e3"}, {"k", "1e3"}, {"M", "1e6"}, {"G", "1e9"}, {"T", "1e12"}};
    for (String[] suffix : suffixes) {
      if (text.endsWith(suffix[0])) {
        return Double.parseDouble(text.substring(0, text.length() - suffix[0].length()))
            * Double.parseDouble(suffix[1]);
      }
    }
    return Double.parseDouble(text);
  }

  @Override
  public String toString() {
    return "RuntimeContext(job=" + getCurrentJobId() + ", namespace=" + getNamespace() + ", actor="
        + getCurrentActorId() + ", task=" + getCurrentTaskId() + ", node=" + getCurrentNodeId() + ", attempt="
        + getAttempt() + ")";
  }
}
