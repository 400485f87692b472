"""Run Apache Kafka's own Java tools against any bootstrap address and parse what they print.

The jars come from the Maven cache managed by ``benchmarks.reference.kafka`` (fetched on first
use). Every runner raises :class:`JavaToolError`, carrying the tool's full output, when the tool
fails, prints an error, or does less work than asked (e.g. fewer records sent than requested),
so a test failure always shows what Kafka's client saw.

    reason = java_available()          # None, or why the Java tools cannot run here
    p = producer_perf("127.0.0.1:9092", "t", num_records=50_000, record_size=100)
    p.records_per_sec, p.mb_per_sec, p.p99_ms
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # `benchmarks` is not an installed package
    sys.path.insert(0, str(_REPO))

from benchmarks.reference.kafka import (  # noqa: E402
    KAFKA_VERSION,
    FetchError,
    cache_root,
    classpath,
    fetch,
    is_fetched,
    kafka_home,
    write_log4j2_config,
)

PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
END_TO_END_LATENCY = "org.apache.kafka.tools.EndToEndLatency"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"  # kafka.admin.TopicCommand before 3.5
CONFIG_COMMAND = "kafka.admin.ConfigCommand"  # kafka-configs.sh
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
STREAMS_GROUP_COMMAND = "org.apache.kafka.tools.streams.StreamsGroupCommand"  # kafka-streams-groups.sh
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"  # kafka-acls.sh
FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"  # kafka-features.sh
DELEGATION_TOKEN_COMMAND = "org.apache.kafka.tools.DelegationTokenCommand"  # kafka-delegation-tokens.sh

# What kafka-*-perf-test.sh give their JVMs; the G1 flags match the reference broker's. For
# the benchmarks, whose figures must stay representative (tool_command's jvm_args).
MEASURED_JVM = ("-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
# Every JVM the tests start for a tool or a tests/java program: they live seconds and are never
# measured, on 2 shared cores, where C2's compilations, G1's threads and the perf-data file cost
# more CPU than they win back (as tests/spark_conf's for Spark's JVMs).
LIGHT_JVM = ("-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1", "-XX:+UseSerialGC", "-XX:-UsePerfData")
TOOL_JVM = ("-Xmx512m", *LIGHT_JVM)
PROGRAM_JVM = ("-Xmx256m", *LIGHT_JVM)  # program_command's


class JavaToolError(RuntimeError):
    """A Kafka tool failed; ``str()`` includes its command line and output."""

    def __init__(self, message: str, run: ToolRun | None = None) -> None:
        self.run = run
        if run is not None:
            message = (
                f"{message}\n$ {run.command_line()}\n(exit {run.returncode}, {run.seconds:.1f}s)\n"
                f"--- stdout\n{_tail(run.stdout)}\n--- stderr\n{_tail(run.stderr)}"
            )
        super().__init__(message)


def _tail(text: str, limit: int = 6000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


@dataclass(frozen=True)
class ToolRun:
    main_class: str
    args: tuple[str, ...]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    def command_line(self) -> str:
        return " ".join([self.main_class.rsplit(".", 1)[-1], *self.args])


# ---------------------------------------------------------------------------- availability


@functools.cache
def java_available(version: str = KAFKA_VERSION) -> str | None:
    """None when the Java tools can run; otherwise the reason they cannot (for pytest.skip).

    Fetches Kafka on first use (seconds from a warm ~/.m2, about 10 s cold). The answer is
    cached for the process. ``RIVULET_SKIP_JAVA=1`` forces a skip.
    """
    if os.environ.get("RIVULET_SKIP_JAVA"):
        return "RIVULET_SKIP_JAVA is set"
    java = shutil.which("java")
    if java is None:
        return "java not found on PATH"
    try:
        probe = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"java -version failed: {e}"
    if probe.returncode != 0:
        return f"java -version failed: {probe.stderr.strip()[:500]}"
    m = re.search(r'version "(\d+)', probe.stderr)
    if m and int(m.group(1)) < 11:  # Kafka 4 tools need Java 11+, the broker 17+
        return f"Java {m.group(1)} is too old for Apache Kafka {version}"
    if is_fetched(version):
        return None
    try:
        fetch(version)
    except FetchError as e:
        # Maven's own [ERROR] lines say what went wrong (offline, proxy, no such version).
        lines = str(e).splitlines()
        detail = [ln for ln in lines[1:] if ln.startswith("[ERROR]")][:1]  # the rest is boilerplate
        return f"cannot fetch Apache Kafka {version} with Maven: " + " ".join(lines[:1] + detail)[:1500]
    return None


def streams_classpath(version: str = KAFKA_VERSION) -> str:
    """Kafka Streams and what it needs (kafka-clients, RocksDB). No logging backend: see
    :func:`streams_logged_classpath`."""
    return maven_classpath("kafka-streams", ["kafka-streams"], version)


def streams_logged_classpath(version: str = KAFKA_VERSION) -> str:
    """Kafka's own jars first (their log4j2 binding makes the applications' WARN and ERROR lines
    visible), then Kafka Streams'; the two share kafka-clients and slf4j-api at one version."""
    return f"{classpath(version)}:{streams_classpath(version)}"


