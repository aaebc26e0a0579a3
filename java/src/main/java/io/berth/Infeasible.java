package io.berth;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * Tells a caller that waits on an actor, a task or a placement group the head cannot place
 * ({@code diagnosis.infeasible}: no node could ever take it) why, instead of a silent hang: one
 * WARNING on the {@code io.berth} logger per waiting call, from one check after 5 s of waiting
 * and then at most one every 30 s. The caller keeps waiting (a node that fits may still join).
 */
final class Infeasible {
  private static final System.Logger LOG = System.getLogger("io.berth");
  static final long FIRST_CHECK_NANOS = TimeUnit.SECONDS.toNanos(5);
  static final long NEXT_CHECK_NANOS = TimeUnit.SECONDS.toNanos(30);

  private final Client client;
  /** The object's REST path: {@code /api/v1/tasks/task-9}. */
  private final String path;
  private final String id;

  /** Checks of {@code /api/v1/KIND/ID} (KIND: actors, tasks, placement_groups). */
  Infeasible(Client client, String kind, String id) {
    this.client = client;
    this.path = "/api/v1/" + kind + "/" + id;
    this.id = id;
  }

  /** The checks of one waiting call, whose wait starts now. */
  Watch watch() {
    return new Watch(System.nanoTime());
  }

  /** One waiting call's checks: the caller blocks at most {@link #untilCheck()}, then {@link #checkIfDue()}. */
  final class Watch {
    private final long start;
    /** When the next check is due, in nanoseconds since {@link #start}. */
    private long next = FIRST_CHECK_NANOS;
    private boolean warned;

    private Watch(long start) {
      this.start = start;
    }

    /** How long the caller may block before the next check is due, in nanoseconds (none left: Long.MAX_VALUE). */
    long untilCheck() {
      return warned ? Long.MAX_VALUE : Math.max(0, next - (System.nanoTime() - start));
    }

    /** Asks the head, when a check is due, and warns once if it says infeasible. */
    void checkIfDue() {
      long waited = System.nanoTime() - start;
      if (warned || waited < next) {
        return;
      }
      next = waited + NEXT_CHECK_NANOS;
      JsonNode object;
      try {
        object = client.call("GET", path, null, Duration.ofSeconds(10), false);
      } catch (RuntimeException e) {
        return; // only a hint: the wait itself goes on
      }
      JsonNode diagnosis = object == null ? null : object.path("diagnosis");
      if (diagnosis != null && diagnosis.path("infeasible").asBoolean(false)) {
        warned = true;
        LOG.log(System.Logger.Level.WARNING, id + " cannot be placed (the head says it is infeasible): "
            + diagnosis.path("summary").asText("no summary") + "; still waiting for it after "
            + TimeUnit.NANOSECONDS.toSeconds(waited) + " s");
      }
    }
  }
}
