package io.berth;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The Java examples of Ray's actor-affinity design (actor labels, affinity and anti-affinity),
 * as written there with {@code Ray} read as {@code Berth}, on a real cluster
 * (examples/local/sdk-tests.yaml: CPU nodes cpu-a and cpu-b, tainted GPU nodes); each checks
 * where the actor went.
 */
class RayExamplesTest extends ClusterTest {

  private static String node(ActorHandle<Counter> actor) {
    return actor.task(Counter::node).remote().get(60_000);
  }

  @Test
  void labelsAndAffinityIn() {
    // Set a key-value label.
    ActorHandle<Counter> actor = Berth.actor(Counter::new, 1).setLabel("location", "dc_1").remote();
    // Set batch key-value labels.
    Map<String, String> labels = new HashMap<String, String>() {
      {
        put("location", "dc-1");
        put("version", "1.0.0");
      }
    };
    ActorHandle<Counter> batch = Berth.actor(Counter::new, 1).setLabels(labels).remote();

    List<String> locationValues = new ArrayList<>();
    locationValues.add("dc_1");
    locationValues.add("dc_2");
    ActorAffinitySchedulingStrategy schedulingStrategy = new ActorAffinitySchedulingStrategy.Builder()
        .addExpression(ActorAffinityMatchExpression.in("location", locationValues, false))
        .build();
    ActorHandle<Counter> actor2 = Berth.actor(Counter::new, 1).setSchedulingStrategy(schedulingStrategy).remote();
    assertEquals(node(actor), node(actor2));
    assertTrue(Set.of("cpu-a", "cpu-b").contains(node(batch)));
  }

  @Test
  void antiAffinityNotIn() {
    ActorHandle<Counter> located = Berth.actor(Counter::new, 1).setLabel("location", "dc-1").remote();
    List<String> values = new ArrayList<>();
    values.add("dc-1");
    ActorAffinitySchedulingStrategy schedulingStrategyNotIn = new ActorAffinitySchedulingStrategy.Builder()
        .addExpression(ActorAffinityMatchExpression.notIn("location", values, false))
        .build();
    ActorHandle<Counter> actor3 = Berth.actor(Counter::new, 1).setSchedulingStrategy(schedulingStrategyNotIn).remote();
    assertNotEquals(node(located), node(actor3));
  }

  @Test
  void affinityExistsAndTheSeedsAssertion() {
    ActorHandle<Counter> versioned = Berth.actor(Counter::new, 1).setLabel("version", "1.0.0").remote();
    ActorAffinitySchedulingStrategy schedulingStrategyExists = new ActorAffinitySchedulingStrategy.Builder()
        .addExpression(ActorAffinityMatchExpression.exists("version", false))
        .build();
    ActorHandle<Counter> actor4 = Berth.actor(Counter::new, 1).setSchedulingStrategy(schedulingStrategyExists).remote();
    assertEquals(actor4.task(Counter::getValue).remote().get(10000), Integer.valueOf(1));
    assertEquals(node(versioned), node(actor4));
  }

  @Test
  void antiAffinityDoesNotExistAndSeveralExpressions() {
    ActorHandle<Counter> versioned = Berth.actor(Counter::new, 1).setLabel("version", "1.0.0").remote();
    ActorAffinitySchedulingStrategy schedulingStrategyDoesNotExist = new ActorAffinitySchedulingStrategy.Builder()
        .addExpression(ActorAffinityMatchExpression.doesNotExist("version", false))
        .build();
    ActorHandle<Counter> actor5 =
        Berth.actor(Counter::new, 1).setSchedulingStrategy(schedulingStrategyDoesNotExist).remote();
    assertNotEquals(node(versioned), node(actor5));

    ActorHandle<Counter> located = Berth.actor(Counter::new, 1).setLabel("location", "dc_1")
        .setSchedulingStrategy(schedulingStrategyDoesNotExist).remote();
    ActorAffinitySchedulingStrategy schedulingStrategy = new ActorAffinitySchedulingStrategy.Builder()
        .addExpression(ActorAffinityMatchExpression.doesNotExist("version", false))
        .addExpression(ActorAffinityMatchExpression.exists("location", false))
        .build();
    ActorHandle<Counter> actor6 = Berth.actor(Counter::new, 1).setSchedulingStrategy(schedulingStrategy).remote();
    assertEquals(node(located), node(actor6));
  }

  @Test
  void stateOrderErrorsAndKill() {
    ActorHandle<Counter> counter = Berth.actor(Counter::new, 10).remote();
    List<ObjectRef<Integer>> refs = new ArrayList<>();
    for (int i = 0; i < 100; i++) {
      refs.add(counter.task(Counter::increase, 1).remote());
    }
    for (int i = 0; i < 100; i++) {
      assertEquals(11 + i, refs.get(i).get(60_000));
    }
    var error = assertThrows(BerthException.TaskException.class, () -> counter.task(Counter::fail).remote().get(60_000));
    assertEquals("java.lang.IllegalStateException", error.remoteType());
    assertTrue(error.remoteTrace().contains("Counter.fail"), error.remoteTrace());
    assertEquals(110, counter.task(Counter::getValue).remote().get(60_000));
    Berth.kill(counter);
    assertThrows(BerthException.ActorDiedException.class, () -> counter.task(Counter::getValue).remote().get(60_000));
  }

  @Test
  void tolerationsReachTheGpuNodes() {
    ActorHandle<Counter> gpu = Berth.actor(Counter::new, 0).setResource("GPU", 1)
        .setTolerations(Map.of("gpu_node", "exists()")).remote();
    assertTrue(node(gpu).startsWith("gpu-"));
    ActorHandle<Counter> spot = Berth.actor(Counter::new, 0)
        .setLabelSelector(Map.of("berth.io/market-type", "spot")).remote();
    assertEquals("cpu-a", node(spot));
  }

  @Test
  void badInputIsRefusedBeforeAnythingIsSent() {
    var error = assertThrows(BerthException.class, () -> Berth.actor(Counter::new, 1).setLabel("-x", "1"));
    assertEquals("labels.-x", error.field());
    assertThrows(BerthException.class,
        () -> ActorAffinityMatchExpression.in("location", new ArrayList<>(), false));
    assertThrows(BerthException.class, () -> Berth.actor(Counter::new, 1).setMaxRestarts(-2));
    var selector = assertThrows(BerthException.class,
        () -> Berth.actor(Counter::new, 1).setLabelSelector(Map.of("zone", "in(a,")));
    assertEquals("label_selector.zone", selector.field());
    assertTrue(selector.getMessage().contains("a '(' is not closed with ')'"), selector.getMessage());
    var operator = assertThrows(BerthException.class,
        () -> Berth.task(Tasks::node).setTolerations(Map.of("gpu_node", "near(a)")));
    assertTrue(operator.getMessage().contains("unknown operator \"near\""), operator.getMessage());
    for (String ok : List.of("a", "!a", "in(a, b)", "!IN(a)", "exists()", "!exists()", "exists(),!in(a,b)", "")) {
      Berth.task(Tasks::node).setLabelSelector(Map.of("k", ok));
    }
    // What only the head can check (the cluster's state) comes back with its field and rule too.
    Berth.actor(Counter::new, 1).setName("taken").remote();
    var refused = assertThrows(BerthException.class, () -> Berth.actor(Counter::new, 1).setName("taken").remote());
    assertTrue(refused.getMessage().contains("is alive in namespace"), refused.getMessage());
  }
}
