package io.berth;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** One expression of an {@link ActorAffinitySchedulingStrategy} (actor affinity). */
public final class ActorAffinityMatchExpression {
  private final String key;
  private final ActorAffinityOperator operator;
  private final List<String> values;
  private final boolean isSoft;

  private ActorAffinityMatchExpression(
      String key, ActorAffinityOperator operator, List<String> values, boolean isSoft) {
    // In the head's order: the key, the values, then their number.
    Labels.checkKey("scheduling_strategy.expressions[].key", key);
    for (String v : values == null ? List.<String>of() : values) {
      Labels.checkValue("scheduling_strategy.expressions[].values", key, v);
    }
    boolean needsValues = operator == ActorAffinityOperator.IN || operator == ActorAffinityOperator.NOT_IN;
    if (needsValues && (values == null || values.isEmpty())) {
      throw new BerthException(
          "scheduling_strategy.expressions[].values", operator + " needs at least one value", null);
    }
    this.key = key;
    this.operator = operator;
    this.values = new ArrayList<>(values == null ? List.of() : values);
    this.isSoft = isSoft;
  }

  /** With actors whose label {@code key} has one of {@code values}. */
  public static ActorAffinityMatchExpression in(String key, List<String> values, boolean isSoft) {
    return new ActorAffinityMatchExpression(key, ActorAffinityOperator.IN, values, isSoft);
  }

  /** Away from actors whose label {@code key} has one of {@code values}. */
  public static ActorAffinityMatchExpression notIn(String key, List<String> values, boolean isSoft) {
    return new ActorAffinityMatchExpression(key, ActorAffinityOperator.NOT_IN, values, isSoft);
  }

  /** With actors that have the label {@code key}. */
  public static ActorAffinityMatchExpression exists(String key, boolean isSoft) {
    return new ActorAffinityMatchExpression(key, ActorAffinityOperator.EXISTS, List.of(), isSoft);
  }

  /** Away from actors that have the label {@code key}. */
  public static ActorAffinityMatchExpression doesNotExist(String key, boolean isSoft) {
    return new ActorAffinityMatchExpression(key, ActorAffinityOperator.DOES_NOT_EXIST, List.of(), isSoft);
  }

  Map<String, Object> toRest() {
    var out = new LinkedHashMap<String, Object>();
    out.put("key", key);
    out.put("operator", operator.name());
    if (!values.isEmpty()) {
      out.put("values", values);
    }
    out.put("soft", isSoft);
    return out;
  }
}
