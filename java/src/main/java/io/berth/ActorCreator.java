package io.berth;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** An actor about to be created: set its options, then {@link #remote()}. */
public final class ActorCreator<A> extends WorkOptions<ActorCreator<A>> {
  private final Berth.Session session;
  private final Lambdas.Target constructor;
  private final List<Object> args;
  private final Map<String, String> labels = new LinkedHashMap<>();
  private Integer maxRestarts;
  private Lifetime lifetime;

  ActorCreator(Berth.Session session, Lambdas.Target constructor, List<Object> args) {
    if (!constructor.isConstructor()) {
      throw new BerthException("Berth.actor takes a constructor reference (Counter::new)");
    }
    this.session = session;
    this.constructor = constructor;
    this.args = new ArrayList<>(args);
  }

  /** Sets one label; a later value for the same key wins. */
  public ActorCreator<A> setLabel(String key, String value) {
    Labels.checkActorLabel("labels." + key, key, value);
    labels.put(key, value);
    return this;
  }

  /** Sets several labels. */
  public ActorCreator<A> setLabels(Map<String, String> labels) {
    Labels.checkActorLabels("labels", labels);
    this.labels.putAll(labels);
    return this;
  }

  /** Restarts after its process dies (-1: always); the same handle reaches the restarted actor. */
  public ActorCreator<A> setMaxRestarts(int maxRestarts) {
    if (maxRestarts < -1) {
      throw new BerthException("max_restarts", maxRestarts + " is below -1; use -1 to always restart", null);
    }
    this.maxRestarts = maxRestarts;
    return this;
  }

  /**
   * Whether the actor ends with its owner ({@link Lifetime#NON_DETACHED}, the default: this
   * driver's job, or the worker that creates it) or outlives it ({@link Lifetime#DETACHED}:
   * until {@link Berth#kill} or {@code berth kill}, or it runs out of restarts).
   */
  public ActorCreator<A> setLifetime(Lifetime lifetime) {
    this.lifetime = Lifetime.check(lifetime);
    return this;
  }

  /** Creates the actor; the head places it now or when it can. */
  public ActorHandle<A> remote() {
    var spec = new LinkedHashMap<String, Object>();
    spec.put("class", constructor.className());
    spec.put("signature", constructor.signature());
    spec.put("args", args);
    var call = new Owner.Call(Frames.json(spec));
    var body = body(session, session.javaBin, session.workerArgs(),
        Map.of("BERTH_OWNER", session.owner.address, "BERTH_CALL", call.id));
    if (!labels.isEmpty()) {
      body.put("labels", labels);
    }
    if (maxRestarts != null) {
      body.put("max_restarts", maxRestarts);
    }
    if (lifetime != null) {
      body.put("lifetime", lifetime.rest());
    }
    session.owner.add(call);
    var actor = session.client.create("/api/v1/actors", body);
    String id = actor.get("actor_id").asText();
    String key = actor.get("work_key").asText();
    var connection = new ActorConnection(session, id, key);
    // Set before binding: binding lets the worker fetch its spec, and a constructor that throws
    // at once reports before this method returns; bound first, the report could find no hook.
    call.onFailed = error -> {
      connection.fail(new BerthException.ActorDiedException("actor " + id + " is dead: its constructor threw " + error));
      new Thread(() -> session.killQuietly(id)).start();
    };
    session.owner.bind(call, id, key);
    return new ActorHandle<>(id, connection);
  }
}
