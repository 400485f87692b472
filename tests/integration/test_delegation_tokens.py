"""Delegation tokens against real broker processes: a client authenticates with a token over
SASL_SSL (Rivulet's client, SCRAM with tokenauth=true); a token renewed past its max lifetime
is capped there and refused once it passes; Kafka's refusals of token requests; the tokens
survive a restart; in a ZooKeeper cluster a token made through one broker authenticates on
another and its expiry reaches it."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid

import pytest

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    create_delegation_token_request as cq,
    describe_delegation_token_request as dq,
    expire_delegation_token_request as eq,
    renew_delegation_token_request as rq,
)
from rivulet.security.client_config import SaslCredentials
from rivulet.testing import BrokerProcess, free_port
from tests.cluster import ZkCluster, eventually
from tests.integration.test_sasl import round_trip, sasl_overrides

pytestmark = pytest.mark.integration

ADMIN = SaslCredentials("PLAIN", "admin", "admin-secret")
SECRET = {"delegation.token.secret.key": "integration-secret"}


def send(port: int, request, sasl: SaslCredentials | None = ADMIN):
    async def go():
        conn = await BrokerConnection("127.0.0.1", port, sasl=sasl).connect(10)
        try:
            return await conn.send(request)
        finally:
            await conn.close()
    return asyncio.run(go())


def create(port: int, max_lifetime_ms: int = -1, sasl: SaslCredentials | None = ADMIN):
    return send(port, cq.CreateDelegationTokenRequest(renewers=[], max_lifetime_ms=max_lifetime_ms), sasl)


def as_token(token_id: str, hmac: bytes, mechanism: str = "SCRAM-SHA-512") -> SaslCredentials:
    return SaslCredentials(mechanism, token_id, base64.b64encode(hmac).decode(), extensions={"tokenauth": "true"})


def token_conf(bootstrap: str, protocol: str, token_id: str, hmac: bytes, **extra: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": protocol, "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                f'username="{token_id}" password="{base64.b64encode(hmac).decode()}" tokenauth=true;',
            **extra}


def refused(conf: dict) -> str:
    from rivulet.admin import AdminClient
    a = AdminClient(conf)
    try:
        with pytest.raises(Exception) as e:
            a.list_topics(timeout=15)
        return str(e.value)
    finally:
        a.close()


@pytest.fixture(scope="module")
def broker(tls_certs):
    """PLAINTEXT on ``port``, SASL_PLAINTEXT on ``sasl_port``, SASL_SSL on ``ssl_port``."""
    b = BrokerProcess()
    b.sasl_port, b.ssl_port = free_port(), free_port()
    plain, tls = sasl_overrides(b.sasl_port), sasl_overrides(b.ssl_port, "SASL_SSL")
    b.overrides.update({**plain, **tls, **SECRET, **tls_certs.broker_ssl_props("listener.name.sasl_ssl."),
                        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},{plain['listeners']},"
                                     f"{tls['listeners'].replace('127.0.0.1', 'localhost')}",
                        "offsets.topic.num.partitions": "3"})
    b.start()
    yield b
    b.cleanup()


def test_a_client_authenticates_with_a_token_over_sasl_ssl(broker, tls_certs):
    import rivulet
    r = create(broker.sasl_port)
    assert r.error_code == 0 and r.principal_name == "admin" and r.token_requester_principal_name == "admin"
    round_trip(rivulet, token_conf(f"localhost:{broker.ssl_port}", "SASL_SSL", r.token_id, r.hmac,
                                   **{"ssl.ca.location": str(tls_certs.ca.pem)}), f"tok-{uuid.uuid4().hex[:8]}")
    # A wrong HMAC is refused.
    assert "Authentication failed" in refused(token_conf(f"localhost:{broker.ssl_port}", "SASL_SSL", r.token_id,
                                                         b"not the hmac", **{"ssl.ca.location": str(tls_certs.ca.pem)}))


def test_renewal_stops_at_the_max_lifetime_and_an_expired_token_is_refused(broker):
    r = create(broker.sasl_port, max_lifetime_ms=3000)
    assert r.error_code == 0 and r.max_timestamp_ms == r.issue_timestamp_ms + 3000
    assert r.expiry_timestamp_ms == r.max_timestamp_ms
    renewed = send(broker.sasl_port, rq.RenewDelegationTokenRequest(hmac=r.hmac, renew_period_ms=3_600_000))
    assert (renewed.error_code, renewed.expiry_timestamp_ms) == (0, r.max_timestamp_ms)
    conf = token_conf(f"127.0.0.1:{broker.sasl_port}", "SASL_PLAINTEXT", r.token_id, r.hmac)
    from rivulet.admin import AdminClient
    a = AdminClient(conf)
    assert a.list_topics(timeout=15).topics is not None
    a.close()
    while time.time() * 1000 <= r.max_timestamp_ms + 50:
        time.sleep(0.1)
    assert "Authentication failed" in refused(conf)
    late = send(broker.sasl_port, rq.RenewDelegationTokenRequest(hmac=r.hmac, renew_period_ms=-1))
    assert late.error_code == ErrorCode.DELEGATION_TOKEN_EXPIRED


def test_token_requests_kafka_refuses(broker):
    # Unauthenticated (PLAINTEXT): not allowed, as Kafka.
    r = create(broker.port, sasl=None)
    assert r.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED and r.token_id == ""
    owned = create(broker.sasl_port)
    # A connection authenticated with a token: not allowed either, for any token request.
    with_token = as_token(owned.token_id, owned.hmac)
    assert create(broker.sasl_port, sasl=with_token).error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    d = send(broker.sasl_port, dq.DescribeDelegationTokenRequest(owners=None), with_token)
    assert d.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    # Another principal (alice over PLAIN) is neither owner nor renewer.
    alice = SaslCredentials("PLAIN", "alice", "alice-secret")
    e = send(broker.sasl_port, eq.ExpireDelegationTokenRequest(hmac=owned.hmac, expiry_time_period_ms=-1), alice)
    assert e.error_code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    # (Without an authorizer anyone may describe any token, as in Kafka; the ACL matrix has the rest.)
    assert send(broker.sasl_port, dq.DescribeDelegationTokenRequest(owners=[]), alice).tokens == []
    # Renewers must be users.
    bad = send(broker.sasl_port, cq.CreateDelegationTokenRequest(
        renewers=[cq.CreatableRenewers(principal_type="Group", principal_name="g")], max_lifetime_ms=-1))
    assert bad.error_code == ErrorCode.INVALID_PRINCIPAL_TYPE
    gone = send(broker.sasl_port, rq.RenewDelegationTokenRequest(hmac=b"no such token", renew_period_ms=-1))
    # Kafka 4.3.1's answers: expiry 0 when the tokens refuse, -1 when refused before.
    assert (gone.error_code, gone.expiry_timestamp_ms) == (ErrorCode.DELEGATION_TOKEN_NOT_FOUND, 0)
    anonymous = send(broker.port, rq.RenewDelegationTokenRequest(hmac=owned.hmac, renew_period_ms=-1), None)
    assert (anonymous.error_code, anonymous.expiry_timestamp_ms) == (ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, -1)
    # Token ids are Kafka's Uuids: 22 characters of URL-safe base64.
    assert len(owned.token_id) == 22 and "=" not in owned.token_id


def test_tokens_survive_a_restart_and_need_a_secret(tls_certs):
    b = BrokerProcess()
    b.sasl_port = b.port  # its one listener
    b.overrides.update({**sasl_overrides(b.sasl_port), **SECRET})
    b.start()
    try:
        r = create(b.sasl_port)
        assert r.error_code == 0
        b.stop()
        b.start()
        d = send(b.sasl_port, dq.DescribeDelegationTokenRequest(owners=None))
        assert [(t.token_id, bytes(t.hmac)) for t in d.tokens] == [(r.token_id, bytes(r.hmac))]
        assert send(b.sasl_port, rq.RenewDelegationTokenRequest(hmac=r.hmac, renew_period_ms=-1)).error_code == 0
        # Without a secret key the APIs are off.
        b.stop()
        for k in SECRET:
            del b.overrides[k]
        b.start()
        assert create(b.sasl_port).error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
        d = send(b.sasl_port, dq.DescribeDelegationTokenRequest(owners=None))
        assert d.error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    finally:
        b.cleanup()


@pytest.mark.cluster
def test_a_token_made_through_one_broker_works_on_another(zk_connect):
    cluster = ZkCluster(zk_connect)
    try:
        for i in (1, 2):
            b = BrokerProcess({"zookeeper.connect": zk_connect, "broker.id": str(i), **SECRET,
                               "offsets.topic.replication.factor": "2", "inter.broker.listener.name": "PLAINTEXT"})
            b.sasl_port = free_port()
            b.overrides.update(sasl_overrides(b.sasl_port))
            b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl_port}"
            cluster.brokers[i] = b.start()
        b1, b2 = cluster.brokers[1], cluster.brokers[2]
        r = create(b1.sasl_port)
        assert r.error_code == 0
        stored = cluster.json(f"/delegation_token/tokens/{r.token_id}")
        assert stored["owner"] == "User:admin" and stored["maxTimestamp"] == r.max_timestamp_ms

        def authenticates_on_b2() -> bool:
            try:
                send(b2.sasl_port, dq.DescribeDelegationTokenRequest(owners=None), as_token(r.token_id, r.hmac))
                return True
            except Exception:
                return False
        eventually(authenticates_on_b2, what="the token to authenticate on broker 2")
        # Expired through broker 2: broker 1 forgets it too.
        e = send(b2.sasl_port, eq.ExpireDelegationTokenRequest(hmac=r.hmac, expiry_time_period_ms=-1))
        assert e.error_code == 0
        eventually(lambda: not send(b1.sasl_port, dq.DescribeDelegationTokenRequest(owners=None)).tokens,
                   what="broker 1 to drop the expired token")
    finally:
        for b in cluster.brokers.values():
            b.cleanup()
        cluster.zk.stop()
