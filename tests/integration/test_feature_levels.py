"""Feature levels through the wire, without Java: ApiVersions' supported and finalized features
(v3 and v4), UpdateFeatures v0-2 (validate-only, real, Kafka's errors), and group.version 0
taking the consumer protocol's APIs off the list until it is 1 again."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import update_features_request as ufq
from rivulet.protocol.messages.api_versions_request import ApiVersionsRequest

pytestmark = pytest.mark.integration


def run(broker, work):
    async def go():
        conn = await BrokerConnection("127.0.0.1", broker.port).connect(10)
        try:
            return await work(conn)
        finally:
            await conn.close()
    return asyncio.run(go())


def api_versions(broker, version: int):
    return run(broker, lambda c: c.send(ApiVersionsRequest(client_software_name="test",
                                                           client_software_version="1"), version=version))


def update(broker, feature: str, level: int, upgrade_type: int = 1, validate_only: bool = False, version: int = 2):
    return run(broker, lambda c: c.send(ufq.UpdateFeaturesRequest(timeout_ms=5000, validate_only=validate_only,
                                                                  feature_updates=[ufq.FeatureUpdateKey(
                                                                      feature=feature, max_version_level=level,
                                                                      allow_downgrade=upgrade_type != 1,
                                                                      upgrade_type=upgrade_type)]),
                                        version=version))


def test_api_versions_carry_the_features(broker):
    v4 = api_versions(broker, 4)
    supported = {f.name: (f.min_version, f.max_version) for f in v4.supported_features}
    assert supported["group.version"] == (0, 1) and supported["share.version"] == (0, 1)
    assert supported["transaction.version"] == (0, 2)
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in v4.finalized_features}
    # A new cluster finalizes transaction.version 2 and eligible.leader.replicas.version 1, as
    # Kafka 4.3.1's does (one node too: tests/java/admin_probe_kafka.txt).
    assert finalized["group.version"] == (1, 1) and finalized["transaction.version"] == (2, 2)
    assert supported["eligible.leader.replicas.version"] == (0, 1)
    assert finalized["eligible.leader.replicas.version"] == (1, 1)
    assert v4.finalized_features_epoch >= 0
    # v3 could not carry a range starting at 0 (KAFKA-17011): those are left out.
    assert api_versions(broker, 3).supported_features == []


def test_update_features_validates_as_kafka(broker):
    r = update(broker, "transaction.version", 3)
    assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and r.results == []
    assert r.error_message.endswith("Invalid update version 3 for feature transaction.version. Local controller 1 "
                                    "only supports versions 0-2")
    r = update(broker, "eligible.leader.replicas.version", 2)
    assert r.error_message.endswith("Invalid update version 2 for feature eligible.leader.replicas.version. Local "
                                    "controller 1 only supports versions 0-1")
    r = update(broker, "group.version", 0, upgrade_type=1, version=1)
    assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and "safe or unsafe downgrade" in r.error_message
    epoch = api_versions(broker, 4).finalized_features_epoch
    r = update(broker, "group.version", 0, upgrade_type=2, validate_only=True, version=1)
    # Kafka 4.3.1's answer, message included.
    assert (r.error_code, [(x.feature, x.error_code, x.error_message) for x in r.results]) == (
        0, [("group.version", 0, "NONE")])
    assert api_versions(broker, 4).finalized_features_epoch == epoch


def test_group_version_zero_takes_the_consumer_protocol_off(broker_factory):
    b = broker_factory()
    assert {68, 69} <= {k.api_key for k in api_versions(b, 4).api_keys}
    assert update(b, "group.version", 0, upgrade_type=2, version=0).error_code == 0  # v0: allow_downgrade
    after = api_versions(b, 4)
    assert not {68, 69} & {k.api_key for k in after.api_keys}
    assert "group.version" not in {f.name for f in after.finalized_features}
    assert update(b, "group.version", 1).error_code == 0
    assert {68, 69} <= {k.api_key for k in api_versions(b, 4).api_keys}
