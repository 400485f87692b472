#!/usr/bin/env bash
# Set Rivulet up on a fresh Debian machine: the system packages it needs, then a virtual
# environment in .venv with Rivulet installed in it (Debian's own pip is externally managed,
# so nothing is installed into the system Python).
#
#   bash scripts/setup.sh            # Rivulet with PySpark, the schema registry's Avro and Iceberg
#                                    # tables (pyiceberg): enough for `rivulet demo`, and kcat for
#                                    # the README's examples
#   bash scripts/setup.sh test,spark,spark-connect # also the test clients and Spark Connect's
#                                                  # client (what .ci/run uses)
#   bash scripts/setup.sh cluster    # also a ZooKeeper server, for `rivulet cluster up`
#
# Run again, it installs only what changed (Debian packages still missing; Rivulet again when
# the extras, pyproject.toml, setup.py or the C sources differ from the last install).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-spark,registry,iceberg}"

if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_updated=""
apt_install() {
  [ $# -gt 0 ] || return 0
  echo "installing Debian packages: $*"
  if [ -z "$apt_updated" ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need=()
# kcat: the README's first Kafka client (and one of the real clients the integration tests drive).
if ! command -v kcat >/dev/null 2>&1 && ! command -v kafkacat >/dev/null 2>&1; then need+=(kcat); fi
# A C compiler and the Python headers build the optional record codec (_speedups.c).
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need+=(python3-dev)
case ",$extras," in
  *,spark,*)
    # Spark 4 runs on Java 17 or later.
    major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
    if [ -z "$major" ] || [ "$major" -lt 17 ]; then need+=(default-jre-headless); fi ;;
esac
case ",$extras," in
  *,test,*)
    # docs/security.md's walkthrough, which a test runs as written, makes its certificates with it.
    command -v openssl >/dev/null 2>&1 || need+=(openssl)
    # kcat's own suite (tests/integration/test_kcat_suite.py) reads kcat's JSON output with jq.
    command -v jq >/dev/null 2>&1 || need+=(jq)
    # A test runs Kafka's Java consumer from a source file (java File.java), which needs a JDK.
    command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
    # The Node.js clients' test (tests/integration/test_node_clients.py) installs KafkaJS with npm.
    command -v node >/dev/null 2>&1 || need+=(nodejs)
    command -v npm >/dev/null 2>&1 || need+=(npm)
    # The web console's tests drive it in headless Chromium through Selenium.
    command -v chromium >/dev/null 2>&1 || need+=(chromium)
    command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
    # The network-partition tests cut brokers off in network namespaces with packet filters.
    command -v ip >/dev/null 2>&1 || need+=(iproute2)
    command -v nft >/dev/null 2>&1 || need+=(nftables)
    # An Iceberg test keeps its catalog in a PostgreSQL server of its own (initdb, pg_ctl).
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null 2>&1 \
      || need+=(postgresql) ;;
esac
case ",$extras," in
  *,test,*|*,cluster,*)
    # Cluster mode coordinates through ZooKeeper: Debian's server, run by `rivulet cluster up`
    # and the cluster tests (it brings Java with it).
    if [ ! -e /usr/share/java/zookeeper.jar ] && [ -z "${ZOOKEEPER_HOME:-}" ]; then need+=(zookeeper); fi ;;
esac
apt_install "${need[@]}"

if [ ! -x .venv/bin/python ]; then
  if ! python3 -m venv .venv 2>/dev/null; then
    rm -rf .venv
    apt_install python3-venv
    python3 -m venv .venv
  fi
fi
# What the install below depends on: the extras asked for, the project's metadata and build hook,
# the C sources and the modules the editable install compiles from them into the checkout. When
# an earlier run installed exactly this, pip has nothing to do (it would still ask the index
# about every requirement and rebuild the editable wheel: seconds on every run of .ci/run).
stamp=.venv/.rivulet-setup
installed() {
  echo "$extras $({ cat pyproject.toml setup.py rivulet/*/*.c 2>/dev/null || true; } | cksum)" \
    "$(ls rivulet/*/*.so 2>/dev/null || true)"
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$(installed)" ]; then
  rm -f "$stamp"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  # A plain editable install: pyproject.toml's package-dir makes it a .pth line with the checkout,
  # so Spark's discovery of data sources (pkgutil.iter_modules) finds pyspark_rivulet.
  # --no-compile: Python writes the bytecode of what is imported when it first is (unless
  # PYTHONDONTWRITEBYTECODE is set; .ci/run unsets it); compiling every module of PySpark,
  # pyarrow and the rest up front took a third of the install.
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-compile -e ".[$extras]"
  installed > "$stamp"
fi
echo "set up: .venv (activate it with '. .venv/bin/activate')"
