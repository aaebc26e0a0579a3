package io.berth;

import java.lang.invoke.MethodType;
import java.lang.reflect.Method;
import java.lang.reflect.Type;
import java.util.Arrays;
import java.util.List;

/** A handle on an actor: {@code handle.task(Counter::getValue).remote().get(10000)}. */
public final class ActorHandle<A> {
  private final String actorId;
  private final ActorConnection connection;

  ActorHandle(String actorId, ActorConnection connection) {
    this.actorId = actorId;
    this.connection = connection;
  }

  /** The actor's ID ({@code actor-3}). */
  public String getId() {
    return actorId;
  }

  /** A call of a method without arguments. */
  public <R> Caller<R> task(BerthFunc.F1<A, R> method) {
    return new Caller<>(Lambdas.of(method), List.of());
  }

  /** A call of a method with one argument. */
  public <T0, R> Caller<R> task(BerthFunc.F2<A, T0, R> method, T0 a0) {
    return new Caller<>(Lambdas.of(method), Arrays.asList(a0));
  }

  /** A call of a method with two arguments. */
  public <T0, T1, R> Caller<R> task(BerthFunc.F3<A, T0, T1, R> method, T0 a0, T1 a1) {
    return new Caller<>(Lambdas.of(method), Arrays.asList(a0, a1));
  }

  void died(BerthException error) {
    connection.fail(error);
  }

  @Override
  public String toString() {
    return "ActorHandle(" + actorId + ")";
  }

  /** One method call, sent with {@link #remote()}. */
  public final class Caller<R> {
    private final Lambdas.Target target;
    private final List<Object> args;

    Caller(Lambdas.Target target, List<Object> args) {
      this.target = target;
      this.args = args;
    }

    /** Sends the call after every earlier call of this handle; its result comes back in the ref. */
    public ObjectRef<R> remote() {
      return connection.call(target.method(), target.signature(), args, returnType(target));
    }
  }

  static Type returnType(Lambdas.Target target) {
    try {
      Class<?> cls = Class.forName(target.className(), false, Thread.currentThread().getContextClassLoader());
      for (Method m : cls.getDeclaredMethods()) {
        if (m.getName().equals(target.method())
            && MethodType.methodType(m.getReturnType(), m.getParameterTypes()).toMethodDescriptorString()
                .equals(target.signature())) {
          Type t = m.getGenericReturnType();
          return t == void.class ? Void.class : (t instanceof Class<?> c && c.isPrimitive()) ? box(c) : t;
        }
      }
    } catch (ClassNotFoundException e) {
      // fall through
    }
    return Object.class;
  }

  static Class<?> box(Class<?> c) {
    return MethodType.methodType(c).wrap().returnType();
  }
}
