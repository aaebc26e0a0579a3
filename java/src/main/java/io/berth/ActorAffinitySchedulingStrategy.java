package io.berth;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;

/** Place an actor with or away from other actors, by their labels (actor affinity). */
public final class ActorAffinitySchedulingStrategy implements SchedulingStrategy {
  private final List<ActorAffinityMatchExpression> expressions;

  private ActorAffinitySchedulingStrategy(List<ActorAffinityMatchExpression> expressions) {
    this.expressions = List.copyOf(expressions);
  }

  @Override
  public Object toRest() {
    var out = new LinkedHashMap<String, Object>();
    out.put("type", "ACTOR_AFFINITY");
    var list = new ArrayList<Object>();
    for (var e : expressions) {
      list.add(e.toRest());
    }
    out.put("expressions", list);
    return out;
  }

  /** Collects expressions; every one must hold. */
  public static final class Builder {
    private final List<ActorAffinityMatchExpression> expressions = new ArrayList<>();

    /** Adds an expression. */
    public Builder addExpression(ActorAffinityMatchExpression expression) {
      expressions.add(expression);
      return this;
    }

    /** The strategy; at least one expression is needed. */
    public ActorAffinitySchedulingStrategy build() {
      if (expressions.isEmpty()) {
        throw new BerthException("scheduling_strategy.expressions", "give at least one expression", null);
      }
      return new ActorAffinitySchedulingStrategy(expressions);
    }
  }
}
