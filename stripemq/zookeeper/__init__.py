"""``stripemq zookeeper``: one ZooKeeper server from Debian's ``zookeeper`` package (3.8),
configured only from stripemq settings, so one image runs every role of a cluster.

- ``config``: ``ZooKeeperConfig``, the role's settings;
- ``zoo_cfg``: ``zoo.cfg`` and ``myid`` from the settings, and the server id (sans-IO);
- ``metrics``: readiness and Prometheus text from the four-letter words (sans-IO);
- ``java``: where the jar, the classpath and ``java`` are, and the JVM command line (shared
  with the test harness ``stripemq.testing.zookeeper``);
- ``server``: ``ZooKeeperSupervisor``, the process that runs ZooKeeper as its child.

Nothing here imports the rest of stripemq beyond its config and error modules.
"""

from stripemq.zookeeper.config import ZooKeeperConfig

__all__ = ["ZooKeeperConfig"]
