package io.berth;

import java.math.BigDecimal;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The options actors and tasks share (seed 003's selectors, seed 004's tolerations, resources,
 * strategy, name), checked as they are set with the head's field names and rules.
 */
public abstract class WorkOptions<T extends WorkOptions<T>> {
  final Map<String, Object> resources = new LinkedHashMap<>();
  Map<String, String> labelSelector;
  Map<String, String> tolerations;
  SchedulingStrategy strategy;
  String name;

  WorkOptions() {}

  @SuppressWarnings("unchecked")
  private T self() {
    return (T) this;
  }

  /** Reserves {@code amount} of {@code name} (CPU, GPU, memory in bytes, or a custom name). */
  public T setResource(String name, double amount) {
    resources.put(name, amount(name, amount));
    return self();
  }

  /** Reserves these resources. */
  public T setResources(Map<String, Double> resources) {
    resources.forEach(this::setResource);
    return self();
  }

  /** Node labels that must hold (seed 003), key to expression ({@code "in(a,b)"}, {@code "!exists()"}). */
  public T setLabelSelector(Map<String, String> selector) {
    Labels.checkSelector("label_selector", selector);
    this.labelSelector = selector;
    return self();
  }

  /** Taints it accepts (seed 004), key to expression ({@code "exists()"}). */
  public T setTolerations(Map<String, String> tolerations) {
    Labels.checkSelector("tolerations", tolerations);
    this.tolerations = tolerations;
    return self();
  }

  /** How the head chooses its node. */
  public T setSchedulingStrategy(SchedulingStrategy strategy) {
    this.strategy = strategy;
    return self();
  }

  /** A name (actors: unique among the live actors of the namespace). */
  public T setName(String name) {
    if (name == null || name.isEmpty() || name.length() > 253) {
      throw new BerthException("name", "must be 1 to 253 characters", null);
    }
    this.name = name;
    return self();
  }

  /** An amount as the head's decimal text, checked as the head checks it. */
  static String amount(String resource, double amount) {
    String field = "resources." + resource;
    if (Double.isNaN(amount) || Double.isInfinite(amount)) {
      throw new BerthException(field, amount + " is not a finite number", null);
    }
    if (amount < 0) {
      throw new BerthException(field, amount + " is negative; amounts must be 0 or more", null);
    }
    BigDecimal exact = new BigDecimal(Double.toString(amount)).stripTrailingZeros();
    String text = exact.toPlainString();
    if (exact.scale() > 4) {
      throw new BerthException(
          field, text + " has more than 4 decimal places; amounts are exact to 0.0001 and are not rounded", null);
    }
    if (resource.equals("GPU") && amount > 1 && exact.scale() > 0) {
      throw new BerthException(field, text + " is not allowed: GPU is shared per instance, so a request must be "
          + "below 1 (a share of one instance) or a whole number of instances", null);
    }
    return text;
  }

  /** The REST body's placement and resource keys. */
  Map<String, Object> body(Berth.Session session, String command, Object args, Map<String, String> env) {
    var body = new LinkedHashMap<String, Object>();
    body.put("command", command);
    body.put("args", args);
    body.put("env", env);
    body.put("resources", resources);
    body.put("namespace", session.namespace);
    if (strategy != null) {
      body.put("scheduling_strategy", strategy.toRest());
    }
    if (labelSelector != null) {
      body.put("label_selector", labelSelector);
    }
    if (tolerations != null) {
      body.put("tolerations", tolerations);
    }
    if (name != null) {
      body.put("name", name);
    }
    return body;
  }
}
