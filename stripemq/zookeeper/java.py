"""Where Debian's ZooKeeper and a Java runtime are, and the JVM command line that runs it.

Shared by the ``stripemq zookeeper`` role and the test harness
(``stripemq.testing.zookeeper``), so the jar, the classpath and the ``java`` lookup live in one
place.

Logging: Debian's ``zookeeper`` 3.8 logs through SLF4J to log4j 1.2, configured by
``/etc/zookeeper/conf/log4j.properties`` (found on the classpath through the conf dir), whose
root logger is the system property ``zookeeper.root.logger`` (``CONSOLE`` is a
``ConsoleAppender`` on stdout, ``ROLLINGFILE`` a file under ``zookeeper.log.dir``). The
package's own classpath (conf dir and ``zookeeper.jar``) carries no SLF4J binding, so
ZooKeeper would log nothing; ``LOG_JARS`` (the ``slf4j-log4j12`` binding and log4j 1.2,
both dependencies of ``libzookeeper-java``) are on the default classpath, and
``logging_properties`` points the root logger at the console only.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path

DEBIAN_CONF_DIR = "/etc/zookeeper/conf"
DEBIAN_JAR = "/usr/share/java/zookeeper.jar"
LOG_JARS = ("/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar")
DEFAULT_CLASSPATH = ":".join((DEBIAN_CONF_DIR, DEBIAN_JAR, *LOG_JARS))

QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"

INSTALL_HINT = "install the Debian package 'zookeeper' (apt-get install zookeeper)"


def classpath(conf_dir: str = DEBIAN_CONF_DIR, jar: str = DEBIAN_JAR) -> str:
    """A classpath of ``conf_dir``, ``jar`` and the log4j binding (``LOG_JARS``)."""
    return ":".join((conf_dir, jar, *LOG_JARS))


def find_java(java: str = "java") -> str | None:
    """The executable ``java`` names (a path, or a name looked up on ``PATH``), or None."""
    found = java if os.sep in java else shutil.which(java)
    if found and os.path.isfile(found) and os.access(found, os.X_OK):
        return found
    return None


def missing_classpath_entries(path: str) -> list[str]:
    """The entries of the classpath ``path`` that do not exist (``dir/*`` checks ``dir``)."""
    missing = []
    for entry in filter(None, path.split(":")):
        target = entry[:-2] if entry.endswith("/*") else entry
        if not Path(target).exists():
            missing.append(entry)
    return missing


def logging_properties(log_dir: str | os.PathLike[str], *, level: str = "INFO") -> list[str]:
    """JVM ``-D`` options sending ZooKeeper's log (through Debian's log4j.properties) to
    stdout at ``level``; ``log_dir`` is where the file appenders would write, were they
    chosen."""
    return [
        f"-Dzookeeper.root.logger={level},CONSOLE",
        f"-Dzookeeper.log.dir={log_dir}",
        "-Dzookeeper.log.file=zookeeper.log",
    ]


def java_command(
    java: str,
    class_path: str,
    config_file: str | os.PathLike[str],
    *,
    heap_mb: int,
    log_dir: str | os.PathLike[str],
    java_opts: str | Sequence[str] = "",
    main_class: str = QUORUM_MAIN,
) -> list[str]:
    """The command line running ZooKeeper's ``main_class`` on ``config_file`` (a zoo.cfg).

    The admin server is off, a JVM out of memory exits (to be restarted) instead of limping
    on, and ``java_opts`` (a shell-quoted string, or a list) come last so they win.
    """
    extra = shlex.split(java_opts) if isinstance(java_opts, str) else list(java_opts)
    return [
        java,
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        "-XX:+ExitOnOutOfMemoryError",
        "-Dzookeeper.admin.enableServer=false",
        *logging_properties(log_dir),
        *extra,
        "-cp",
        class_path,
        main_class,
        str(config_file),
    ]
