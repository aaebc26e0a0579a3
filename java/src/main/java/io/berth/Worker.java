package io.berth;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.invoke.MethodType;
import java.lang.reflect.Constructor;
import java.lang.reflect.Executable;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Type;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import javax.net.ssl.SSLContext;

/**
 * The JVM worker the agents start for Java actors: {@code java -cp CLASSPATH io.berth.Worker}.
 * Fetches its class, constructor and arguments from the driver's owner service, builds the
 * object, listens, registers its endpoint with the head and runs method calls one at a time in
 * arrival order (docs/worker-protocol.md; codec {@code json}).
 */
public final class Worker {
  private static final int EXIT_SETUP = 3;
  /** A caller named a later attempt of this actor: this copy is stale. */
  private static final int EXIT_SUPERSEDED = 4;
  /**
   * How long a worker keeps trying to reach the driver that owns its call ($BERTH_OWNER_WAIT_S,
   * 60 s by default): longer than a job's default lease (30 s), so that a killed driver's job
   * ends, and this attempt is cancelled, first.
   */
  private static final long OWNER_WAIT_MS = ownerWaitMs();

  private static long ownerWaitMs() {
    try {
      String value = System.getenv("BERTH_OWNER_WAIT_S");
      return value == null || value.isEmpty() ? 60_000 : (long) (Double.parseDouble(value) * 1000);
    } catch (NumberFormatException e) {
      return 60_000;
    }
  }

  private Worker() {}

  /** Runs the worker (never returns while the actor lives). */
  public static void main(String[] args) throws Exception {
    String actorId = System.getenv("BERTH_ACTOR_ID") != null ? env("BERTH_ACTOR_ID") : env("BERTH_TASK_ID");
    int attempt = Integer.parseInt(env("BERTH_ATTEMPT"));
    String key = env("BERTH_WORK_KEY");
    String owner = env("BERTH_OWNER");
    String call = env("BERTH_CALL");
    var link = new OwnerLink(owner, actorId);
    var header = new LinkedHashMap<String, Object>(Map.of("call", call, "work_id", actorId, "key", key, "attempt", attempt));
    header.put("op", "fetch");
    Frames.Frame reply = link.ask(header, new byte[0]);
    if (!Boolean.TRUE.equals(reply.header().get("ok"))) {
      System.err.println("berth worker: the driver refused fetch: " + reply.header().get("error"));
      System.exit(EXIT_SETUP);
    }
    if (Boolean.TRUE.equals(reply.header().get("done"))) {
      // An earlier attempt handed back this call's result (its process ended before it could
      // exit): nothing is left to run, and running it again would repeat its effects.
      System.err.println("berth worker: the driver holds this call's result already; exiting");
      System.exit(0);
    }
    JsonNode spec = Frames.JSON.readTree(reply.payload());
    if (System.getenv("BERTH_TASK_ID") != null && System.getenv("BERTH_ACTOR_ID") == null) {
      runTask(spec, header, link);
      return;
    }
    Object instance;
    try {
      Class<?> cls = Class.forName(spec.get("class").asText());
      Constructor<?> constructor = (Constructor<?>) find(cls, "<init>", spec.get("signature").asText());
      constructor.setAccessible(true);
      instance = constructor.newInstance(convert(constructor, spec.get("args")));
    } catch (Throwable e) {
      Throwable cause = e instanceof InvocationTargetException ite ? ite.getCause() : e;
      cause.printStackTrace();
      header.put("op", "result");
      header.put("status", "error");
      link.ask(header, Frames.json(error(cause)));
      System.exit(1);
      return;
    }
    // With standby heads the variable lists every address: register with the active one, over
    // TLS with the CA the agent gives as $BERTH_CA when the head serves https://.
    List<String> heads = Client.urls(env("BERTH_ADDRESS"));
    SSLContext tls;
    try {
      tls = Client.tls(heads, System.getenv("BERTH_CA"));
    } catch (BerthException e) {
      System.err.println("berth worker: cannot reach the head: " + e.getMessage());
      System.exit(EXIT_SETUP);
      return;
    }
    String head = Client.active(heads, tls);
    // On the address its node registered with ($BERTH_NODE_IP), unless $BERTH_BIND says.
    String[] listen = Berth.listenAddress(head);
    ServerSocket server = Berth.listen(listen[0]);
    register(head, tls, actorId, attempt, key, listen[1] + ":" + server.getLocalPort());
    ExecutorService calls = Executors.newSingleThreadExecutor();
    while (true) {
      Socket socket = server.accept();
      socket.setTcpNoDelay(true);
      Thread t = new Thread(() -> serve(socket, instance, key, attempt, calls), "berth-actor-conn");
      t.setDaemon(true);
      t.start();
    }
  }

