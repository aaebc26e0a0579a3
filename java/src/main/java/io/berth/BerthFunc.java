package io.berth;

import java.io.Serializable;

/**
 * Method and constructor references the SDK can name: serializable, so the SDK reads the class,
 * method and signature they refer to (as Ray's Java function descriptors do) and sends only
 * those names to the worker, which calls the same method by reflection.
 */
public final class BerthFunc {
  private BerthFunc() {}

  /** A reference taking no argument: {@code Counter::new}. */
  @FunctionalInterface
  public interface F0<R> extends Serializable {
    /** Calls it. */
    R apply() throws Exception;
  }

  /** A reference taking one argument: {@code Counter::new} with one, {@code Counter::getValue}. */
  @FunctionalInterface
  public interface F1<T0, R> extends Serializable {
    /** Calls it. */
    R apply(T0 t0) throws Exception;
  }

  /** A reference taking two arguments: {@code Counter::increase} (the actor, then one). */
  @FunctionalInterface
  public interface F2<T0, T1, R> extends Serializable {
    /** Calls it. */
    R apply(T0 t0, T1 t1) throws Exception;
  }

  /** A reference taking three arguments. */
  @FunctionalInterface
  public interface F3<T0, T1, T2, R> extends Serializable {
    /** Calls it. */
    R apply(T0 t0, T1 t1, T2 t2) throws Exception;
  }
}
