package io.berth;

import java.io.Serializable;
import java.lang.invoke.SerializedLambda;
import java.lang.reflect.Method;

/** What a method or constructor reference names: its class, method and JVM signature. */
final class Lambdas {
  private Lambdas() {}

  /** The class (dotted name), method ({@code <init>} for constructors) and signature. */
  record Target(String className, String method, String signature) {
    boolean isConstructor() {
      return method.equals("<init>");
    }
  }

  static Target of(Serializable reference) {
    try {
      Method replace = reference.getClass().getDeclaredMethod("writeReplace");
      replace.setAccessible(true);
      SerializedLambda lambda = (SerializedLambda) replace.invoke(reference);
      return new Target(
          lambda.getImplClass().replace('/', '.'), lambda.getImplMethodName(), lambda.getImplMethodSignature());
    } catch (ReflectiveOperationException | ClassCastException e) {
      throw new BerthException(
          "give a method or constructor reference (Counter::new, Counter::getValue), not a lambda: " + e);
    }
  }
}
