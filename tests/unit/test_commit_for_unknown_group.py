"""Commits for a group that does not exist, as Kafka 4's group coordinator answers them
(found probing the requests franz-go sends)."""

from __future__ import annotations

import pytest

from rivulet.common.types import TopicPartition
from rivulet.coordinator.group_metadata import OffsetAndMetadata
from rivulet.protocol.errors import ErrorCode as E
from test_group_support import make_coordinator

pytestmark = pytest.mark.fast

TP0 = TopicPartition("t", 0)


def commit(c, gid, member, generation, version):
    out = []
    c.handle_commit_offsets(gid, member, None, generation, {TP0: OffsetAndMetadata(1)}, out.append,
                            api_version=version)
    return out[0][TP0]


def test_offset_commit_generation_for_unknown_group_depends_on_version():
    c, b = make_coordinator()
    assert commit(c, "nope", "m", 3, 9) == E.GROUP_ID_NOT_FOUND
    assert commit(c, "nope", "m", 3, 8) == E.ILLEGAL_GENERATION
    assert c.manager.get_group("nope") is None
    assert commit(c, "nope", "", -1, 9) == E.NONE  # a simple group is still made
    assert c.manager.get_group("nope") is not None


def test_txn_offset_commit_generation_for_unknown_group_is_illegal_generation():
    c, b = make_coordinator()
    out = []
    c.handle_txn_commit_offsets("nope", 7, 0, "m", None, 2, {TP0: OffsetAndMetadata(1)}, out.append)
    assert out[0] == {TP0: E.ILLEGAL_GENERATION}
    assert c.manager.get_group("nope") is None
    c.handle_txn_commit_offsets("nope", 7, 0, "", None, -1, {TP0: OffsetAndMetadata(1)}, out.append)
    assert out[1] == {TP0: E.NONE}
