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

  /** Always throws. */
  public static String fail(String why) {
    throw new IllegalArgumentException(why);
  }
}