  /** A task: runs the static method, hands the result to the owner, exits 0. */
  private static void runTask(JsonNode spec, Map<String, Object> header, OwnerLink link) {
    byte[] payload;
    try {
      Class<?> cls = Class.forName(spec.get("class").asText());
      Method method = (Method) find(cls, spec.get("method").asText(), spec.get("signature").asText());
      method.setAccessible(true);
      Object value = method.invoke(null, convert(method, spec.get("args")));
      header.put("status", "ok");
      payload = Frames.json(value);
    } catch (Throwable e) {
      Throwable cause = e instanceof InvocationTargetException ite ? ite.getCause() : e;
      header.put("status", "error");
      payload = Frames.json(error(cause));
    }
    header.put("op", "result");
    Frames.Frame ack = link.ask(header, payload);
    // The task created work: what it owns ends with this process (the head hears of the
    // results that arrived first).
    Berth.shutdown();
    System.exit(Boolean.TRUE.equals(ack.header().get("ok")) ? 0 : EXIT_SETUP);
  }

  /**
   * The connection to the driver that owns the call. A driver that cannot be reached is tried
   * again for {@link #OWNER_WAIT_MS}: one that was killed has its job end within its lease, and
   * the head then ends this attempt (cancelled, not failed); one cut off for longer fails the
   * attempt, which the head may retry.
   */
  private static final class OwnerLink {
    private final String owner;
    private final String workId;
    private Socket socket;
    private DataInputStream in;
    private DataOutputStream out;

    OwnerLink(String owner, String workId) {
      this.owner = owner;
      this.workId = workId;
    }

