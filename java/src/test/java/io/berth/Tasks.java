package io.berth;

/** Static methods the tests run as tasks. */
public final class Tasks {
  private Tasks() {}

  /** x squared. */
  public static int square(int x) {
    return x * x;
  }

  /** The node the task ran on. */
  public static String node() {
    return System.getenv("BERTH_NODE_ID");
  }

  /** Appends a line to the file at {@code path} (a side effect a test can count); the path. */
  public static String touch(String path) throws java.io.IOException {
    java.nio.file.Files.writeString(java.nio.file.Path.of(path), "ran\n",
        java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND);
    return path;
  }

  /** Writes the file at {@code path}, then sleeps {@code ms}: a task a test sees start. */
  public static int touchThenSleep(String path, int ms) throws Exception {
    java.nio.file.Files.writeString(java.nio.file.Path.of(path), "started\n");
    Thread.sleep(ms);
    return ms;
  }

  /** What the runtime context says inside this task. */
  public static java.util.Map<String, Object> context() {
    RuntimeContext c = Berth.getRuntimeContext();
    return java.util.Map.of("job", String.valueOf(c.getCurrentJobId()), "task", String.valueOf(c.getCurrentTaskId()),
        "node", String.valueOf(c.getCurrentNodeId()), "attempt", c.getAttempt(),
        "resources", c.getAssignedResources(), "ids", c.getResourceIds(), "namespace", c.getNamespace());
  }

  /** Adds two values it gets from the processes that hold them. */
  public static int total(ObjectRef<Integer> a, ObjectRef<Integer> b) {
    return a.get(60_000) + b.get(60_000);
  }

  /** Always throws. */
  public static String fail(String why) {
    throw new IllegalArgumentException(why);
  }
}
