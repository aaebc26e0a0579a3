package io.berth;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** A result that may not exist yet: an actor method call's. */
public final class ObjectRef<R> {
  final CompletableFuture<R> future = new CompletableFuture<>();
  private final String describe;

  ObjectRef(String describe) {
    this.describe = describe;
  }

  /** Waits for the result; a remote exception is thrown as {@link BerthException.TaskException}. */
  public R get() {
    try {
      return future.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new BerthException(null, "interrupted", e);
    } catch (ExecutionException e) {
      throw unwrap(e);
    }
  }

  /** Waits at most {@code timeoutMs} milliseconds ({@link BerthException.GetTimeoutException}). */
  public R get(long timeoutMs) {
    try {
      return future.get(timeoutMs, TimeUnit.MILLISECONDS);
    } catch (TimeoutException e) {
      throw new BerthException.GetTimeoutException("get() timed out after " + timeoutMs + " ms waiting for " + describe);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new BerthException(null, "interrupted", e);
    } catch (ExecutionException e) {
      throw unwrap(e);
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
