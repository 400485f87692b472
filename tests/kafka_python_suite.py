"""kafka-python's own integration suite (test/integration of its PyPI sdist), run as its CI runs
it against a Kafka distribution, against Apache Kafka 4.3.1 or a Rivulet broker.

The sdist ships the suite's tests, conftest and fixtures, but not the files they import or render
from the project's repository: ``test/__init__.py`` (without it ``test`` is Python's own stdlib
package), ``test/service.py`` (the spawned-process helper) and ``servers/resources/default/``
(the broker's properties and JAAS templates). Those are written here, ours; the suite's files are
left as shipped. Its fixtures start a broker from ``$KAFKA_ROOT/bin``: ``kafka-storage.sh
format``, then ``kafka-run-class.sh kafka.Kafka <properties>``, waiting for Kafka's "Kafka Server
started" line; ``kafka-topics.sh --list`` lists topics. ``KAFKA_ROOT`` here is a directory whose
scripts run either Kafka's jars (``benchmarks/reference/kafka.py``) or, for Rivulet, this module:

    python -m tests.kafka_python_suite prepare DIR     # the sdist unpacked into DIR, with our files
    python -m tests.kafka_python_suite run kafka|rivulet DIR [pytest args]
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from benchmarks.reference import kafka as ref
from rivulet.security.scram import MECHANISMS, ScramCredential
from rivulet.server.config import load_properties
from rivulet.server.dynamic_config import DynamicBrokerConfig

REPO = Path(__file__).resolve().parent.parent
KAFKA_PYTHON_VERSION = "3.0.12"
SDIST = f"kafka_python-{KAFKA_PYTHON_VERSION}"
KAFKA_VERSION = "4.3.1"  # the fixtures' KAFKA_VERSION: KRaft, the 4.x start line and authorizer

# ---------------------------------------------------------------- the files the sdist lacks

# The fixtures render these with str.format over the KafkaFixture's attributes. One combined
# KRaft node, as kafka-python's CI runs 4.x. The broker's SASL login comes from the JAAS file
# (java.security.auth.login.config), as the fixture gives it.
KAFKA_PROPERTIES = """\
process.roles=broker,controller
node.id={broker_id}
controller.quorum.bootstrap.servers={controller_bootstrap_host}:{controller_port}
controller.listener.names=CONTROLLER
listeners={transport}://{host}:{port},CONTROLLER://{host}:{controller_port}
advertised.listeners={transport}://{host}:{port}
inter.broker.listener.name={transport}
listener.security.protocol.map=CONTROLLER:PLAINTEXT,{transport}:{transport}
{sasl_config}
{ssl_config}
{acl_config}
log.dirs={tmp_dir}/data
num.partitions={partitions}
default.replication.factor={replicas}
offsets.topic.replication.factor=1
offsets.topic.num.partitions=2
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
"""

JAAS_CONF = """\
KafkaServer {{
  {jaas_config}}};
