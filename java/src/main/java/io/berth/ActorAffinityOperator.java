package io.berth;

/** How an expression matches actor labels (actor affinity): IN and EXISTS attract, NOT_IN and DOES_NOT_EXIST repel. */
public enum ActorAffinityOperator {
  /** Actors whose label has one of the values. */
  IN,
  /** Away from actors whose label has one of the values. */
  NOT_IN,
  /** Actors that have the label. */
  EXISTS,
  /** Away from actors that have the label. */
  DOES_NOT_EXIST
}
