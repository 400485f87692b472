"""The schema registry's cost: latency of a register (each a new, compatible version: the
compatibility check, the acks=all write to _schemas and its replay) and of a look-up by id
(uncached: a new client each time), and a producer's records/s serializing with
confluent-kafka's AvroSerializer through the registry against without a registry (fastavro's
schemaless writer, the same bytes less the 5-byte header).

    python -m benchmarks.schema_registry               # starts its own broker with a registry
    python -m benchmarks.schema_registry --records 200000

docs/performance.md records the results.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time

import fastavro
import httpx
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from rivulet.testing import BrokerProcess, free_port

BASE = {"type": "record", "name": "Reading", "fields": [{"name": "sensor", "type": "string"},
                                                       {"name": "value", "type": "double"}]}


def version(n: int) -> str:
    extra = [{"name": f"x{i}", "type": "int", "default": 0} for i in range(n)]
    return json.dumps({**BASE, "fields": BASE["fields"] + extra})


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * p))]


def line(name: str, xs: list[float]) -> str:
    return f"| {name} | {statistics.median(xs):.1f} | {pct(xs, 0.99):.1f} | {max(xs):.1f} |"


def produce_rate(bootstrap: str, topic: str, serialize, records: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    ctx = SerializationContext(topic, MessageField.VALUE)
    t0 = time.perf_counter()
    for i in range(records):
        value = serialize({"sensor": "s", "value": float(i)}, ctx)
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(60)
    return records / (time.perf_counter() - t0)


ADMIN, READER = ("admin", "admin-secret"), ("sam", "sam-secret")
AUTH = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret";',
        "schema.registry.authentication.method": "BASIC"}


def add_reader(bootstrap: str) -> None:
    """READER as a SCRAM user allowed to READ the topic bench (so its subjects)."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            READER[0], ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), READER[1].encode())]).values():
        f.result(30)
    for f in admin.create_acls([AclBinding(ResourceType.TOPIC, "bench", ResourcePatternType.LITERAL,
                                           f"User:{READER[0]}", "*", AclOperation.READ,
                                           AclPermissionType.ALLOW)]).values():
        f.result(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--registers", type=int, default=200)
    ap.add_argument("--lookups", type=int, default=500)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--auth", action="store_true", help="HTTP basic authentication and ACLs: registers as a PLAIN "
                    "super user, looks up as a SCRAM user with a READ ACL on the subject's topic")
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    overrides = {"schema.registry.listeners": url}
    if args.auth:
        overrides.update(AUTH)
    b = BrokerProcess(overrides)
    if args.auth:  # PLAIN's JAAS users on a SASL listener of their own
        b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{free_port()}"
    with b:
        if args.auth:
            add_reader(b.bootstrap)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/subjects", auth=ADMIN if args.auth else None).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
        conf = {"url": url, **({"basic.auth.user.info": ":".join(ADMIN)} if args.auth else {})}
        client = SchemaRegistryClient(conf)
        reg = []
        for n in range(args.registers):
            t0 = time.perf_counter()
            client.register_schema("bench-value", Schema(version(n), "AVRO"))
            reg.append((time.perf_counter() - t0) * 1000)
        ids = list(range(1, args.registers + 1))
        look = []
        with httpx.Client(auth=READER if args.auth else None) as http:
            for i in range(args.lookups):
                t0 = time.perf_counter()
                r = http.get(f"{url}/schemas/ids/{ids[i % len(ids)]}")
                look.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200
        print("| request | p50 ms | p99 ms | max ms |\n| --- | ---: | ---: | ---: |")
        print(line(f"register (a new version; {args.registers})", reg))
        print(line(f"GET /schemas/ids/{{id}} ({args.lookups})", look))

        parsed = fastavro.parse_schema(BASE)

        def plain(value, _ctx) -> bytes:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, value)
            return buf.getvalue()
        with_registry = AvroSerializer(SchemaRegistryClient(conf), json.dumps(BASE))
        without = produce_rate(b.bootstrap, "bench-plain", plain, args.records)
        through = produce_rate(b.bootstrap, "bench-registry", with_registry, args.records)
        print(f"\nproducer, {args.records} records: without a registry {without:,.0f} records/s, "
              f"AvroSerializer through the registry {through:,.0f} records/s")


if __name__ == "__main__":
    main()
