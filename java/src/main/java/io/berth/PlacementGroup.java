package io.berth;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** An atomic reservation of resource bundles, made by {@link Berth#placementGroup}. */
public final class PlacementGroup {
  private final Berth.Session session;
  private final String id;
  private final int bundleCount;

  PlacementGroup(Berth.Session session, String id, int bundleCount) {
    this.session = session;
    this.id = id;
    this.bundleCount = bundleCount;
  }

  /** Its ID ({@code pg-3}). */
  public String getId() {
    return id;
  }

  /**
   * True once every bundle is reserved; false if not within {@code timeoutSeconds}. A group the
   * head cannot place (infeasible) is logged as a warning with the head's diagnosis after 5 s
   * of waiting; the wait goes on.
   */
  public boolean wait(int timeoutSeconds) {
    long start = System.nanoTime();
    long timeout = timeoutSeconds * 1_000_000_000L;
    Infeasible.Watch watch = new Infeasible(session.client, "placement_groups", id).watch();
    while (true) {
      long left = Math.max(0, timeout - (System.nanoTime() - start));
      // Long polls of at most 30 s, cut short when a check of the group is due.
      double poll = Math.min(Math.min(30.0, left / 1e9), watch.untilCheck() / 1e9);
      JsonNode group = session.client.call("GET", "/api/v1/placement_groups/" + id + "/wait?timeout_s="
          + poll, null, Duration.ofSeconds(60), true);
      if (group != null) {
        if ("REMOVED".equals(group.path("state").asText())) {
          throw new BerthException("placement group " + id + " was removed");
        }
        return true;
      }
      if (System.nanoTime() - start >= timeout) {
        return false;
      }
      watch.checkIfDue();
    }
  }

  /** The node of each bundle, in bundle order (null while one is not reserved). */
  public List<String> bundleNodes() {
    var out = new ArrayList<String>();
    for (JsonNode bundle : session.client.call("GET", "/api/v1/placement_groups/" + id, null).path("bundles")) {
      out.add(bundle.hasNonNull("node_id") ? bundle.get("node_id").asText() : null);
    }
    return out;
  }

  /** Work placed into bundle {@code index} of this group (-1: the first bundle that fits). */
  public SchedulingStrategy bundle(int index) {
    if (index < -1 || index >= bundleCount) {
      throw new BerthException("scheduling_strategy.bundle", index + " is not a bundle of " + id
          + " (0 to " + (bundleCount - 1) + ", or -1: any)", null);
    }
    return () -> {
      var out = new LinkedHashMap<String, Object>();
      out.put("type", "PLACEMENT_GROUP");
      out.put("group", id);
      if (index >= 0) {
        out.put("bundle", index);
      }
      return out;
    };
  }

  @Override
  public String toString() {
    return "PlacementGroup(" + id + ")";
  }

  /** A placement group about to be made: set its options, then {@link #create()}. */
  public static final class Creator {
    private final Berth.Session session;
    private final List<Map<String, String>> bundles = new ArrayList<>();
    private String strategy = "PACK";
    private List<Map<String, String>> bundleLabelSelector;
    private Map<String, String> tolerations;
    private String name;
    private Lifetime lifetime;

    Creator(Berth.Session session, List<Map<String, Double>> bundles) {
      if (bundles == null || bundles.isEmpty()) {
        throw new BerthException("bundles", "a placement group needs at least one bundle", null);
      }
      for (int i = 0; i < bundles.size(); i++) {
        if (bundles.get(i) == null || bundles.get(i).isEmpty()) {
          throw new BerthException("bundles[" + i + "]", "a bundle must ask for at least one resource", null);
        }
        var bundle = new LinkedHashMap<String, String>();
        String field = "bundles[" + i + "].";
        bundles.get(i).forEach((k, v) -> {
          WorkOptions.resourceName(field + k, k);
          bundle.put(k, WorkOptions.amount(k, v, true));
        });
        this.bundles.add(bundle);
      }
      this.session = session;
    }

    /** PACK (default), SPREAD, STRICT_PACK or STRICT_SPREAD. */
    public Creator setStrategy(String strategy) {
      if (!List.of("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD").contains(strategy)) {
        throw new BerthException("strategy", "unknown placement group strategy \"" + strategy
            + "\"; use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD", null);
      }
      this.strategy = strategy;
      return this;
    }

    /** One node-label selector per bundle (Ray-style label selectors). */
    public Creator setBundleLabelSelector(List<Map<String, String>> selectors) {
      if (selectors.size() != bundles.size()) {
        throw new BerthException("bundle_label_selector", selectors.size() + " selectors for " + bundles.size()
            + " bundles; give one per bundle or none", null);
      }
      for (int i = 0; i < selectors.size(); i++) {
        Labels.checkSelector("bundle_label_selector[" + i + "]", selectors.get(i));
      }
      this.bundleLabelSelector = selectors;
      return this;
    }

    /** Taints the bundles accept (tolerations). */
    public Creator setTolerations(Map<String, String> tolerations) {
      Labels.checkSelector("tolerations", tolerations);
      this.tolerations = tolerations;
      return this;
    }

    /** A name. */
    public Creator setName(String name) {
      this.name = name;
      return this;
    }

    /**
     * Whether the group ends with its owner ({@link Lifetime#NON_DETACHED}, the default: this
     * driver's job, or the worker that creates it) or outlives it ({@link Lifetime#DETACHED}:
     * until {@link Berth#removePlacementGroup} or {@code berth kill}).
     */
    public Creator setLifetime(Lifetime lifetime) {
      this.lifetime = Lifetime.check(lifetime);
      return this;
    }

    /** Asks the head to reserve it (now, or when it can: see {@link PlacementGroup#wait}). */
    public PlacementGroup create() {
      var body = new LinkedHashMap<String, Object>();
      body.put("bundles", bundles);
      body.put("strategy", strategy);
      body.put("namespace", session.namespace);
      if (bundleLabelSelector != null) {
        body.put("bundle_label_selector", bundleLabelSelector);
      }
      if (tolerations != null) {
        body.put("tolerations", tolerations);
      }
      if (name != null) {
        body.put("name", name);
      }
      if (lifetime != null) {
        body.put("lifetime", lifetime.rest());
      }
      session.own(body);
      var group = session.client.create("/api/v1/placement_groups", body);
      return new PlacementGroup(session, group.get("group_id").asText(), bundles.size());
    }
  }
}
