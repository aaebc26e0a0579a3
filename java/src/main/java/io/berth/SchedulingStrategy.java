package io.berth;

import java.util.Map;

/** How the head chooses a node; rendered as the head's {@code scheduling_strategy} value. */
public interface SchedulingStrategy {
  /** The head's JSON value of this strategy. */
  Object toRest();

  /** The DEFAULT strategy (hybrid: pack, then spread). */
  SchedulingStrategy DEFAULT = () -> "DEFAULT";
  /** Round-robin over the nodes that can take the work now. */
  SchedulingStrategy SPREAD = () -> "SPREAD";

  /** The node-label strategy (Ray-style label selectors): {@code hard} must hold, {@code soft} is preferred. */
  static SchedulingStrategy nodeLabels(Map<String, String> hard, Map<String, String> soft) {
    Labels.checkSelector("scheduling_strategy.hard", hard);
    Labels.checkSelector("scheduling_strategy.soft", soft);
    return () -> {
      var out = new java.util.LinkedHashMap<String, Object>();
      out.put("type", "NODE_LABEL");
      if (hard != null && !hard.isEmpty()) {
        out.put("hard", hard);
      }
      if (soft != null && !soft.isEmpty()) {
        out.put("soft", soft);
      }
      return out;
    };
  }
}
