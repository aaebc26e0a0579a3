package io.berth;

/**
 * Whether an actor or a placement group ends with its owner ({@link #NON_DETACHED}, the default)
 * or outlives it ({@link #DETACHED}): {@code Berth.actor(Counter::new, 1).setLifetime(Lifetime.DETACHED)}.
 *
 * <p>The owner is the driver's job (see {@link Berth#jobId()}), or the actor or task whose
 * process created it. Non-detached work ends when its owner does: the job finishes, is stopped or
 * lost, or the owning process ends. Detached work ends only when it is ended by name
 * ({@link Berth#kill}, {@link Berth#removePlacementGroup}, {@code berth kill}).
 */
public enum Lifetime {
  /** Ends with its owner (the default). */
  NON_DETACHED("non_detached"),
  /** Outlives its owner and its job. */
  DETACHED("detached");

  private final String rest;

  Lifetime(String rest) {
    this.rest = rest;
  }

  /** The head's name for it ({@code "lifetime"} in a creation's body). */
  String rest() {
    return rest;
  }

  /** Checks a lifetime given to a creator: null names no lifetime. */
  static Lifetime check(Lifetime lifetime) {
    if (lifetime == null) {
      throw new BerthException("lifetime", "null is not a lifetime; use Lifetime.DETACHED or Lifetime.NON_DETACHED", null);
    }
    return lifetime;
  }
}