"""

SASL_COMMAND_CONF = """\
security.protocol={transport}
sasl.mechanism={sasl_mechanism}
sasl.jaas.config={jaas_config}
"""

# The spawned-process helper the fixtures import: start() runs ``args`` and collects its output
# lines; wait_for(pattern) searches them; stop() ends the process (SIGTERM, then SIGKILL).
SERVICE_PY = '''\
import logging
import re
import subprocess
import sys
import threading
import time

log = logging.getLogger(__name__)


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def open(self):
        pass

    def close(self):
        pass


class SpawnedService:
    def __init__(self, args, env=None):
        self.args, self.env = args, env
        self.lines = []
        self.child = None
        self._reader = None

    def start(self):
        self.child = subprocess.Popen(self.args, env=self.env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw in self.child.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip())

    def wait_for(self, pattern, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(re.search(pattern, line, re.IGNORECASE) for line in list(self.lines)):
                return True
            if self.child.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        log.error("%r not seen within %ss", pattern, timeout)
        self.child.kill()
        return False

    def dump_logs(self):
        sys.stdout.write("\\n".join(self.lines[-200:]) + "\\n")

    def stop(self):
        if self.child is None:
            return
        if self.child.poll() is None:
            self.child.terminate()
            try:
                self.child.wait(30)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()
        self._reader.join(5)
'''

ADDED_FILES = {
    "test/__init__.py": "",
    "test/service.py": SERVICE_PY,
    "servers/resources/default/kafka.properties": KAFKA_PROPERTIES,
    "servers/resources/default/kafka_server_jaas.conf": JAAS_CONF,
    "servers/resources/default/sasl_command.conf": SASL_COMMAND_CONF,
    "servers/resources/default/log4j.properties": "# unused: the bin scripts configure logging\n",
}


def prepare(sdist: Path, dest: Path) -> Path:
    """Unpack ``sdist`` into ``dest`` and add the files it lacks (none of its own is changed)."""
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    root = dest / SDIST
    for rel, text in ADDED_FILES.items():
        path = root / rel
        assert not path.exists(), f"the sdist now ships {rel}: use its own"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# ---------------------------------------------------------------- the distribution's bin/

PR_SET_PDEATHSIG = 1
_SCRIPTS = ("kafka-run-class.sh", "kafka-storage.sh", "kafka-topics.sh")


def write_bin(kafka_root: Path, target: str) -> Path:
    """``kafka_root/bin`` whose scripts run this module's ``tool`` for ``target``."""
    bindir = kafka_root / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for name in _SCRIPTS:
        script = bindir / name
        script.write_text("#!/bin/sh\n"
                          f"export PYTHONPATH={shlex.quote(str(REPO))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                          f"exec {shlex.quote(sys.executable)} -m tests.kafka_python_suite tool {target} {name} \"$@\"\n")
        script.chmod(0o755)
    return kafka_root


def _java(*args: str, heap: str = "256m") -> list[str]:
    # INFO: the broker's start line is what the fixture waits for. Written whole, then renamed.
    log4j = Path(tempfile.gettempdir()) / "kafka-python-suite-log4j2.properties"
    if not log4j.exists():
        tmp = log4j.with_name(f"{log4j.name}.{os.getpid()}")
        ref.write_log4j2_config(tmp)
        os.replace(tmp, log4j)
    opts = shlex.split(os.environ.get("KAFKA_OPTS", ""))  # the JAAS file, for the broker
    return ["java", f"-Xmx{heap}", f"-Dlog4j2.configurationFile={log4j}", *opts, "-cp", ref.classpath(), *args]


def _jaas_entry(opts: str) -> str | None:
    """The KafkaServer section's login entry of the JAAS file that KAFKA_OPTS names."""
    m = re.search(r"-Djava\.security\.auth\.login\.config=(\S+)", opts)
    if m is None:
        return None
    text = Path(m.group(1)).read_text()
    section = re.search(r"KafkaServer\s*\{(.*?)\}\s*;", text, re.S)
    return section.group(1).strip() if section else None


def _rivulet_broker(props_path: str) -> int:
    """Rivulet in Kafka's place: the same properties; the JAAS file's KafkaServer entry as the
    SASL listener's ``sasl.jaas.config`` (what Kafka falls back to); and the start line (and
    the SCRAM user's, after the format step seeded it) the fixture waits for."""
    props = load_properties(props_path)
    args = [sys.executable, "-m", "rivulet", "broker", "--config", props_path]
    entry = _jaas_entry(os.environ.get("KAFKA_OPTS", ""))
    listener = props.get("inter.broker.listener.name", "")
    if entry is not None:
        for mech in props.get("sasl.enabled.mechanisms", "").split(","):
            if mech.strip():
                args += ["--override", f"listener.name.{listener.lower()}.{mech.strip().lower()}.sasl.jaas.config={entry}"]
    # The fixture kills this process when the start line is late: the broker goes with it.
    libc = ctypes.CDLL(None, use_errno=True)
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             preexec_fn=lambda: libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM))
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    node = props.get("node.id", "0")
    assert child.stdout is not None
    for raw in child.stdout:
        line = raw.decode(errors="replace").rstrip()
        print(line, flush=True)
        if re.search(r"\bstarted in \d+ ms", line):
            for user in _seeded_users(props):
                print(f"Replayed UserScramCredentialRecord creating new entry for {user}", flush=True)
            print(f"[KafkaRaftServer nodeId={node}] Kafka Server started", flush=True)
    return child.wait()


