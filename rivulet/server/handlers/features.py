"""Request handler of UpdateFeatures (57), in front of ``FeatureLevels`` (``server/features.py``).
Needs ALTER on the cluster, as Kafka's."""

from __future__ import annotations

import asyncio

from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import update_features_response as ufr
from rivulet.protocol.messages.update_features_request import UpdateFeaturesRequest
from rivulet.security.acls import AclOperation
from rivulet.server.acls import Authz
from rivulet.server.features import FeatureLevels, FeatureUpdate, UpgradeType
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection


class FeatureHandlers:
    def __init__(self, features: FeatureLevels, authz: Authz) -> None:
        self.features = features
        self.authz = authz

    def handlers(self) -> dict[int, Handler]:
        return {57: self.handle_update}

    def handle_update(self, header: RequestHeader, req: UpdateFeaturesRequest, conn: KafkaConnection
                      ) -> ufr.UpdateFeaturesResponse | asyncio.Future[ufr.UpdateFeaturesResponse]:
        if not self.authz.cluster(conn, AclOperation.ALTER):
            return ufr.UpdateFeaturesResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                              error_message=None, results=[])
        # v0 had a downgrade flag where v1+ has the upgrade type.
        updates = [FeatureUpdate(u.feature, u.max_version_level,
                                 u.upgrade_type if header.api_version >= 1 else
                                 UpgradeType.SAFE_DOWNGRADE if u.allow_downgrade else UpgradeType.UPGRADE)
                   for u in req.feature_updates]

        async def update() -> ufr.UpdateFeaturesResponse:
            error = await self.features.update(updates, bool(req.validate_only) and header.api_version >= 1)
            if error is not None:  # the whole request failed: no per-feature results, as Kafka's
                return ufr.UpdateFeaturesResponse(throttle_time_ms=0, error_code=error.code,
                                                  error_message=error.message, results=[])
            return ufr.UpdateFeaturesResponse(throttle_time_ms=0, error_code=0, error_message=None, results=[
                ufr.UpdatableFeatureResult(feature=f, error_code=0, error_message="NONE")  # Kafka's, v0-1
                for f in sorted({u.feature for u in updates})])
        return asyncio.ensure_future(update())
