package io.berth;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;

/** A test class on its own real cluster, with a fresh driver session for each test. */
abstract class ClusterTest {
  static LocalCluster cluster;

  @BeforeAll
  static void start() throws Exception {
    cluster = new LocalCluster();
  }

  @AfterAll
  static void stop() throws Exception {
    cluster.close();
  }

  @BeforeEach
  void connect() {
    Berth.init(cluster.address, cluster.token);
  }

  @AfterEach
  void disconnect() {
    Berth.shutdown();
  }
}
