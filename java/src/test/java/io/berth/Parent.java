package io.berth;

import java.util.Map;

/** An actor that creates an actor of its own from inside its worker. */
public class Parent {
  /** Nothing to set up. */
  public Parent() {}

  /**
   * Connects from inside this worker with no token (the head's address is the agent's
   * $BERTH_ADDRESS; the work's credential is built from $BERTH_WORK_KEY), makes a Counter and
   * calls it: the child's ID, the job this worker says it is in, the answer, and what the head
   * answered this credential for the nodes (403: beyond its job).
   */
  public Map<String, Object> spawn() {
    Berth.init();
    String nodes;
    try {
      new Client(null, null, null).call("GET", "/api/v1/nodes", null);
      nodes = "200";
    } catch (BerthException e) {
      nodes = e.getMessage();
    }
    ActorHandle<Counter> child = Berth.actor(Counter::new, 7).remote();
    int value = child.task(Counter::getValue).remote().get(60_000);
    return Map.of("child", child.getId(), "job", String.valueOf(Berth.jobId()), "value", value, "nodes", nodes);
  }
}
