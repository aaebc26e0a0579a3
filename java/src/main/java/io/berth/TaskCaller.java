package io.berth;

import java.lang.reflect.Type;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** A static method about to run as a task: set its options, then {@link #remote()}. */
public final class TaskCaller<R> extends WorkOptions<TaskCaller<R>> {
  private final Berth.Session session;
  private final Lambdas.Target method;
  private final List<Object> args;
  private Integer maxRetries;

  TaskCaller(Berth.Session session, Lambdas.Target method, List<Object> args) {
    if (method.isConstructor()) {
      throw new BerthException("Berth.task takes a static method reference (Tasks::square), not a constructor");
    }
    this.session = session;
    this.method = method;
    this.args = new ArrayList<>(args);
    resources.put("CPU", "1");
  }

  /** Runs after the worker died (default 3). */
  public TaskCaller<R> setMaxRetries(int maxRetries) {
    if (maxRetries < 0) {
      throw new BerthException("max_retries", maxRetries + " is below 0", null);
    }
    this.maxRetries = maxRetries;
    return this;
  }

  /** Submits the task; its result (or the exception it threw) comes back in the ref. */
  @SuppressWarnings("unchecked")
  public ObjectRef<R> remote() {
    var spec = new LinkedHashMap<String, Object>();
    spec.put("class", method.className());
    spec.put("method", method.method());
    spec.put("signature", method.signature());
    spec.put("args", args);
    var ref = new ObjectRef<Object>(method.className() + "." + method.method());
    Type type = ActorHandle.returnType(method);
    var call = new Owner.Call("task", Frames.json(spec), ref, type);
    var body = body(session, session.javaBin, session.workerArgs(),
        Map.of("BERTH_OWNER", session.owner.address, "BERTH_CALL", call.id));
    if (maxRetries != null) {
      body.put("max_retries", maxRetries);
    }
    session.owner.add(call);
    var task = session.client.create("/api/v1/tasks", body);
    String id = task.get("task_id").asText();
    ref.waitsOn = new Infeasible(session.client, "tasks", id);
    session.owner.bind(call, id, task.get("work_key").asText());
    session.watch(call);
    return (ObjectRef<R>) ref;
  }
}
