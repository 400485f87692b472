"""The CLI as a user meets it: one way to name the broker, and failures that are one line."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from rivulet import __version__
from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration

DOWN = "127.0.0.1:1"  # nothing listens there


def rivulet(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "rivulet", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout, env=full_env)


def one_line_failure(r: subprocess.CompletedProcess, expected: str, code: int = 1) -> None:
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [expected], r.stderr


@pytest.fixture(scope="module")
def strict_broker():
    """A broker that does not create topics on a producer's or consumer's request."""
    b = BrokerProcess({"auto.create.topics.enable": "false"}).start()
    yield b
    b.cleanup()


def new_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    t = f"cli-{uuid.uuid4().hex[:8]}"
    r = rivulet("topics", "create", "-b", broker.bootstrap, "--topic", t, "--partitions", str(partitions))
    assert r.returncode == 0, r.stderr
    return t


# ---------------------------------------------------------------- naming the broker

def test_every_client_subcommand_takes_b_env_and_command_config(strict_broker, tmp_path):
    t = new_topic(strict_broker)
    env = {"RIVULET_BOOTSTRAP": strict_broker.bootstrap}
    assert t in rivulet("topics", "list", env=env).stdout.split()
    assert rivulet("groups", "list", env=env).returncode == 0
    cfg = tmp_path / "client.properties"
    cfg.write_text(f"# a client config as Kafka's tools take it\nbootstrap.servers {strict_broker.bootstrap}\n"
                   "request.timeout.ms = 20000\n")
    assert t in rivulet("topics", "list", "--command-config", str(cfg)).stdout.split()
    r = rivulet("produce", "--command-config", str(cfg), "-t", t, "-q", stdin="a\nb\n")
    assert r.returncode == 0, r.stderr
    r = rivulet("consume", "-b", strict_broker.bootstrap, "-t", t, "-e", "-q")
    assert r.stdout.split() == ["a", "b"], r.stderr
    # -b wins over the environment
    r = rivulet("groups", "list", "-b", strict_broker.bootstrap, env={"RIVULET_BOOTSTRAP": DOWN})
    assert r.returncode == 0, r.stderr
    for sub in (["topics", "list"], ["groups", "list"], ["produce", "-t", t], ["consume", "-t", t]):
        h = rivulet(*sub, "--help").stdout
        assert "--bootstrap-server" in h and "--command-config" in h and "--debug" in h, sub


def test_missing_command_config_is_one_line(tmp_path):
    missing = tmp_path / "nope.properties"
    one_line_failure(rivulet("topics", "list", "--command-config", str(missing)),
                     f"rivulet topics list: cannot read --command-config {missing}: No such file or directory", 2)


def test_version():
    r = rivulet("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"rivulet {__version__}"


# ---------------------------------------------------------------- fast, clear failures

@pytest.mark.parametrize("cmd", [["topics", "list"], ["topics", "describe"], ["groups", "list"],
                                 ["produce", "-t", "x"], ["consume", "-t", "x"], ["consume", "-G", "g", "-t", "x"]])
def test_broker_down_is_one_line(cmd):
    r = rivulet(*cmd, "-b", DOWN, stdin="hello\n", timeout=30)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rivulet {cmd[0]}") and f"cannot reach {DOWN}" in lines[0]


@pytest.fixture(scope="module")
def http_port():
    """A real HTTP server on a loopback port (Python's, which answers a binary request only at its end)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def silent_port():
    """A listener that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    yield listener.getsockname()[1]
    listener.close()


@pytest.mark.parametrize("cmd", [["topics", "list"], ["topics", "delete", "--topic", "t"], ["groups", "list"],
                                 ["produce", "-t", "x"], ["consume", "-t", "x"], ["cluster", "info"]])
def test_a_port_that_is_not_kafka_is_one_line(cmd, http_port, silent_port):
    r = rivulet(*cmd, "-b", f"127.0.0.1:{http_port}", stdin="hello\n", timeout=25)
    one_line_failure(r, f"rivulet {' '.join(cmd[:2] if cmd[0] in ('topics', 'groups', 'cluster') else cmd[:1])}: "
                        f"127.0.0.1:{http_port} is not a Kafka broker: it answered like an HTTP server "
                        "(with an HTML page)")
    # A peer that accepts and keeps silent: the first request times out, and says which it was.
    r = rivulet(*cmd, "-b", f"127.0.0.1:{silent_port}", stdin="hello\n", timeout=25)
    assert r.returncode == 1 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"cannot reach 127.0.0.1:{silent_port}" in r.stderr
    assert "no answer to ApiVersions within 5 s" in r.stderr, r.stderr


def test_console_refuses_a_port_that_is_not_kafka(http_port):
    r = rivulet("console", "-b", f"127.0.0.1:{http_port}", "--port", "0", timeout=25)
    one_line_failure(r, f"rivulet console: 127.0.0.1:{http_port} is not a Kafka broker: it answered like an "
                        "HTTP server (with an HTML page)")


def test_missing_topic_is_named(strict_broker):
    for action, extra in (("delete", []), ("alter", ["--partitions", "3"]), ("alter", ["--config", "retention.ms=1"])):
        one_line_failure(rivulet("topics", action, "-b", strict_broker.bootstrap, "--topic", "nope", *extra),
                         f"rivulet topics {action}: Topic 'nope' does not exist as expected")


def test_banner_names_the_bound_and_the_advertised_address(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "rivulet", "broker",
                             "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                             "--override", "advertised.listeners=PLAINTEXT://broker.example.com:19092",
                             "--override", f"log.dirs={tmp_path}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        banner = proc.stdout.readline()  # type: ignore[union-attr]
    finally:
        proc.terminate()
        proc.wait(60)
    assert banner.startswith("Rivulet broker 1 listening on 127.0.0.1:"), banner
    bound_port = int(banner.split("127.0.0.1:", 1)[1].split(",", 1)[0])
    assert bound_port > 0
    assert ", advertised as broker.example.com:19092 (PLAINTEXT; cluster " in banner, banner


def test_debug_shows_the_traceback():
    r = rivulet("topics", "list", "-b", DOWN, "--debug", timeout=30)
    assert r.returncode == 1 and "Traceback" in r.stderr


def test_describe_missing_topic_fails(strict_broker):
    one_line_failure(rivulet("topics", "describe", "-b", strict_broker.bootstrap, "--topic", "nope"),
                     "rivulet topics describe: Topic 'nope' does not exist as expected")


def test_group_consume_of_missing_topic_fails(strict_broker):
    one_line_failure(rivulet("consume", "-b", strict_broker.bootstrap, "-G", "g", "-t", "nope"),
                     "rivulet consume: Subscribed topic not available: nope: Broker: Unknown topic or partition")


def test_produce_to_missing_topic_fails(strict_broker):
    one_line_failure(rivulet("produce", "-b", strict_broker.bootstrap, "-t", "nope", stdin="x\n"),
                     "rivulet produce: Topic 'nope' not present in metadata: Broker: Unknown topic or partition")


def test_describe_into_a_closed_pipe_is_quiet(strict_broker):
    for _ in range(3):
        new_topic(strict_broker, partitions=8)
    r = subprocess.run(f"'{sys.executable}' -m rivulet topics describe -b {strict_broker.bootstrap} | head -3",
                       shell=True, capture_output=True, text=True, timeout=60)
    assert len(r.stdout.splitlines()) == 3
    assert r.stderr == "", r.stderr


def _terminal_sigint() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("group", [False, True])
def test_ctrl_c_ends_consume_quietly(strict_broker, group):
    t = new_topic(strict_broker)
    cmd = [sys.executable, "-m", "rivulet", "consume", "-b", strict_broker.bootstrap, "-t", t, "-q"]
    if group:
        cmd += ["-G", f"g-{uuid.uuid4().hex[:6]}"]
    assert rivulet("produce", "-b", strict_broker.bootstrap, "-t", t, "-q", stdin="ready\n").returncode == 0
    # As from a terminal: SIGINT neither blocked nor ignored. A child inherits both from this
    # process, and on CI's side-by-side workers the consumer did not see the signal at all.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_terminal_sigint)
    try:
        # In its poll loop once it has printed the record (a fixed sleep was too short under load).
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        status = Path(f"/proc/{p.pid}/status").read_text()
        signals = [line for line in status.splitlines() if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:  # never leave a group member behind for the next test
            p.kill()
            p.wait()
    assert p.returncode == 130, (err, signals)
    assert err == "", err


# ---------------------------------------------------------------- commits what it printed

def test_group_consume_commits_only_what_it_printed(strict_broker):
    t = new_topic(strict_broker)
    r = rivulet("produce", "-b", strict_broker.bootstrap, "-t", t, "-q", stdin="".join(f"r{i}\n" for i in range(50)))
    assert r.returncode == 0, r.stderr
    g = f"g-{uuid.uuid4().hex[:6]}"
    r = rivulet("consume", "-b", strict_broker.bootstrap, "-t", t, "-G", g, "-c", "1")
    assert r.returncode == 0 and r.stdout == "r0\n", r.stderr
    d = rivulet("groups", "describe", "-b", strict_broker.bootstrap, "--group", g)
    row = next(line.split() for line in d.stdout.splitlines() if line.startswith(g))
    assert row[1:6] == [t, "0", "1", "50", "49"], d.stdout
    r = rivulet("consume", "-b", strict_broker.bootstrap, "-t", t, "-G", g, "-c", "2")
    assert r.stdout == "r1\nr2\n", r.stderr


# ---------------------------------------------------------------- kcat's JSON envelope

def test_consume_json_envelope(strict_broker):
    import json
    t = new_topic(strict_broker)
    r = rivulet("produce", "-b", strict_broker.bootstrap, "-t", t, "-K", ":", "-H", "h1=x", "-q",
                stdin="k1:v1\nnokey\n")
    assert r.returncode == 0, r.stderr
    r = rivulet("consume", "-b", strict_broker.bootstrap, "-t", t, "-e", "-q", "-J")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    got = [json.loads(line) for line in lines]
    assert [list(g) for g in got] == [["topic", "partition", "offset", "tstype", "ts", "broker", "headers", "key",
                                      "payload"]] * 2
    assert [(g["offset"], g["key"], g["payload"], g["headers"], g["tstype"], g["broker"]) for g in got] == [
        (0, "k1", "v1", ["h1", "x"], "create", 1), (1, None, "nokey", ["h1", "x"], "create", 1)]
    assert lines[0].startswith(f'{{"topic":"{t}","partition":0,"offset":0,"tstype":"create","ts":')


# ---------------------------------------------------------------- groups reset-offsets, every way

def test_groups_reset_offsets_ways(strict_broker, tmp_path):
    b = strict_broker.bootstrap
    t = new_topic(strict_broker)
    assert rivulet("produce", "-b", b, "-t", t, "-q", stdin="".join(f"r{i}\n" for i in range(10))).returncode == 0
    g = f"g-{uuid.uuid4().hex[:6]}"
    assert rivulet("consume", "-b", b, "-t", t, "-G", g, "-c", "4").stdout.split() == ["r0", "r1", "r2", "r3"]

    def reset(*how: str, group: tuple[str, ...] = ("--group", g)) -> subprocess.CompletedProcess:
        r = rivulet("groups", "reset-offsets", "-b", b, *group, "--topic", t, *how)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        return r

    assert reset("--shift-by", "-2", "--execute", "--export").stdout == f"{t},0,2\n"
    assert reset("--to-current", "--dry-run", "--export").stdout == f"{t},0,2\n"
    assert reset("--shift-by", "100", "--dry-run", "--export").stdout == f"{t},0,10\n"  # clamped to the end
    assert reset("--by-duration", "PT1H", "--dry-run", "--export").stdout == f"{t},0,0\n"
    plan = tmp_path / "offsets.csv"
    plan.write_text(f"{t},0,7\n")
    r = rivulet("groups", "reset-offsets", "-b", b, "--group", g, "--from-file", str(plan), "--execute", "--export")
    assert r.returncode == 0 and r.stdout == f"{t},0,7\n", r.stderr
    assert rivulet("consume", "-b", b, "-t", t, "-G", g, "-c", "1").stdout == "r7\n"
    everyone = reset("--to-latest", "--dry-run", "--export", group=("--all-groups",)).stdout.splitlines()
    assert f"{g},{t},0,10" in everyone
    fresh = f"g-{uuid.uuid4().hex[:6]}"
    r = rivulet("groups", "reset-offsets", "-b", b, "--group", fresh, "--topic", t, "--shift-by", "1", "--execute")
    one_line_failure(r, f"rivulet groups reset-offsets: Cannot shift offset for partition {t}-0 since there is no "
                        "current committed offset")
    one_line_failure(rivulet("groups", "reset-offsets", "-b", b, "--group", g, "--topic", t, "--by-duration", "1h"),
                     "rivulet groups reset-offsets: --by-duration: '1h' is not a duration like P1DT2H3M4.5S", 2)


def test_groups_delete_offsets(strict_broker):
    b = strict_broker.bootstrap
    t = new_topic(strict_broker, partitions=2)
    for p in ("0", "1"):
        assert rivulet("produce", "-b", b, "-t", t, "-p", p, "-q", stdin="a\nb\n").returncode == 0
    g = f"g-{uuid.uuid4().hex[:6]}"
    assert len(rivulet("consume", "-b", b, "-t", t, "-G", g, "-c", "4").stdout.split()) == 4

    def committed() -> list[str]:
        out = rivulet("groups", "describe", "-b", b, "--group", g).stdout
        return sorted(line.split()[2] for line in out.splitlines() if t in line.split()[1:2])

    assert committed() == ["0", "1"]
    r = rivulet("groups", "delete-offsets", "-b", b, "--group", g, "--topic", f"{t}:1")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.split() == ["TOPIC", "PARTITION", "STATUS", t, "1", "Successful"]
    assert committed() == ["0"]
    r = rivulet("groups", "delete-offsets", "-b", b, "--group", g, "--topic", t)  # every partition of it
    assert r.returncode == 0 and r.stdout.split()[3:] == [t, "0", "Successful", t, "1", "Successful"], r.stdout
    assert committed() == []
    one_line_failure(rivulet("groups", "delete-offsets", "-b", b, "--group", "no-such-group", "--topic", t),
                     "rivulet groups delete-offsets: cannot delete offsets: group 'no-such-group' does not exist")
    one_line_failure(rivulet("groups", "delete-offsets", "-b", b, "--group", g),
                     "rivulet groups delete-offsets: --topic is required", 2)


# ---------------------------------------------------------------- cluster info, configs, offsets, delete-records

def test_cluster_configs_offsets_and_delete_records(strict_broker):
    b = strict_broker.bootstrap
    t = new_topic(strict_broker, partitions=2)
    assert rivulet("produce", "-b", b, "-t", t, "-p", "0", "-q", stdin="".join(f"r{i}\n" for i in range(10))
                   ).returncode == 0
    info = rivulet("cluster", "info", "-b", b)
    assert info.returncode == 0 and "BROKERS" in info.stdout and "127.0.0.1" in info.stdout, info.stderr

    def table(*args: str) -> list[list[str]]:
        r = rivulet(*args, "-b", b)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        return [line.split() for line in r.stdout.splitlines()[1:]]

    assert table("offsets", "get", "--topic", t) == [[t, "0", "0", "10"], [t, "1", "0", "0"]]
    assert table("delete-records", "--topic", t, "--partition", "0", "--offset", "4") == [[t, "0", "4"]]
    assert table("offsets", "get", "--topic", t)[0] == [t, "0", "4", "10"]
    assert rivulet("configs", "alter", "-b", b, "--entity-type", "topics", "--entity-name", t,
                   "--set", "retention.ms=3600000").returncode == 0
    # min.insync.replicas comes from the cluster level (Kafka 4.1+), not a default: listed as kafka-configs does
    assert table("configs", "describe", "--entity-type", "topics", "--entity-name", t) == [
        ["min.insync.replicas", "1", "DYNAMIC_DEFAULT_BROKER_CONFIG"], ["retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"]]
    defaults = table("configs", "describe", "--entity-type", "topics", "--entity-name", t, "--all")
    assert ["cleanup.policy", "delete", "DEFAULT_CONFIG"] in defaults
    broker_cfg = table("configs", "describe", "--entity-type", "brokers", "--all")
    assert ["auto.create.topics.enable", "false"] in [row[:2] for row in broker_cfg]
    default = ("--entity-type", "brokers", "--entity-default")
    done = rivulet("configs", "alter", "-b", b, *default, "--set", "max.connections.per.ip=1000")
    assert done.returncode == 0 and "default broker" in done.stdout, done.stderr
    cluster_min_isr = ["min.insync.replicas", "1", "DYNAMIC_DEFAULT_BROKER_CONFIG"]  # Kafka 4.1+ (KIP-966)
    assert table("configs", "describe", *default) == [
        ["max.connections.per.ip", "1000", "DYNAMIC_DEFAULT_BROKER_CONFIG"], cluster_min_isr]
    assert rivulet("configs", "alter", "-b", b, *default, "--delete", "max.connections.per.ip").returncode == 0
    assert table("configs", "describe", *default) == [cluster_min_isr]
    one_line_failure(rivulet("configs", "describe", "-b", b, "--entity-type", "topics", "--entity-name", "nope"),
                     "rivulet configs describe: UNKNOWN_TOPIC_OR_PARTITION")
    down = rivulet("offsets", "get", "-b", DOWN, "--topic", t)
    assert down.returncode == 1 and "Traceback" not in down.stderr
    assert len(down.stderr.splitlines()) == 1 and down.stderr.startswith(f"rivulet offsets get: cannot reach {DOWN}")