def tools_log_config(version: str = KAFKA_VERSION) -> Path:
    """The log4j2 configuration of the tools: WARN and above, to stderr."""
    return _tools_log_config(version)


def _tools_log_config(version: str) -> Path:
    # Tools log WARN+ to stderr, keeping stdout for the figures; written atomically since
    # parallel sessions share the cache.
    path = kafka_home(version) / "tools-log4j2.properties"
    if not path.exists():
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        write_log4j2_config(tmp, level="WARN")
        os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------- more of Kafka's jars

_EXTRA_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>dev.rivulet</groupId><artifactId>{name}-reference</artifactId><version>1</version>
<packaging>pom</packaging><dependencies>{dependencies}</dependencies></project>"""


def maven_classpath(name: str, artifacts: Sequence[str], version: str = KAFKA_VERSION) -> str:
    """A ``java -cp`` argument for Kafka's ``artifacts`` (org.apache.kafka artifact ids, such as
    ``kafka-streams``) at ``version`` and what they need, resolved once by Maven into the cache
    beside Kafka's own jars as ``<name>-<version>``. The finished directory appears by rename, so
    a parallel session never sees it half filled; raises JavaToolError when Maven fails."""
    libs = cache_root() / f"{name}-{version}"
    marker = f"{artifacts[0]}-{version}.jar"
    if not (libs / marker).is_file():
        cache_root().mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=libs.name + ".partial-", dir=cache_root()))
        try:
            dependencies = "".join(f"<dependency><groupId>org.apache.kafka</groupId><artifactId>{a}</artifactId>"
                                   f"<version>{version}</version></dependency>" for a in artifacts)
            (scratch / "pom.xml").write_text(_EXTRA_POM.format(name=name, dependencies=dependencies))
            done = subprocess.run(["mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(scratch / "pom.xml"),
                                   "org.apache.maven.plugins:maven-dependency-plugin:copy-dependencies",
                                   f"-DoutputDirectory={scratch / 'libs'}"], capture_output=True, text=True,
                                  timeout=900)
            if done.returncode != 0:
                raise JavaToolError(f"Maven could not resolve {', '.join(artifacts)} {version}:\n"
                                    f"{_tail(done.stdout + done.stderr, 3000)}")
            if not (libs / marker).is_file():
                shutil.rmtree(libs, ignore_errors=True)
                (scratch / "libs").rename(libs)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return str(libs / "*")


# ---------------------------------------------------------------------------- running a tool


def tool_command(main_class: str, args: Sequence[str], *, version: str = KAFKA_VERSION,
                 jvm_args: Sequence[str] = TOOL_JVM) -> list[str]:
    """The command line that runs ``main_class`` (a JVM with ``jvm_args``: the tests' light
    flags unless a benchmark asks for MEASURED_JVM); raises JavaToolError when Java or Kafka's
    jars are unavailable."""
    reason = java_available(version)
    if reason is not None:
        raise JavaToolError(f"Kafka's Java tools are unavailable: {reason}")
    return [
        "java", *jvm_args,
        f"-Dlog4j2.configurationFile={_tools_log_config(version)}",
        "-cp", classpath(version), main_class, *args,
    ]


def run_tool(
    main_class: str,
    args: Sequence[str],
    *,
    timeout: float = 120.0,
    check: bool = True,
    version: str = KAFKA_VERSION,
    jvm_args: Sequence[str] = TOOL_JVM,
) -> ToolRun:
    """``java -cp <cached jars> main_class args...``; raises JavaToolError on non-zero exit.
    With the tests' flags (TOOL_JVM) the JVM maps the tool's classes from its class archive."""
    archive = dump = None
    # Not for a benchmark's MEASURED_JVM (its start-up is measured as it is), nor a source file.
    if tuple(jvm_args) == TOOL_JVM and not main_class.endswith(".java"):
        archive = _class_archive(main_class, version)
        if archive.is_file():
            jvm_args = (*jvm_args, f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off")
        else:
            dump = archive.with_name(f"{archive.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
            jvm_args = (*jvm_args, f"-XX:ArchiveClassesAtExit={dump}", "-Xlog:cds*=off")
    cmd = tool_command(main_class, args, version=version, jvm_args=jvm_args)
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc = None
        out = _text(e.stdout)
        err = _text(e.stderr) + f"\n[killed after {timeout:.0f}s]"
    if dump is not None and archive is not None and dump.exists():
        # Written as the JVM exited; a JVM killed (at the timeout, by a signal) may have left it
        # truncated, which would crash the next JVM that maps it.
        if rc is None or rc < 0:
            dump.unlink()
        else:
            os.replace(dump, archive)
    run = ToolRun(main_class, tuple(args), rc, out, err, time.monotonic() - started)
    if check and rc != 0:
        raise JavaToolError(f"{run.main_class.rsplit('.', 1)[-1]} failed", run)
    return run


def _class_archive(main_class: str, version: str) -> Path:
    """Where the class archive (AppCDS, made by the tool's first run) of ``main_class`` is kept,
    per jars and JVM: a JVM that maps it instead of loading and verifying its classes from the
    jars starts a Kafka tool on about half the CPU (0.4 of 0.8 s here)."""
    folder = cache_root() / "class-archives"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{main_class}-{version}-{_jars_and_jvm(version)}.jsa"


@functools.cache
def _jars_and_jvm(version: str) -> str:
    """A digest of Kafka's jars and the JVM: an archive is valid only with both as they were."""
    jvm = Path(os.path.realpath(shutil.which("java") or "java")).parents[1] / "lib" / "server" / "libjvm.so"
    key = hashlib.sha256(f"{jvm}:{jvm.stat().st_mtime_ns if jvm.exists() else 0}\n".encode())
    for jar in sorted(Path(classpath(version)[:-1]).glob("*.jar")):
        st = jar.stat()
        key.update(f"{jar.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return key.hexdigest()[:16]


# ---------------------------------------------------------------------------- the tests' Java programs


def program_classes(source: Path, cp: str) -> Path:
    """The directory of ``source``'s classes (a program of tests/java or benchmarks/java),
    compiled against ``cp`` once per content of the source, jars of the class path and JDK, in
    the cache beside Kafka's jars. Java's source launcher (``java File.java``) compiled it anew
    at every launch, 1.5 to 3 s of CPU. The finished directory appears by rename, so a parallel
    worker never sees it half written; raises JavaToolError when javac fails."""
    # javac beside the java that runs the classes: its class files are that JDK's version.
    java = shutil.which("java")
    if java is None:
        raise JavaToolError("java not found on PATH")
    javac = Path(os.path.realpath(java)).with_name("javac")
    key = hashlib.sha256(source.read_bytes())
    key.update(str(javac).encode())
    for entry in cp.split(os.pathsep):
        jars = sorted(Path(entry[:-1]).glob("*.jar")) if entry.endswith("*") else [Path(entry)]
        key.update("".join(f"{jar}:{jar.stat().st_size}\n" for jar in jars).encode())
    classes = cache_root() / "java-classes" / f"{source.stem}-{key.hexdigest()[:16]}"
    if (classes / f"{source.stem}.class").is_file():
        return classes
    classes.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{classes.name}.partial-", dir=classes.parent))
    try:
        done = subprocess.run([str(javac), *(f"-J{flag}" for flag in LIGHT_JVM), "-nowarn", "-proc:none",
                               "-d", str(scratch), "-cp", cp, str(source)], capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            raise JavaToolError(f"javac {source.name} failed:\n{_tail(done.stdout + done.stderr, 3000)}")
        try:
            scratch.rename(classes)
        except OSError:  # another worker's came first
            if not (classes / f"{source.stem}.class").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return classes


def program_command(source: Path, args: Sequence[str], *, cp: str | None = None,
                    jvm_args: Sequence[str] = PROGRAM_JVM) -> list[str]:
    """The command line that runs ``source``'s main class (the class the file is named after)
    with ``args``, its classes (program_classes) first on the class path ``cp`` (Kafka's jars by
    default); raises JavaToolError when Java or Kafka's jars are unavailable."""
    reason = java_available()
    if reason is not None:
        raise JavaToolError(f"Kafka's Java client is unavailable: {reason}")
    cp = cp or classpath()
    return ["java", *jvm_args, "-cp", f"{program_classes(source, cp)}{os.pathsep}{cp}", source.stem, *args]


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode(errors="replace")


class _ConfigFile:
    """Client properties in a temp file for --command-config (every tool accepts one)."""

    def __init__(self, props: Mapping[str, object] | None) -> None:
        self.props = dict(props or {})
        self.path: str | None = None

    def __enter__(self) -> list[str]:
        if not self.props:
            return []
        fd, self.path = tempfile.mkstemp(prefix="rivulet-tool-", suffix=".properties")
        with os.fdopen(fd, "w") as f:
            f.writelines(f"{k}={_prop(v)}\n" for k, v in self.props.items())
        return ["--command-config", self.path]

    def __exit__(self, *exc: object) -> None:
        if self.path:
            os.unlink(self.path)


def _prop(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


# ---------------------------------------------------------------------------- ProducerPerformance


@dataclass(frozen=True)
class ProducerPerfResult:
    records: int
    records_per_sec: float
    mb_per_sec: float  # MiB/s of values, as the tool reports it
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: int
    p95_ms: int
    p99_ms: int
    p999_ms: int
    run: ToolRun = field(repr=False)


_PRODUCER_TOTAL = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.",
    re.M,
)


def producer_perf(
    bootstrap: str,
    topic: str,
    *,
    num_records: int = 50_000,
    record_size: int = 100,
    throughput: int = -1,
    acks: str = "all",
    props: Mapping[str, object] | None = None,
    timeout: float = 120.0,
    jvm_args: Sequence[str] = TOOL_JVM,
) -> ProducerPerfResult:
    """kafka-producer-perf-test. Idempotence stays at the client default (on) unless ``props``
    says otherwise. Raises unless every record was acknowledged. ``jvm_args``: MEASURED_JVM for
    figures worth comparing."""
    with _ConfigFile({"acks": acks, **(props or {})}) as cfg:
        run = run_tool(PRODUCER_PERF, [
            "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(num_records),
            "--record-size", str(record_size), "--throughput", str(throughput), *cfg,
        ], timeout=timeout, jvm_args=jvm_args)
    m = _PRODUCER_TOTAL.search(run.stdout)
    if m is None:
        raise JavaToolError("ProducerPerformance printed no summary line", run)
    g = m.groups()
    result = ProducerPerfResult(
        int(g[0]), float(g[1]), float(g[2]), float(g[3]), float(g[4]), int(g[5]), int(g[6]), int(g[7]), int(g[8]), run,
    )
    if result.records != num_records:  # only acknowledged sends are counted
        raise JavaToolError(f"ProducerPerformance: {result.records} of {num_records} records acknowledged", run)
    return result


# ---------------------------------------------------------------------------- ConsumerPerformance


@dataclass(frozen=True)
class ConsumerPerfResult:
    records: int
    mb: float
    mb_per_sec: float
    records_per_sec: float
    rebalance_ms: int  # time to join the group, excluded from the fetch.* figures
    fetch_ms: int
    fetch_mb_per_sec: float
    fetch_records_per_sec: float
    group: str
    run: ToolRun = field(repr=False)


def consumer_perf(
    bootstrap: str,
    topic: str,
    *,
    num_records: int,
    group: str | None = None,
    idle_timeout_ms: int = 10_000,
    props: Mapping[str, object] | None = None,
    require_all: bool = True,
    timeout: float = 120.0,
    jvm_args: Sequence[str] = TOOL_JVM,
) -> ConsumerPerfResult:
    """kafka-consumer-perf-test: subscribes with ``group`` (a fresh one if None), so this needs
    the group coordinator. The tool gives up after ``idle_timeout_ms`` without records and
    still exits 0; with ``require_all`` that shortfall raises."""
    group = group or f"perf-{uuid.uuid4().hex[:8]}"
    with _ConfigFile(props) as cfg:
        run = run_tool(CONSUMER_PERF, [
            "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(num_records),
            "--group", group, "--timeout", str(idle_timeout_ms), *cfg,
        ], timeout=timeout, jvm_args=jvm_args)
    lines = [ln.strip() for ln in run.stdout.splitlines() if ln.strip()]
    try:
        i = next(i for i, ln in enumerate(lines) if ln.startswith("start.time,"))
        header = [h.strip() for h in lines[i].split(",")]
        # A timeout WARNING line may sit between the header and the figures.
        values = next(v for ln in lines[i + 1:] if len(v := [x.strip() for x in ln.split(",")]) == len(header))
        row = dict(zip(header, values, strict=True))
        result = ConsumerPerfResult(
            records=int(row["data.consumed.in.nMsg"]),
            mb=float(row["data.consumed.in.MB"]),
            mb_per_sec=float(row["MB.sec"]),
            records_per_sec=float(row["nMsg.sec"]),
            rebalance_ms=int(row["rebalance.time.ms"]),
            fetch_ms=int(row["fetch.time.ms"]),
            fetch_mb_per_sec=float(row["fetch.MB.sec"]),
            fetch_records_per_sec=float(row["fetch.nMsg.sec"]),
            group=group,
            run=run,
        )
    except (StopIteration, IndexError, KeyError, ValueError) as e:
        raise JavaToolError(f"ConsumerPerformance output not understood ({e!r})", run) from None
    if require_all and result.records < num_records:
        raise JavaToolError(f"ConsumerPerformance: consumed {result.records} of {num_records} records", run)
    return result


# ---------------------------------------------------------------------------- EndToEndLatency


@dataclass(frozen=True)
class EndToEndLatencyResult:
    records: int
    avg_ms: float
    p50_ms: int  # the tool truncates each sample to whole milliseconds
    p99_ms: int
    p999_ms: int
    run: ToolRun = field(repr=False)


def end_to_end_latency(
    bootstrap: str,
    topic: str,
    *,
    num_records: int = 1000,
    record_size: int = 100,
    acks: str = "all",
    props: Mapping[str, object] | None = None,
    timeout: float = 120.0,
    jvm_args: Sequence[str] = TOOL_JVM,
) -> EndToEndLatencyResult:
    """kafka-e2e-latency: send one record synchronously, poll it back, repeat. The consumer is
    assigned (not subscribed) but commits its offsets under a group at the end; the tool
    creates the topic when Metadata does not list it."""
    with _ConfigFile(props) as cfg:
        run = run_tool(END_TO_END_LATENCY, [
            "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(num_records),
            "--producer-acks", acks, "--record-size", str(record_size), *cfg,
        ], timeout=timeout, jvm_args=jvm_args)
    avg = re.search(r"^Avg latency: ([\d.]+) ms", run.stdout, re.M)
    pct = re.search(r"^Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)", run.stdout, re.M)
    if avg is None or pct is None:
        raise JavaToolError("EndToEndLatency printed no summary", run)
    return EndToEndLatencyResult(num_records, float(avg.group(1)), *(int(x) for x in pct.groups()), run=run)


# ---------------------------------------------------------------------------- ConfigCommand


def config_command(bootstrap: str, args: Sequence[str], *, admin_props: Mapping[str, object] | None = None,
                   timeout: float = 60.0) -> ToolRun:
    """kafka-configs with ``args`` (--alter/--describe, --entity-type ...); raises JavaToolError
    when the tool fails."""
    with _ConfigFile(admin_props) as cfg:
        return run_tool(CONFIG_COMMAND, ["--bootstrap-server", bootstrap, *args, *cfg], timeout=timeout)


def acl_command(bootstrap: str, args: Sequence[str], *, admin_props: Mapping[str, object] | None = None,
                timeout: float = 60.0) -> ToolRun:
    """kafka-acls with ``args`` (--add/--list/--remove, --topic ...); raises JavaToolError when
    the tool fails."""
    with _ConfigFile(admin_props) as cfg:
        return run_tool(ACL_COMMAND, ["--bootstrap-server", bootstrap, *args, *cfg], timeout=timeout)


def feature_command(bootstrap: str, args: Sequence[str], *, check: bool = True, timeout: float = 60.0) -> ToolRun:
    """kafka-features with ``args`` (describe, upgrade, downgrade ...)."""
    return run_tool(FEATURE_COMMAND, ["--bootstrap-server", bootstrap, *args], check=check, timeout=timeout)


@dataclass(frozen=True)
class FeatureDescription:
    supported_min: int
    supported_max: int
    finalized: int
    epoch: int


def describe_features(bootstrap: str, *, timeout: float = 60.0) -> dict[str, FeatureDescription]:
    """kafka-features describe, parsed: feature -> its supported range, finalized level, epoch."""
    run = feature_command(bootstrap, ["describe"], timeout=timeout)
    out = {}
    for line in run.stdout.splitlines():
        f = dict(re.findall(r"(\w+):\s+(\S+)", line))
        if "Feature" in f and "FinalizedVersionLevel" in f:
            if not f["SupportedMaxVersion"].lstrip("-").isdigit():  # metadata.version prints names (4.3-IV0)
                continue
            out[f["Feature"]] = FeatureDescription(int(f["SupportedMinVersion"]), int(f["SupportedMaxVersion"]),
                                                   int(f["FinalizedVersionLevel"]), int(f["Epoch"]))
    if not out:
        raise JavaToolError("FeatureCommand describe output not understood", run)
    return out


def delegation_token_command(bootstrap: str, args: Sequence[str], command_config: str, *, check: bool = True,
                             timeout: float = 60.0) -> ToolRun:
    """kafka-delegation-tokens with ``args`` (--create, --describe, --renew, --expire), as the
    client that ``command_config`` (a properties file) makes."""
    return run_tool(DELEGATION_TOKEN_COMMAND, ["--bootstrap-server", bootstrap, "--command-config", command_config,
                                               *args], check=check, timeout=timeout)


# ---------------------------------------------------------------------------- TopicCommand


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int | None  # None when the tool prints "none"
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    partition_count: int
    replication_factor: int
    configs: dict[str, str]  # non-default configs only, as the tool shows them
    partitions: list[PartitionDescription]


def create_topic(
    bootstrap: str,
    topic: str,
    *,
    partitions: int = 1,
    replication_factor: int = 1,
    configs: Mapping[str, object] | None = None,
    if_not_exists: bool = False,
    admin_props: Mapping[str, object] | None = None,
    timeout: float = 60.0,
) -> ToolRun:
    """kafka-topics --create; raises JavaToolError unless the tool reports success."""
    args = ["--bootstrap-server", bootstrap, "--create", "--topic", topic,
            "--partitions", str(partitions), "--replication-factor", str(replication_factor)]
    for k, v in (configs or {}).items():
        args += ["--config", f"{k}={_prop(v)}"]
    if if_not_exists:
        args.append("--if-not-exists")
    with _ConfigFile(admin_props) as cfg:
        run = run_tool(TOPIC_COMMAND, args + cfg, timeout=timeout)
    if not if_not_exists and f"Created topic {topic}." not in run.stdout:
        raise JavaToolError("TopicCommand did not confirm the creation", run)
    return run


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def _fields(line: str) -> dict[str, str]:
    # "Key: value" pairs separated by tabs; values may be empty ("Elr: ").
    out = {}
    for part in line.strip("\n").split("\t"):
        k, sep, v = part.partition(":")
        if sep and k.strip():
            out[k.strip()] = v.strip()
    return out


def parse_topic_describe(text: str) -> dict[str, TopicDescription]:
    """Parse ``kafka-topics --describe`` output into descriptions keyed by topic name."""
    topics: dict[str, TopicDescription] = {}
    for line in text.splitlines():
        if line.startswith("Topic:"):
            f = _fields(line)
            configs = dict(kv.split("=", 1) for kv in f.get("Configs", "").split(",") if "=" in kv)
            topics[f["Topic"]] = TopicDescription(
                f["Topic"], f.get("TopicId", ""), int(f["PartitionCount"]), int(f["ReplicationFactor"]), configs, [],
            )
        elif line.startswith("\tTopic:"):
            f = _fields(line)
            leader = f.get("Leader", "none")
            topics[f["Topic"]].partitions.append(PartitionDescription(
                int(f["Partition"]), None if leader in ("none", "-1", "") else int(leader),
                _ints(f.get("Replicas", "")), _ints(f.get("Isr", "")),
            ))
    return topics


def describe_topics(
    bootstrap: str,
    topics: str | Iterable[str] | None = None,
    *,
    admin_props: Mapping[str, object] | None = None,
    timeout: float = 60.0,
) -> dict[str, TopicDescription]:
    """kafka-topics --describe for one topic, several (as a regex alternation), or all."""
    args = ["--bootstrap-server", bootstrap, "--describe"]
    if topics is not None:
        names = [topics] if isinstance(topics, str) else list(topics)
        args += ["--topic", "|".join(re.escape(n) for n in names) if len(names) > 1 else names[0]]
    with _ConfigFile(admin_props) as cfg:
        run = run_tool(TOPIC_COMMAND, args + cfg, timeout=timeout)
    try:
        return parse_topic_describe(run.stdout)
    except (KeyError, ValueError) as e:
        raise JavaToolError(f"TopicCommand --describe output not understood ({e!r})", run) from None


# ---------------------------------------------------------------------------- ConsumerGroupCommand


@dataclass(frozen=True)
class GroupOffset:
    group: str
    topic: str
    partition: int
    current_offset: int | None  # None: the group has no committed offset ("-")
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None  # None when no active member owns the partition
    host: str | None
    client_id: str | None


def _tables(text: str) -> list[list[dict[str, str]]]:
    """Whitespace-aligned tables (header line starting with GROUP, rows until a blank line)."""
    tables: list[list[dict[str, str]]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            header = None
        elif line.startswith("GROUP "):
            header = line.split()
            tables.append([])
        elif header is not None:
            cells = line.split()
            if len(cells) != len(header):
                raise ValueError(f"row does not match header {header}: {line!r}")
            tables[-1].append(dict(zip(header, cells)))
    return tables


def _opt(v: str) -> str | None:
    return None if v == "-" else v


def _opt_int(v: str) -> int | None:
    return None if v == "-" else int(v)


def _run_group_command(args: list[str], admin_props: Mapping[str, object] | None, timeout: float) -> ToolRun:
    with _ConfigFile(admin_props) as cfg:
        run = run_tool(CONSUMER_GROUP_COMMAND, args + cfg, timeout=timeout)
    # This tool reports most failures as "Error: ..." on stdout and still exits 0.
    if any(ln.startswith("Error:") for ln in run.stdout.splitlines()):
        raise JavaToolError("ConsumerGroupCommand reported an error", run)
    return run


def share_group_command(bootstrap: str, args: Sequence[str], *, timeout: float = 60.0) -> list[dict[str, str]]:
    """kafka-share-groups (the Java Admin's share-group calls) with ``args``: the rows of the
    tables it prints (headed GROUP). Like kafka-consumer-groups it reports failures as "Error:"
    lines and exits 0, which raise here."""
    run = run_tool(SHARE_GROUP_COMMAND, ["--bootstrap-server", bootstrap, *args], timeout=timeout)
    if "Error:" in run.stdout:
        raise JavaToolError("ShareGroupCommand reported an error", run)
    return [r for t in _tables(run.stdout) for r in t]


def streams_group_command(bootstrap: str, args: Sequence[str], *, timeout: float = 60.0) -> list[dict[str, str]]:
    """kafka-streams-groups with ``args``: the rows of the tables it prints (headed GROUP);
    "Error:" lines, which it reports with exit code 0, raise."""
    run = run_tool(STREAMS_GROUP_COMMAND, ["--bootstrap-server", bootstrap, *args], timeout=timeout)
    if "Error:" in run.stdout or run.returncode != 0:
        raise JavaToolError("StreamsGroupCommand reported an error", run)
    return [r for t in _tables(run.stdout) for r in t]


def describe_group(
    bootstrap: str,
    group: str,
    *,
    admin_props: Mapping[str, object] | None = None,
    timeout: float = 60.0,
) -> list[GroupOffset]:
    """kafka-consumer-groups --describe --group: committed offset, log end and lag per partition."""
    run = _run_group_command(["--bootstrap-server", bootstrap, "--describe", "--group", group], admin_props, timeout)
    try:
        rows = [r for t in _tables(run.stdout) for r in t]
        return sorted(
            (GroupOffset(
                r["GROUP"], r["TOPIC"], int(r["PARTITION"]), _opt_int(r["CURRENT-OFFSET"]),
                _opt_int(r["LOG-END-OFFSET"]), _opt_int(r["LAG"]), _opt(r["CONSUMER-ID"]),
                _opt(r["HOST"]), _opt(r["CLIENT-ID"]),
            ) for r in rows),
            key=lambda o: (o.topic, o.partition),
        )
    except (KeyError, ValueError) as e:
        raise JavaToolError(f"ConsumerGroupCommand --describe output not understood ({e!r})", run) from None


def list_groups(
    bootstrap: str, *, admin_props: Mapping[str, object] | None = None, timeout: float = 60.0
) -> list[str]:
    run = _run_group_command(["--bootstrap-server", bootstrap, "--list"], admin_props, timeout)
    return sorted(ln.strip() for ln in run.stdout.splitlines() if ln.strip())


def reset_offsets(
    bootstrap: str,
    group: str,
    topic: str,
    *,
    to: str | int = "earliest",
    partitions: Iterable[int] | None = None,
    execute: bool = True,
    admin_props: Mapping[str, object] | None = None,
    timeout: float = 60.0,
) -> dict[tuple[str, int], int]:
    """kafka-consumer-groups --reset-offsets; ``to`` is "earliest", "latest" or an offset.

    The group must have no active members. Returns the new offset per (topic, partition);
    with ``execute=False`` it is a dry run that only reports them.
    """
    if to == "earliest":
        target = ["--to-earliest"]
    elif to == "latest":
        target = ["--to-latest"]
    elif isinstance(to, int):
        target = ["--to-offset", str(to)]
    else:
        raise ValueError(f"to must be 'earliest', 'latest' or an int, not {to!r}")
    spec = topic if partitions is None else f"{topic}:{','.join(str(p) for p in partitions)}"
    args = ["--bootstrap-server", bootstrap, "--reset-offsets", "--group", group, "--topic", spec, *target,
            "--execute" if execute else "--dry-run"]
    run = _run_group_command(args, admin_props, timeout)
    try:
        rows = [r for t in _tables(run.stdout) for r in t]
        result = {(r["TOPIC"], int(r["PARTITION"])): int(r["NEW-OFFSET"]) for r in rows}
    except (KeyError, ValueError) as e:
        raise JavaToolError(f"ConsumerGroupCommand --reset-offsets output not understood ({e!r})", run) from None
    if not result:
        raise JavaToolError("ConsumerGroupCommand --reset-offsets reset nothing", run)
    return result
