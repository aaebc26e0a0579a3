package io.berth;

/** The seeds' Counter: an actor's state across calls. */
public class Counter {
  private int value;

  /** Starts at {@code initValue}. */
  public Counter(int initValue) {
    this.value = initValue;
  }

  /** The value. */
  public int getValue() {
    return value;
  }

  /** Adds {@code delta}; the new value. */
  public int increase(int delta) {
    value += delta;
    return value;
  }

  /** The node it runs on. */
  public String node() {
    return System.getenv("BERTH_NODE_ID");
  }

  /** This worker's process ID. */
  public long pid() {
    return ProcessHandle.current().pid();
  }

  /** Sleeps, then answers. */
  public int sleep(int millis) throws InterruptedException {
    Thread.sleep(millis);
    return millis;
  }

  /** Always throws. */
  public int fail() {
    throw new IllegalStateException("no such state");
  }
}
