package io.berth;

/** Anything the SDK or the cluster refused or could not do. */
public class BerthException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String field;

  /** An error with a message. */
  public BerthException(String message) {
    this(null, message, null);
  }

  /** An error naming the field (the head's name for it) and the rule it breaks. */
  public BerthException(String field, String message, Throwable cause) {
    super(field == null ? message : field + ": " + message, cause);
    this.field = field;
  }

  /** The field the error is about, or null. */
  public String field() {
    return field;
  }

  /** A remote method threw: its class, message and the stack trace on the node. */
  public static class TaskException extends BerthException {
    private static final long serialVersionUID = 1L;
    private final String remoteType;
    private final String remoteTrace;

    /** The remote exception's class name, message and stack trace. */
    public TaskException(String remoteType, String message, String remoteTrace) {
      super(null, remoteType + ": " + message + "\n\nRemote stack trace:\n" + remoteTrace, null);
      this.remoteType = remoteType;
      this.remoteTrace = remoteTrace;
    }

    /** The remote exception's class name. */
    public String remoteType() {
      return remoteType;
    }

    /** The remote stack trace. */
    public String remoteTrace() {
      return remoteTrace;
    }
  }

  /** The actor is dead (killed, or out of restarts). */
  public static class ActorDiedException extends BerthException {
    private static final long serialVersionUID = 1L;
    /** Why. */
    public ActorDiedException(String message) {
      super(message);
    }
  }

  /** {@code get(timeout)} waited as long as asked. */
  public static class GetTimeoutException extends BerthException {
    private static final long serialVersionUID = 1L;
    /** What timed out. */
    public GetTimeoutException(String message) {
      super(message);
    }
  }
}
