"""The schema registry on three brokers: every broker serves the API, one writes (elected in
ZooKeeper) and the others forward to it; the writer killed with kill -9, another takes over
from the topic and ids go on without reuse."""

from __future__ import annotations

import json

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from rivulet.testing import free_port
from tests.cluster import ZkCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def schema(n: int) -> Schema:
    fields = [{"name": f"f{i}", "type": "int", "default": 0} for i in range(n)]
    return Schema(json.dumps({"type": "record", "name": "R", "fields": fields}), "AVRO")


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/subjects", timeout=30).status_code == 200
    except httpx.TransportError:
        return False


def test_writes_through_any_broker_and_the_writer_killed(zk_connect):
    cluster = ZkCluster(zk_connect)
    urls: dict[int, str] = {}
    try:
        for i in (1, 2, 3):
            urls[i] = f"http://127.0.0.1:{free_port()}"
            cluster.start(i, **{"schema.registry.listeners": urls[i]})
        cluster.wait_for_brokers([1, 2, 3])
        for url in urls.values():
            eventually(lambda url=url: _answers(url), 90, f"the registry at {url}")
        ids = []
        # Each broker takes a registration: the followers forward theirs to the writer.
        for n, url in enumerate(urls.values(), start=1):
            ids.append(SchemaRegistryClient({"url": url}).register_schema("evolving", schema(n)))
        assert ids == [1, 2, 3]
        for url in urls.values():
            eventually(lambda url=url: SchemaRegistryClient({"url": url}).get_versions("evolving") == [1, 2, 3], 30,
                       f"{url} to see every version")
        assert cluster.zk.exists("/schema_registry/schema_registry_master")
        writer = json.loads(cluster.zk.get("/schema_registry/schema_registry_master")[0])
        writer_id = next(i for i, u in urls.items() if u.endswith(f":{writer['port']}"))
        assert cluster.partition_state("_schemas", 0)["isr"] and len(cluster.partition_state("_schemas", 0)["isr"]) == 3

        cluster.brokers[writer_id].kill()
        survivors = [u for i, u in urls.items() if i != writer_id]

        def registered_again() -> bool:
            try:
                ids.append(SchemaRegistryClient({"url": survivors[0]}).register_schema("evolving", schema(4)))
                return True
            except Exception:
                return False
        eventually(registered_again, 90, "a new writer to take registrations")
        assert ids[-1] == 4  # no id reused
        for url in survivors:
            eventually(lambda url=url: SchemaRegistryClient({"url": url}).get_versions("evolving") == [1, 2, 3, 4],
                       30, f"{url} to see the version written after the kill")
            assert SchemaRegistryClient({"url": url}).get_schema(1).schema_str == schema(1).schema_str.replace(" ", "")
    finally:
        cluster.close()


def test_https_and_basic_auth_forwarded_to_the_writer(zk_connect, tls_certs):
    """Registries on https with HTTP basic authentication (a SCRAM user, kept in ZooKeeper for
    every broker): a follower forwards a registration to the writer over TLS, with the
    caller's credentials, and a wrong password is refused on every broker."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    cluster = ZkCluster(zk_connect)
    urls: dict[int, str] = {}
    try:
        for i in (1, 2, 3):
            urls[i] = f"https://127.0.0.1:{free_port()}"
            cluster.start(i, **{"schema.registry.listeners": urls[i], "schema.registry.authentication.method": "BASIC",
                                **tls_certs.broker_ssl_props()})
        cluster.wait_for_brokers([1, 2, 3])
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "sam", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"sam-secret")]).values():
            f.result(30)
        ca = str(tls_certs.ca.pem)

        def client(url: str, password: str = "sam-secret") -> SchemaRegistryClient:
            return SchemaRegistryClient({"url": url, "ssl.ca.location": ca, "basic.auth.user.info": f"sam:{password}"})

        def answers(url: str) -> bool:
            try:
                return client(url).get_subjects() is not None
            except Exception:
                return False
        for url in urls.values():
            eventually(lambda url=url: answers(url), 90, f"the registry at {url} (and sam's credential there)")
        ids = [client(url).register_schema("secured", schema(n)) for n, url in enumerate(urls.values(), start=1)]
        assert ids == [1, 2, 3]
        for url in urls.values():
            eventually(lambda url=url: client(url).get_versions("secured") == [1, 2, 3], 30, f"{url} to see them")
            with pytest.raises(Exception, match="40101|Unauthorized"):
                client(url, "wrong").register_schema("secured", schema(9))
        writer = json.loads(cluster.zk.get("/schema_registry/schema_registry_master")[0])
        assert writer["scheme"] == "https"
    finally:
        cluster.close()