    /** Sends a request (asking again after a broken connection; requests are idempotent). */
    Frames.Frame ask(Map<String, Object> header, byte[] payload) {
      long deadline = 0;
      long delay = 100;
      while (true) {
        try {
          if (socket == null) {
            int colon = owner.lastIndexOf(':');
            Socket s = new Socket();
            s.connect(new InetSocketAddress(owner.substring(0, colon), Integer.parseInt(owner.substring(colon + 1))),
                30_000);
            in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
            socket = s;
          }
          Frames.send(out, header, payload);
          return Frames.recv(in);
        } catch (IOException e) {
          try {
            if (socket != null) {
              socket.close();
            }
          } catch (IOException ignored) {
            // closing a broken connection
          }
          socket = null;
          long now = System.nanoTime();
          if (deadline == 0) {
            deadline = now + OWNER_WAIT_MS * 1_000_000L;
            System.err.println("berth worker: cannot reach the driver that owns " + workId + " at " + owner + ": "
                + e.getMessage() + "; trying again for " + OWNER_WAIT_MS / 1000
                + " s (if the driver is gone, its job ends and this attempt with it)");
          }
          if (now >= deadline) {
            System.err.println("berth worker: the driver that owns " + workId + " stayed out of reach");
            System.exit(EXIT_SETUP);
          }
          try {
            Thread.sleep(delay);
          } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
            System.exit(EXIT_SETUP);
          }
          delay = Math.min(delay * 2, 2_000);
        }
      }
    }
  }

  private static String env(String name) {
    String value = System.getenv(name);
    if (value == null || value.isEmpty()) {
      System.err.println("berth worker: $" + name + " is not set: this program is started by a Berth agent");
      System.exit(EXIT_SETUP);
    }
    return value;
  }

  /** Tells the head where this actor's process listens; without it no caller can reach it: exits. */
  private static void register(String head, SSLContext tls, String actorId, int attempt, String key, String address)
      throws InterruptedException {
    var body = Frames.json(Map.of("attempt", attempt, "address", address));
    var request = HttpRequest.newBuilder(URI.create(head.replaceAll("/+$", "") + "/api/v1/actors/" + actorId + "/endpoint"))
        .header("Authorization", "Bearer " + key).header("Content-Type", "application/json")
        .timeout(Duration.ofSeconds(30)).PUT(HttpRequest.BodyPublishers.ofByteArray(body)).build();
    HttpResponse<String> response;
    try {
      response = Client.http(tls, Duration.ofSeconds(10)).send(request, HttpResponse.BodyHandlers.ofString());
    } catch (IOException e) {
      System.err.println("berth worker: cannot register " + actorId + "'s endpoint with the head at " + head + ": " + e);
      System.exit(EXIT_SETUP);
      return;
    }
    if (response.statusCode() != 200) {
      System.err.println("berth worker: the head refused the endpoint: " + response.body());
      System.exit(EXIT_SETUP);
    }
  }

  private static void serve(Socket socket, Object instance, String key, int attempt, ExecutorService calls) {
    try (socket) {
      var in = new DataInputStream(new BufferedInputStream(socket.getInputStream()));
      var out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream()));
      Frames.Frame hello = Frames.recv(in);
      if (!"hello".equals(hello.header().get("op")) || !(hello.header().get("key") instanceof String k)
          || !k.equalsIgnoreCase(key)) {
        Frames.send(out, Map.of("ok", false, "error", "wrong work key"), new byte[0]);
        return;
      }
      if (hello.header().get("attempt") instanceof Number wanted && wanted.intValue() != attempt) {
        // The caller knows another attempt than this one: never answer for it.
        Frames.send(out, Map.of("ok", false, "error",
            "this is attempt " + attempt + ", not " + wanted.intValue(), "attempt", attempt), new byte[0]);
        if (wanted.intValue() > attempt) {
          // A later attempt exists: this process is a stale copy, and ends.
          System.err.println("berth worker: attempt " + attempt + " superseded by attempt "
              + wanted.intValue() + "; exiting");
          Runtime.getRuntime().halt(EXIT_SUPERSEDED);
        }
        return;
      }
      Frames.send(out, Map.of("ok", true, "attempt", attempt), new byte[0]);
      while (true) {
        Frames.Frame frame = Frames.recv(in);
        calls.submit(() -> run(instance, frame, out));
      }
    } catch (IOException e) {
      // the caller closed the connection
    }
  }

  private static void run(Object instance, Frames.Frame frame, DataOutputStream out) {
    Object seq = frame.header().get("seq");
    Map<String, Object> reply = new LinkedHashMap<>();
    reply.put("seq", seq);
    byte[] payload;
    try {
      Executable method = find(instance.getClass(), String.valueOf(frame.header().get("method")),
          String.valueOf(frame.header().get("signature")));
      ((Method) method).setAccessible(true);
      Object value = ((Method) method).invoke(instance, convert(method, Frames.JSON.readTree(frame.payload())));
      reply.put("status", "ok");
      payload = Frames.json(value);
    } catch (Throwable e) {
      Throwable cause = e instanceof InvocationTargetException ite ? ite.getCause() : e;
      reply.put("status", "error");
      payload = Frames.json(error(cause));
    }
    try {
      Frames.send(out, reply, payload);
    } catch (IOException ignored) {
      // the caller is gone
    }
  }

  static Executable find(Class<?> cls, String name, String signature) throws NoSuchMethodException {
    if (name.equals("<init>")) {
      for (Constructor<?> c : cls.getDeclaredConstructors()) {
        if (MethodType.methodType(void.class, c.getParameterTypes()).toMethodDescriptorString().equals(signature)) {
          return c;
        }
      }
    } else {
      for (Class<?> c = cls; c != null; c = c.getSuperclass()) {
        for (Method m : c.getDeclaredMethods()) {
          if (m.getName().equals(name)
              && MethodType.methodType(m.getReturnType(), m.getParameterTypes()).toMethodDescriptorString().equals(signature)) {
            return m;
          }
        }
      }
    }
    throw new NoSuchMethodException(cls.getName() + "." + name + signature);
  }

  private static Object[] convert(Executable method, JsonNode args) {
    Type[] types = method.getGenericParameterTypes();
    if (args == null || args.size() != types.length) {
      throw new IllegalArgumentException(method + " takes " + types.length + " arguments, got "
          + (args == null ? 0 : args.size()));
    }
    Object[] out = new Object[types.length];
    for (int i = 0; i < types.length; i++) {
      Type type = types[i];
      if (type instanceof java.lang.reflect.ParameterizedType p && p.getRawType() == ObjectRef.class) {
        // A ref: fetched from the process that holds it when the method gets it.
        out[i] = ObjectRef.fromJson(args.get(i), p.getActualTypeArguments()[0]);
      } else if (type == ObjectRef.class) {
        out[i] = ObjectRef.fromJson(args.get(i), Object.class);
      } else {
        out[i] = Frames.JSON.convertValue(args.get(i), Frames.JSON.constructType(type));
      }
    }
    return out;
  }

  private static Map<String, Object> error(Throwable e) {
    var trace = new StringWriter();
    e.printStackTrace(new PrintWriter(trace));
    return Map.of("type", e.getClass().getName(), "message", String.valueOf(e.getMessage()), "traceback", trace.toString());
  }
}
