"""The codec comes from two sets of Kafka's schemas (tools/gen_protocol.py): Kafka 4.3.1's, and
a 2024-10 set that still holds the oldest versions KIP-896 removed. Where both sets hold a
version they must describe the same bytes; the generator checked that against the JSON files
and recorded each module's wire shape for those versions, which these tests hold the
committed codec to."""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
from types import ModuleType

import rivulet.protocol.messages as messages
from rivulet.protocol import records as rec
from rivulet.protocol.messages import produce_request as prq
from rivulet.protocol.schema import wire_shape

# Early-access versions Kafka changed before the API's release: 4.3.1's shape is generated.
KNOWN_CHANGED = {"ReadShareGroupStateSummaryResponse"}


def _modules() -> list[ModuleType]:
    return [importlib.import_module(f"{messages.__name__}.{m.name}") for m in pkgutil.iter_modules(messages.__path__)]


def _digest(cls: type, lo: int, hi: int) -> str:
    return hashlib.sha256(repr([wire_shape(cls, v) for v in range(lo, hi + 1)]).encode()).hexdigest()


def test_versions_both_sets_hold_encode_as_both_sets_define_them():
    checked = []
    for mod in _modules():
        if not hasattr(mod, "CHECKED"):
            continue
        name, (lo, hi), digest = mod.CHECKED
        assert _digest(getattr(mod, name), lo, hi) == digest, f"{name} v{lo}-{hi}"
        checked.append(name)
    # Every API both sets define, requests and responses (Produce, Fetch, Metadata, ...).
    assert len(checked) >= 150 and {"ProduceRequest", "FetchResponse", "MetadataRequest"} <= set(checked)


def test_only_known_pre_release_versions_differ_between_the_sets():
    changed = {mod.CHANGED[0] for mod in _modules() if hasattr(mod, "CHANGED")}
    assert changed == KNOWN_CHANGED


def test_the_codec_spans_the_oldest_and_the_newest_versions():
    from rivulet.protocol.messages import API_CLASSES, load
    ranges = {key: load(req_mod, req_cls).VALID_VERSIONS for key, (req_mod, req_cls, _, _) in API_CLASSES.items()}
    assert ranges[0] == (0, 13)  # Produce: v0-2 from the older set, v12-13 from 4.3.1
    assert ranges[1] == (0, 18)  # Fetch
    assert ranges[8] == (0, 10)  # OffsetCommit
    assert ranges[4] == (0, 7)  # LeaderAndIsr: gone from Kafka 4.3.1, kept from the older set
    assert API_CLASSES[74][1] == "ListConfigResourcesRequest"  # was ListClientMetricsResources


def test_an_old_and_a_new_version_of_one_message_round_trip():
    batch = rec.encode_batch([rec.Record(0, 0, b"k", b"v", [])])
    for version in (0, 3, 11, 12):
        req = prq.ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[prq.TopicProduceData(
            name="t", partition_data=[prq.PartitionProduceData(index=0, records=batch)])])
        back = prq.ProduceRequest.decode(bytes(req.encode(version)), version)
        assert back.topic_data[0].name == "t" and bytes(back.topic_data[0].partition_data[0].records) == batch


def test_every_request_class_names_its_response_class():
    """The generated requests are ``Request["<Response>"]``, which types a client's ``send``."""
    from typing import ForwardRef

    from rivulet.protocol.schema import Request
    for key, (req_mod, req_cls, resp_mod, resp_cls) in messages.API_CLASSES.items():
        request = messages.load(req_mod, req_cls)
        assert issubclass(request, Request), key
        (arg,) = request.__orig_bases__[0].__args__
        assert arg == ForwardRef(resp_cls) and messages.load(resp_mod, resp_cls).__name__ == resp_cls, key
