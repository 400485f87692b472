"""A fetcher's side of fetch sessions (KIP-227), sans I/O, as Java's FetchSessionHandler.

It lives in ``protocol`` because both of its users, the consumer's ``Fetcher``
(``client/consumer/fetcher.py``, one handler per broker) and the follower's ``ReplicaFetcher``
(``replication/fetcher.py``, one per leader), may import ``protocol`` and neither may import the
other's package; it needs the Fetch request's structs and error codes, which are here, and
nothing above. No sockets: the fetcher calls ``build`` when it sends, then exactly one of
``handle_response`` (an answer came) or ``handle_error`` (none did).

A session starts with a full fetch (session id 0, epoch 0) naming every partition. A broker
that keeps sessions answers with a session id; later requests carry it with the next epoch and
name only the partitions added or whose fetch state changed, plus the ones to forget; the
broker remembers the rest, and its answers name only partitions with something to say. An
answer with session id 0 means the broker keeps none: every request stays a full one. An error
answer, an answer naming partitions the session lacks, or no answer starts over with a full
fetch (epoch 0; the same session id, so the broker drops the old session, except after
FETCH_SESSION_ID_NOT_FOUND). Epoch -1 closes the session.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import NamedTuple

from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import fetch_request as fq
from rivulet.protocol.schema import ZERO_UUID

INVALID_SESSION_ID = 0
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
_INT32_MAX = 2**31 - 1
# Errors about the session itself: the request named no data the broker would refuse.
SESSION_ERRORS: frozenset[int] = frozenset({
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
})

Key = tuple[str, int]  # (topic, partition); TopicPartition hashes alike


class PartitionFetch(NamedTuple):
    """What a Fetch asks of one partition; a session resends it only when it changes."""

    topic_id: uuid.UUID
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch, for both ends of a session: a closed session (negative)
    stays closed; 0 would open a new session, so the epoch wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= _INT32_MAX else epoch + 1


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """One request's share of the session: ``to_send`` goes in ``topics``, ``to_forget`` (and
    from v13 ``to_replace``, a partition whose topic id changed) in ``forgotten_topics_data``."""

    session_id: int
    epoch: int
    to_send: Mapping[Key, PartitionFetch]
    to_forget: list[tuple[uuid.UUID, Key]]
    to_replace: list[tuple[uuid.UUID, Key]]

    @classmethod
    def sessionless(cls, wanted: Mapping[Key, PartitionFetch]) -> FetchRequestData:
        """A Fetch outside any session (id 0, epoch -1), as the Spark source's one-partition reads."""
        return cls(INVALID_SESSION_ID, FINAL_EPOCH, wanted, [], [])

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def topics(self) -> list[fq.FetchTopic]:
        """Called by the fetcher writing the request: ``to_send`` as its ``topics``."""
        by_topic: dict[str, fq.FetchTopic] = {}
        part = fq.FetchPartition
        for (t, p), (topic_id, offset, leader_epoch, last_epoch, log_start, max_bytes) in self.to_send.items():
            ft = by_topic.get(t)
            if ft is None:
                ft = by_topic[t] = fq.FetchTopic(topic=t, topic_id=topic_id, partitions=[])
            ft.partitions.append(part(
                partition=p, current_leader_epoch=leader_epoch, fetch_offset=offset, last_fetched_epoch=last_epoch,
                log_start_offset=log_start, partition_max_bytes=max_bytes))
        return list(by_topic.values())

    def forgotten_topics(self, version: int) -> list[fq.ForgottenTopic]:
        """Called by the fetcher writing the request: its ``forgotten_topics_data`` at ``version``."""
        # Below v13 topics go by name, and the broker forgets after it adds: forgetting a
        # replaced partition by name would drop the one just sent.
        gone = self.to_forget + self.to_replace if version >= 13 else self.to_forget
        by_topic: dict[tuple[str, uuid.UUID], fq.ForgottenTopic] = {}
        for topic_id, (t, p) in gone:
            ft = by_topic.get((t, topic_id))
            if ft is None:
                ft = by_topic[(t, topic_id)] = fq.ForgottenTopic(topic=t, topic_id=topic_id, partitions=[])
            ft.partitions.append(p)
        return list(by_topic.values())


class FetchSessionHandler:
    """The session with one broker: its partitions as last sent, and the id and epoch the next
    request carries."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._partitions: dict[Key, PartitionFetch] = {}
        self.incremental_requests = 0  # built so far; tests read it

    @property
    def partitions(self) -> Mapping[Key, PartitionFetch]:
        """The partitions in the session (all the broker fetches for this client); read by the
        fetcher (is there a session to close?) and tests."""
        return self._partitions

    @property
    def full(self) -> bool:
        """The next request is a full one (read here and by tests)."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def build(self, wanted: dict[Key, PartitionFetch]) -> FetchRequestData:
        """Called by the fetcher for the request it sends now: ``wanted`` is every partition it
        fetches from this broker, in the order the broker should serve them; the handler keeps
        it. Topic ids or names: the request's version, which the fetcher picks, decides."""
        if self.full:
            self._partitions = wanted
            return FetchRequestData(self.session_id, self.epoch, wanted, [], [])
        session = self._partitions
        changed: dict[Key, PartitionFetch] = {}
        forget: list[tuple[uuid.UUID, Key]] = []
        replace: list[tuple[uuid.UUID, Key]] = []
        for key, prev in session.items():
            d = wanted.pop(key, None)
            if d is None:
                forget.append((prev.topic_id, key))
            elif d != prev:
                if d.topic_id != prev.topic_id and prev.topic_id != ZERO_UUID and d.topic_id != ZERO_UUID:
                    replace.append((prev.topic_id, key))
                changed[key] = d
        for _, key in forget:
            del session[key]
        session.update(changed)
        session.update(wanted)  # what is left of it was not in the session: added
        # Added partitions first, then changed ones, as Java orders them.
        wanted.update(changed)
        self.incremental_requests += 1
        return FetchRequestData(self.session_id, self.epoch, wanted, forget, replace)

    def handle_response(self, error_code: int, session_id: int, throttle_time_ms: int,
                        answered: Set[Key]) -> bool:
        """Called by the fetcher with the answer to the last ``build``: its top-level error,
        session id and throttle time and the partitions it names. False: its partitions must
        not be used (the next request is a full one)."""
        if error_code:
            self._start_over(keep_id=error_code != ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
            return False
        session = self._partitions
        if self.full:
            if not answered and throttle_time_ms > 0:
                # KIP-219: a throttled full fetch is answered empty.
                self._start_over(keep_id=False)
                return False
            if session.keys() != answered:
                self._start_over(keep_id=False)
                return False
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else 1
            return True
        if not session.keys() >= answered:
            self._start_over(keep_id=True)
            return False
        if session_id == INVALID_SESSION_ID:  # the broker closed the session
            self._start_over(keep_id=False)
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """Called by the fetcher when the request got no answer (connection lost, timed out):
        the next request is a full one that replaces the session, whatever became of it."""
        self._start_over(keep_id=True)

    def close(self) -> FetchRequestData | None:
        """Called by the fetcher when it stops fetching from this broker: the request (epoch -1,
        no partitions) that closes the session, or None when there is none to close."""
        if self.session_id == INVALID_SESSION_ID:
            self._partitions = {}
            return None
        self.epoch = FINAL_EPOCH
        return self.build({})

    def _start_over(self, keep_id: bool) -> None:
        if not keep_id:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
