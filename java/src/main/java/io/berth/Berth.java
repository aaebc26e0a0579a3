package io.berth;

import java.io.File;
import java.io.IOException;
import java.net.DatagramSocket;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * Berth's Java API (Ray's Java API, {@code Ray} read as {@code Berth}): create actors whose objects
 * live in JVM workers the agents start on the nodes the head chose, and call their methods.
 *
 * <pre>{@code
 * Berth.init();
 * ActorHandle<Counter> counter = Berth.actor(Counter::new, 1).setLabel("location", "dc_1").remote();
 * int value = counter.task(Counter::getValue).remote().get(10000);
 * }</pre>
 */
public final class Berth {
  private static Session session;

  private Berth() {}

  /** This driver's connection: the REST client, its owner service, its actors. */
  static final class Session {
    final Client client;
    final Owner owner;
    final String namespace;
    final String javaBin = System.getProperty("java.home") + "/bin/java";
    final String classpath;
    final List<String> owned = new CopyOnWriteArrayList<>();

    Session(Client client, String namespace) throws IOException {
      this.client = client;
      this.namespace = namespace;
      this.owner = new Owner(outwardIp(client.url));
      Thread monitor = new Thread(this::monitor, "berth-monitor");
      monitor.setDaemon(true);
      monitor.start();
      // The workers load the driver's classes from the same path (on other machines: set
      // $BERTH_JAVA_CLASSPATH to where the jars are there).
      String cp = System.getenv("BERTH_JAVA_CLASSPATH");
      this.classpath = cp != null && !cp.isEmpty() ? cp : absolute(System.getProperty("java.class.path"));
    }

    /** The class path with every entry absolute: workers run in their own directories. */
    static String absolute(String classpath) {
      var out = new ArrayList<String>();
      for (String entry : classpath.split(File.pathSeparator)) {
        if (!entry.isEmpty()) {
          out.add(Path.of(entry).toAbsolutePath().toString());
        }
      }
      return String.join(File.pathSeparator, out);
    }

    List<String> workerArgs() {
      return List.of("-cp", classpath, "io.berth.Worker");
    }

    private final java.util.Map<String, Owner.Call> watched = new java.util.concurrent.ConcurrentHashMap<>();
    private volatile boolean closed;

    /** Watches a task at the head until its result arrives: one long poll for all of them. */
    void watch(Owner.Call call) {
      watched.put(call.workId, call);
      synchronized (watched) {
        watched.notifyAll();
      }
    }

    void monitor() {
      while (!closed) {
        watched.values().removeIf(c -> c.ref.future.isDone());
        if (watched.isEmpty()) {
          synchronized (watched) {
            try {
              watched.wait(1000);
            } catch (InterruptedException e) {
              return;
            }
          }
          continue;
        }
        var ids = new ArrayList<>(watched.keySet());
        com.fasterxml.jackson.databind.JsonNode answer;
        try {
          answer = client.call("POST", "/api/v1/tasks:wait",
              java.util.Map.of("task_ids", ids.subList(0, Math.min(ids.size(), 10_000)), "timeout_s", 2.0),
              java.time.Duration.ofSeconds(40), false);
        } catch (BerthException e) {
          continue;
        }
        for (var task : answer.path("ended")) {
          Owner.Call call = watched.remove(task.path("task_id").asText());
          if (call != null && !call.ref.future.isDone()) {
            String state = task.path("state").asText();
            String why = state.equals("FAILED") ? task.path("failure").asText()
                : state.equals("CANCELLED") ? "it was cancelled"
                : "its process exited without handing back a result";
            call.ref.future.completeExceptionally(new BerthException(call.workId + " failed: " + why));
          }
        }
        for (var id : answer.path("unknown")) {
          Owner.Call call = watched.remove(id.asText());
          if (call != null) {
            call.ref.future.completeExceptionally(new BerthException(id.asText() + " is no longer known to the head"));
          }
        }
      }
    }

    void killQuietly(String id) {
      try {
        client.call("DELETE", "/api/v1/actors/" + id, null);
      } catch (BerthException ignored) {
        // already gone
      }
    }
  }

  /**
   * Connects to the local head (as the CLI finds it: $BERTH_ADDRESS, $BERTH_TOKEN, $BERTH_CA,
   * ~/.berth).
   */
  public static synchronized void init() {
    init(null, null, null);
  }

  /** Connects to the head at {@code address} ({@code HOST:PORT}), with the token found as the CLI finds it. */
  public static synchronized void init(String address) {
    init(address, null, null);
  }

