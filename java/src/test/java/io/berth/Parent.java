package io.berth;

import java.util.Map;

/** An actor that creates an actor of its own from inside its worker. */
public class Parent {
  /** Nothing to set up. */
  public Parent() {}

  /**
   * Connects from inside this worker (the head's address is the agent's $BERTH_ADDRESS), makes
   * a Counter and calls it: the child's ID, the job this worker says it is in, and the answer.
   */
  public Map<String, Object> spawn(String token) {
    Berth.init(null, token);
    ActorHandle<Counter> child = Berth.actor(Counter::new, 7).remote();
    int value = child.task(Counter::getValue).remote().get(60_000);
    return Map.of("child", child.getId(), "job", String.valueOf(Berth.jobId()), "value", value);
  }
}
