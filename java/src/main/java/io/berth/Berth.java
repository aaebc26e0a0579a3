package io.berth;

import java.io.File;
import java.io.IOException;
import java.net.DatagramSocket;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * Berth's Java API (Ray's Java API, {@code Ray} read as {@code Berth}): create actors whose objects
 * live in JVM workers the agents start on the nodes the head chose, and call their methods.
 *
 * <pre>{@code
 * Berth.init();
 * ActorHandle<Counter> counter = Berth.actor(Counter::new, 1).setLabel("location", "dc_1").remote();
 * int value = counter.task(Counter::getValue).remote().get(10000);
 * Berth.shutdown();   // finishes this driver's job: the head ends what it owns
 * }</pre>
 *
 * <p>A driver's {@link #init} creates a <em>job</em>, its session with the cluster, held by a
 * lease the SDK renews; every actor, task and placement group it creates belongs to the job and
 * ends with it (unless {@link Lifetime#DETACHED}): when the driver calls {@link #shutdown}, its
 * JVM exits, or it is killed and stops renewing. Inside a worker no job is made: what the
 * worker creates joins the worker's job and is owned by its actor or task, ending with its
 * process.
 */
public final class Berth {
  private static Session session;

  private Berth() {}

  /** This program's connection: the REST client, its owner service, its job. */
  static final class Session {
    final Client client;
    final Owner owner;
    final String namespace;
    final String javaBin = System.getProperty("java.home") + "/bin/java";
    final String classpath;
    /** The job what this program creates belongs to (null: none). */
    final String jobId;
    /** Inside a worker: its actor or task, the owner of what it creates; null in a driver. */
    final String ownerId;
    /** A driver's job, which this program holds; null inside a worker. */
    final JobLease job;

    Session(Client client, String namespace, Duration lease) throws IOException {
      this.client = client;
      this.namespace = namespace;
      String work = workId();
      this.owner = new Owner(listenAddress(client.url));
      if (work != null) {
        // A worker's process: its creations join its job and end with its process.
        this.ownerId = work;
        this.jobId = emptyToNull(System.getenv("BERTH_JOB_ID"));
        this.job = null;
      } else {
        this.ownerId = null;
        try {
          this.job = JobLease.create(client, namespace, lease);
        } catch (RuntimeException e) {
          owner.close();
          throw e;
        }
        this.jobId = job.jobId;
        job.beforeFinish = this::tellDelivered;
      }
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

    /**
     * Tells the head which tasks' results arrived lately, so that they end FINISHED rather than
     * cancelled with this process or its job.
     */
    void tellDelivered() {
      List<String> ids = owner.recentlyDelivered();
      if (ids.isEmpty()) {
        return;
      }
      try {
        client.call("POST", "/api/v1/tasks:delivered", Map.of("task_ids", ids), Duration.ofSeconds(10), false);
      } catch (RuntimeException e) {
        System.getLogger("io.berth").log(System.Logger.Level.WARNING,
            "cannot tell the head which tasks' results arrived: " + e.getMessage());
      }
    }

    /** The actor or task this process runs for ($BERTH_ACTOR_ID, $BERTH_TASK_ID), or null. */
    static String workId() {
      String actor = emptyToNull(System.getenv("BERTH_ACTOR_ID"));
      return actor != null ? actor : emptyToNull(System.getenv("BERTH_TASK_ID"));
    }

    private static String emptyToNull(String value) {
      return value == null || value.isEmpty() ? null : value;
    }

    /** What names this program's job and owner in a creation's body. */
    void own(java.util.Map<String, Object> body) {
      if (jobId != null) {
        body.put("job_id", jobId);
      }
      if (ownerId != null) {
        body.put("owner_id", ownerId);
      }
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
   * ~/.berth) and, in a driver, creates its job (see {@link #init(String, String, String, Duration)}).
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
   * {@code ca}. A null argument is found as the CLI finds it. In a driver, creates its job with
   * the head's default lease (30 s): see {@link #init(String, String, String, Duration)}.
   */
  public static synchronized void init(String address, String token, String ca) {
    init(address, token, ca, null);
  }

  /**
   * Connects as {@link #init(String, String, String)} does, and holds this driver's job with a
   * lease of {@code lease} (1 s to 1 day; null: the head's default, 30 s). The SDK renews it
   * every sixth of the lease on a daemon thread; a driver that stops renewing for a whole lease
   * (killed, or cut off from the head) has its job ended as LOST, and with it every actor, task
   * and placement group it owned. A short lease frees a killed driver's work sooner; a long one
   * tolerates longer pauses (a long garbage collection, a network outage). Inside a worker no
   * job is made and {@code lease} is not used.
   */
  public static synchronized void init(String address, String token, String ca, Duration lease) {
    if (session != null) {
      throw new IllegalStateException("Berth.init was called already; call Berth.shutdown first");
    }
    if (lease != null) {
      JobLease.leaseSeconds(lease); // refused before anything is sent
    }
    Client client = new Client(address, token, ca);
    // Inside a worker, whose work credential reaches its own job only: its own work.
    String me = Session.workId();
    client.call("GET", me == null ? "/api/v1/cluster/status"
        : (me.startsWith("actor-") ? "/api/v1/actors/" : "/api/v1/tasks/") + me, null);
    try {
      session = new Session(client, "default", lease);
    } catch (IOException e) {
      throw new BerthException(null, "cannot open the owner service: " + e, e);
    }
  }

  /**
   * Keeps {@code value} in this process and returns a ref to it (as {@code Ray.put}): pass it to
   * tasks and actor methods whose parameter is declared {@code ObjectRef<T>}; they fetch the
   * value from this process (as JSON) when they get it.
   */
  public static <T> ObjectRef<T> put(T value) {
    if (value instanceof ObjectRef<?>) {
      throw new BerthException("put() of an ObjectRef: pass the ref itself");
    }
    return ObjectRef.of(value);
  }

  /** This process's context, as Ray's: its job, namespace and, in a worker, work and node. */
  public static RuntimeContext getRuntimeContext() {
    return new RuntimeContext();
  }

  /**
   * The job this program's work belongs to ({@code job-3}): in a driver, the one {@link #init}
   * created; inside a worker, the worker's ($BERTH_JOB_ID). Null before {@link #init} and after
   * {@link #shutdown}, or in a worker of work that belongs to no job.
   */
  public static synchronized String jobId() {
    return session == null ? null : session.jobId;
  }

  /**
   * Finishes this driver's job and disconnects: the head ends the actors, tasks and placement
   * groups the job owns (all but the detached ones). A program that exits without calling it
   * has its job finished by a JVM shutdown hook. Inside a worker, only disconnects.
   */
  public static synchronized void shutdown() {
    if (session == null) {
      return;
    }
    if (session.job != null) {
      session.job.finish(null, Duration.ofSeconds(10));
    } else {
      session.tellDelivered();
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

  /**
   * Where this process's listening sockets bind, and the host it tells others to dial: the
   * system property {@code berth.bind}, else $BERTH_BIND, else (inside a worker) $BERTH_NODE_IP,
   * the address its node registered with; else the local address that routes to the head.
   * {@code 0.0.0.0} or {@code ::} listens on every interface and is announced as that outward
   * address.
   */
  static String[] listenAddress(String url) {
    String host = System.getProperty("berth.bind");
    for (String variable : new String[] {"BERTH_BIND", "BERTH_NODE_IP"}) {
      if (host == null || host.isEmpty()) {
        host = System.getenv(variable);
      }
    }
    if (host == null || host.isEmpty()) {
      host = outwardIp(url);
    }
    boolean every = host.equals("0.0.0.0") || host.equals("::");
    return new String[] {host, every ? outwardIp(url) : host};
  }

  /** A listening socket on {@code host}, port chosen by the system. */
  static java.net.ServerSocket listen(String host) throws IOException {
    var server = new java.net.ServerSocket();
    try {
      server.bind(new InetSocketAddress(host, 0), 512);
    } catch (IOException e) {
      server.close();
      throw new BerthException("bind", "cannot listen on " + host + ": " + e.getMessage()
          + " (give an address of this machine, or 0.0.0.0 for every interface)", e);
    }
    return server;
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