def _seeded_users(props: dict[str, str]) -> list[str]:
    log_dir = props["log.dirs"].split(",")[0]
    return sorted(DynamicBrokerConfig(log_dir, int(props.get("node.id", "0"))).load_scram_credentials())


def _rivulet_format(argv: list[str]) -> int:
    """``kafka-storage.sh format``: Rivulet needs no format step; ``--add-scram`` users are
    stored as AlterUserScramCredentials would store them on one node."""
    props = load_properties(argv[argv.index("-c") + 1])
    log_dir = props["log.dirs"].split(",")[0]
    os.makedirs(log_dir, exist_ok=True)
    store = DynamicBrokerConfig(log_dir, int(props.get("node.id", "0")))
    for i, a in enumerate(argv):
        if a == "--add-scram":
            m = re.fullmatch(r"([\w-]+)=\[name=([^,\]]+),password=([^\]]+)\]", argv[i + 1])
            assert m, argv[i + 1]
            mech, user, password = m.groups()
            cred = ScramCredential.from_password(MECHANISMS[mech], password)
            asyncio.run(store.store_scram_credentials(user, {mech: cred.to_text()}))
    return 0


def _exec(cmd: list[str]) -> int:
    os.execvp(cmd[0], cmd)  # the JVM takes this process's place, and so the fixture's signals


def tool(target: str, script: str, argv: list[str]) -> int:
    if script == "kafka-topics.sh":  # Kafka's own tool, a client, against either broker
        return _exec(_java("org.apache.kafka.tools.TopicCommand", *argv))
    if target == "kafka":
        if script == "kafka-storage.sh":
            return _exec(_java("kafka.tools.StorageTool", *argv))
        return _exec(_java(*argv, heap="1g"))
    if script == "kafka-storage.sh":
        return _rivulet_format(argv)
    assert argv[0] == "kafka.Kafka", argv
    return _rivulet_broker(argv[1])


def run(target: str, root: Path, pytest_args: list[str], kafka_root: Path, report: Path,
        timeout: float = 1500, tests: tuple[str, ...] = ("test/integration",)) -> subprocess.CompletedProcess[str]:
    """The suite in ``root`` (see ``prepare``), or ``tests`` of it, against ``target``; JUnit XML
    into ``report``."""
    write_bin(kafka_root, target)
    env = dict(os.environ, KAFKA_VERSION=KAFKA_VERSION, KAFKA_ROOT=str(kafka_root), PROJECT_ROOT=str(root))
    env.pop("PYTHONPATH", None)  # the suite's `test` and `kafka` packages come from its root
    cmd = [sys.executable, "-m", "pytest", *tests, "-p", "no:cacheprovider", "-p", "no:xdist",
           "-o", "log_level=INFO", f"--junitxml={report}", "-rs", "-q", *pytest_args]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def main(argv: list[str]) -> int:
    if argv[0] == "tool":
        return tool(argv[1], argv[2], argv[3:])
    if argv[0] == "prepare":
        dest = Path(argv[1])
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                        "-d", str(dest), f"kafka-python=={KAFKA_PYTHON_VERSION}"], check=True)
        print(prepare(dest / f"{SDIST}.tar.gz", dest))
        return 0
    if argv[0] == "run":
        root = Path(argv[2]) / SDIST
        r = run(argv[1], root, argv[3:], Path(argv[2]) / f"dist-{argv[1]}", Path(argv[2]) / f"{argv[1]}.xml")
        print(r.stdout[-20000:], r.stderr[-3000:])
        return r.returncode
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
