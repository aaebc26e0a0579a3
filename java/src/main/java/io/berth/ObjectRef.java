package io.berth;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A result that may not exist yet: a task's or an actor method call's. Waiting on one whose
 * task or actor the head cannot place (infeasible) logs a warning with the head's diagnosis
 * after 5 s, then keeps waiting.
 */
public final class ObjectRef<R> {
  final CompletableFuture<R> future = new CompletableFuture<>();
  private final String describe;
  /** What the result waits on (its task or actor), checked while a caller waits; null: nothing. */
  volatile Infeasible waitsOn;

  ObjectRef(String describe) {
    this.describe = describe;
  }

  /** Waits for the result; a remote exception is thrown as {@link BerthException.TaskException}. */
  public R get() {
    return await(Long.MAX_VALUE, -1);
  }

  /** Waits at most {@code timeoutMs} milliseconds ({@link BerthException.GetTimeoutException}). */
  public R get(long timeoutMs) {
    return await(TimeUnit.MILLISECONDS.toNanos(Math.max(0, timeoutMs)), timeoutMs);
  }

  /** Waits {@code timeoutNanos} (Long.MAX_VALUE: without end), checking what it waits on as it goes. */
  private R await(long timeoutNanos, long timeoutMs) {
    long start = System.nanoTime();
    Infeasible target = waitsOn;
    Infeasible.Watch watch = target == null ? null : target.watch();
    while (true) {
      long left = timeoutNanos == Long.MAX_VALUE ? Long.MAX_VALUE : timeoutNanos - (System.nanoTime() - start);
      long slice = watch == null ? left : Math.min(left, watch.untilCheck());
      try {
        return future.get(Math.max(0, slice), TimeUnit.NANOSECONDS);
      } catch (TimeoutException e) {
        if (timeoutNanos != Long.MAX_VALUE && System.nanoTime() - start >= timeoutNanos) {
          throw new BerthException.GetTimeoutException("get() timed out after " + timeoutMs + " ms waiting for " + describe);
        }
        if (watch != null) {
          watch.checkIfDue();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new BerthException(null, "interrupted", e);
      } catch (ExecutionException e) {
        throw unwrap(e);
      }
    }
  }

  private static BerthException unwrap(ExecutionException e) {
    return e.getCause() instanceof BerthException b ? b : new BerthException(null, String.valueOf(e.getCause()), e.getCause());
  }

  @Override
  public String toString() {
    return "ObjectRef(" + describe + ")";
  }
}
