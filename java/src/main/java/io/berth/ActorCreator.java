package io.berth;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** An actor about to be created: set its options, then {@link #remote()}. */
public final class ActorCreator<A> {
  private final Berth.Session session;
  private final Lambdas.Target constructor;
  private final List<Object> args;
  private final Map<String, String> labels = new LinkedHashMap<>();
  private final Map<String, Object> resources = new LinkedHashMap<>();
  private Map<String, String> labelSelector;
  private Map<String, String> tolerations;
  private SchedulingStrategy strategy;
  private Integer maxRestarts;
  private String name;

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
    Labels.checkKey("labels." + key, key);
    Labels.checkValue("labels." + key, key, value);
    labels.put(key, value);
    return this;
  }

  /** Sets several labels. */
  public ActorCreator<A> setLabels(Map<String, String> labels) {
    Labels.checkLabels("labels", labels);
    this.labels.putAll(labels);
    return this;
  }

  /** How the head chooses its node. */
  public ActorCreator<A> setSchedulingStrategy(SchedulingStrategy strategy) {
    this.strategy = strategy;
    return this;
  }

  /** Reserves {@code amount} of {@code name} (CPU, GPU, memory, custom). */
  public ActorCreator<A> setResource(String name, double amount) {
    if (!(amount >= 0) || Double.isInfinite(amount)) {
      throw new BerthException("resources." + name, amount + " is negative; amounts must be 0 or more", null);
    }
    resources.put(name, amount);
    return this;
  }

  /** Reserves these resources. */
  public ActorCreator<A> setResources(Map<String, Double> resources) {
    resources.forEach(this::setResource);
    return this;
  }

  /** Node labels that must hold (seed 003), key to expression ({@code "in(a,b)"}). */
  public ActorCreator<A> setLabelSelector(Map<String, String> selector) {
    Labels.checkSelector("label_selector", selector);
    this.labelSelector = selector;
    return this;
  }

  /** Taints the actor accepts (seed 004), key to expression ({@code "exists()"}). */
  public ActorCreator<A> setTolerations(Map<String, String> tolerations) {
    Labels.checkSelector("tolerations", tolerations);
    this.tolerations = tolerations;
    return this;
  }

  /** Restarts after its process dies (-1: always). */
  public ActorCreator<A> setMaxRestarts(int maxRestarts) {
    if (maxRestarts < -1) {
      throw new BerthException("max_restarts", maxRestarts + " is below -1; use -1 to always restart", null);
    }
    this.maxRestarts = maxRestarts;
    return this;
  }

  /** A name, unique among live actors of the namespace. */
  public ActorCreator<A> setName(String name) {
    this.name = name;
    return this;
  }

  /** Creates the actor; the head places it now or when it can. */
  public ActorHandle<A> remote() {
    var spec = new LinkedHashMap<String, Object>();
    spec.put("class", constructor.className());
    spec.put("signature", constructor.signature());
    spec.put("args", args);
    var call = new Owner.Call(Frames.json(spec));
    var body = new LinkedHashMap<String, Object>();
    body.put("command", session.javaBin);
    body.put("args", List.of("-cp", session.classpath, "io.berth.Worker"));
    body.put("env", Map.of("BERTH_OWNER", session.owner.address, "BERTH_CALL", call.id));
    body.put("resources", resources);
    body.put("namespace", session.namespace);
    if (!labels.isEmpty()) {
      body.put("labels", labels);
    }
    if (strategy != null) {
      body.put("scheduling_strategy", strategy.toRest());
    }
    if (labelSelector != null) {
      body.put("label_selector", labelSelector);
    }
    if (tolerations != null) {
      body.put("tolerations", tolerations);
    }
    if (maxRestarts != null) {
      body.put("max_restarts", maxRestarts);
    }
    if (name != null) {
      body.put("name", name);
    }
    session.owner.add(call);
    var actor = session.client.call("POST", "/api/v1/actors", body);
    String id = actor.get("actor_id").asText();
    session.owner.bind(call, id, actor.get("work_key").asText());
    session.owned.add(id);
    var connection = new ActorConnection(session, id, actor.get("work_key").asText());
    var handle = new ActorHandle<A>(id, connection);
    call.onFailed = error -> {
      connection.fail(new BerthException.ActorDiedException("actor " + id + " is dead: its constructor threw " + error));
      new Thread(() -> session.killQuietly(id)).start();
    };
    return handle;
  }
}