  /** Connects to the head at {@code address} ({@code HOST:PORT}) with {@code token}. */
  public static synchronized void init(String address, String token) {
    init(address, token, null);
  }

  /**
   * Connects to the head at {@code address} ({@code HOST:PORT}, {@code http://HOST:PORT} or
   * {@code https://HOST:PORT}) with {@code token}. A head serving TLS ({@code https://}) is
   * trusted when the CA file {@code ca} (PEM; default $BERTH_CA) signed its certificate for the
   * address's host: no CA, or one that did not sign it, is a {@link BerthException} on the field
   * {@code ca}. A null argument is found as the CLI finds it.
   */
  public static synchronized void init(String address, String token, String ca) {
    if (session != null) {
      throw new IllegalStateException("Berth.init was called already; call Berth.shutdown first");
    }
    Client client = new Client(address, token, ca);
    client.call("GET", "/api/v1/cluster/status", null);
    try {
      session = new Session(client, "default");
    } catch (IOException e) {
      throw new BerthException(null, "cannot open the owner service: " + e, e);
    }
  }

  /** Kills the actors this driver created and disconnects. */
  public static synchronized void shutdown() {
    if (session == null) {
      return;
    }
    for (String id : session.owned) {
      session.killQuietly(id);
    }
    session.owner.close();
    session.closed = true;
    session = null;
  }

  static synchronized Session session() {
    if (session == null) {
      init();
    }
    return session;
  }

  /** An actor built by a constructor without arguments. */
  public static <A> ActorCreator<A> actor(BerthFunc.F0<A> constructor) {
    return new ActorCreator<>(session(), Lambdas.of(constructor), List.of());
  }

  /** An actor built by a constructor with one argument: {@code Berth.actor(Counter::new, 1)}. */
  public static <T0, A> ActorCreator<A> actor(BerthFunc.F1<T0, A> constructor, T0 a0) {
    return new ActorCreator<>(session(), Lambdas.of(constructor), Arrays.asList(a0));
  }

  /** An actor built by a constructor with two arguments. */
  public static <T0, T1, A> ActorCreator<A> actor(BerthFunc.F2<T0, T1, A> constructor, T0 a0, T1 a1) {
    return new ActorCreator<>(session(), Lambdas.of(constructor), Arrays.asList(a0, a1));
  }

  /** A static method without arguments, to run as a task. */
  public static <R> TaskCaller<R> task(BerthFunc.F0<R> method) {
    return new TaskCaller<>(session(), Lambdas.of(method), List.of());
  }

  /** A static method with one argument, to run as a task: {@code Berth.task(Tasks::square, 3)}. */
  public static <T0, R> TaskCaller<R> task(BerthFunc.F1<T0, R> method, T0 a0) {
    return new TaskCaller<>(session(), Lambdas.of(method), Arrays.asList(a0));
  }

  /** A static method with two arguments, to run as a task. */
  public static <T0, T1, R> TaskCaller<R> task(BerthFunc.F2<T0, T1, R> method, T0 a0, T1 a1) {
    return new TaskCaller<>(session(), Lambdas.of(method), Arrays.asList(a0, a1));
  }

  /** A placement group of these bundles (resource name to amount). */
  public static PlacementGroup.Creator placementGroup(List<java.util.Map<String, Double>> bundles) {
    return new PlacementGroup.Creator(session(), bundles);
  }

  /** Removes a placement group; what runs in its bundles is stopped. */
  public static void removePlacementGroup(PlacementGroup group) {
    session().client.call("DELETE", "/api/v1/placement_groups/" + group.getId(), null);
  }

  /** Kills an actor for good; its calls fail with {@link BerthException.ActorDiedException}. */
  public static void kill(ActorHandle<?> actor) {
    session().client.call("DELETE", "/api/v1/actors/" + actor.getId(), null);
    actor.died(new BerthException.ActorDiedException("actor " + actor.getId() + " was killed by Berth.kill"));
  }

  /** The local address that routes to the head (what other machines reach this driver at). */
  static String outwardIp(String url) {
    try (DatagramSocket probe = new DatagramSocket()) {
      URI uri = URI.create(url);
      probe.connect(new InetSocketAddress(uri.getHost(), uri.getPort() < 0 ? 8780 : uri.getPort()));
      return probe.getLocalAddress().getHostAddress();
    } catch (IOException | IllegalArgumentException e) {
      return "127.0.0.1";
    }
  }
}
