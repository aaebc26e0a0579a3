package io.berth;

import java.time.Duration;
import java.util.List;
import java.util.Map;

/**
 * A driver program the tests run in a JVM of its own and then kill: {@code JobDriver ADDRESS
 * TOKEN LEASE_S} makes an actor and a placement group of each lifetime, says their IDs on one
 * line once the actors answer, and then waits to be killed; {@code JobDriver ADDRESS TOKEN
 * LEASE_S PATH} runs one task that writes PATH and then works for a second, says its job, and
 * waits to be killed.
 */
public final class JobDriver {
  private JobDriver() {}

  /** Runs until killed. */
  public static void main(String[] args) throws Exception {
    Berth.init(args[0], args[1], null, Duration.ofMillis((long) (Double.parseDouble(args[2]) * 1000)));
    if (args.length > 3) {
      // A task that writes the file args[3] and then works for a second, with retries.
      Berth.task(Tasks::touchThenSleep, args[3], 1000).setMaxRetries(3).remote();
      System.out.println("READY job=" + Berth.jobId());
      System.out.flush();
      Thread.sleep(Long.MAX_VALUE);
    }
    ActorHandle<Counter> owned = Berth.actor(Counter::new, 1).remote();
    ActorHandle<Counter> detached = Berth.actor(Counter::new, 2).setLifetime(Lifetime.DETACHED).remote();
    PlacementGroup group = Berth.placementGroup(List.of(Map.of("CPU", 0.5))).create();
    PlacementGroup detachedGroup = Berth.placementGroup(List.of(Map.of("CPU", 0.5)))
        .setLifetime(Lifetime.DETACHED).create();
    owned.task(Counter::getValue).remote().get(60_000);
    detached.task(Counter::getValue).remote().get(60_000);
    group.wait(60);
    detachedGroup.wait(60);
    System.out.println("READY job=" + Berth.jobId() + " actor=" + owned.getId() + " detached=" + detached.getId()
        + " group=" + group.getId() + " detachedGroup=" + detachedGroup.getId());
    System.out.flush();
    Thread.sleep(Long.MAX_VALUE);
  }
}
