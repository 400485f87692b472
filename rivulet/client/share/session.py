"""Share sessions and acknowledgements, sans I/O (KIP-932), as Java's ShareSessionHandler and
Acknowledgements: what a share consumer tells one partition leader, built and read here,
sent by ``share_fetcher``.

A member has one share session per leader. Epoch 0 opens it with every partition wanted from
that leader; later requests carry the next epoch, the partitions added (and those with
acknowledgements) and the partitions forgotten; the broker remembers the rest. Epoch -1
closes it (a ShareAcknowledge with the last acknowledgements), which releases whatever the
member still holds there. A session the broker no longer knows (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH) starts again at 0; its records were released with it, so its
pending acknowledgements are dropped, as Java drops them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from rivulet.common.types import AcknowledgeType
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, next_epoch
from rivulet.protocol.messages import share_acknowledge_request as saq
from rivulet.protocol.messages import share_fetch_request as sfq

SESSION_ERRORS = frozenset({ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH})


class Acknowledgements:
    """One partition's acknowledgements not yet sent: offset -> type."""

    __slots__ = ("_types",)

    def __init__(self) -> None:
        self._types: dict[int, int] = {}

    def add(self, offset: int, kind: int) -> None:
        self._types[offset] = kind

    def add_all(self, offsets: Iterable[int], kind: int) -> None:
        self._types.update(dict.fromkeys(offsets, kind))

    def __len__(self) -> int:
        return len(self._types)

    def __bool__(self) -> bool:
        return bool(self._types)

    def offsets(self) -> dict[int, int]:
        return dict(self._types)

    def has_renew(self) -> bool:
        return AcknowledgeType.RENEW in self._types.values()

    def batches(self) -> list[tuple[int, int, list[int]]]:
        """Runs of consecutive offsets as (first, last, types): one type for a run acknowledged
        alike, else one type per offset, so a batch never spans a gap."""
        out: list[tuple[int, int, list[int]]] = []
        first = prev = -2
        run: list[int] = []
        for o in sorted(self._types):
            if o != prev + 1 and run:
                out.append((first, prev, run))
                run = []
            if not run:
                first = o
            run.append(int(self._types[o]))
            prev = o
        if run:
            out.append((first, prev, run))
        return [(a, b, types if len(set(types)) > 1 else types[:1]) for a, b, types in out]


def merge(into: dict[TP, Acknowledgements], more: Mapping[TP, Acknowledgements]) -> None:
    for tp, acks in more.items():
        mine = into.get(tp)
        if mine is None:
            mine = into[tp] = Acknowledgements()
        mine._types.update(acks._types)


class ShareSessionHandler:
    """A member's share session with one leader: the epoch of its next request and the
    partitions the broker holds in it.

    Requests of a session may be in flight together (a ShareAcknowledge while a ShareFetch
    long-polls): each takes the next epoch when it is built, so they must go on the wire in
    the order they were built. A request answered with a session error resets the session,
    unless it was built before an earlier reset (its answer is about a session gone already).
    """

    def __init__(self, group_id: str, member_id: str) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.epoch = INITIAL_EPOCH
        self.partitions: set[TP] = set()   # in the broker's session once what was sent is answered
        self.generation = 0                # bumped by each reset

    @property
    def open(self) -> bool:
        return self.epoch != INITIAL_EPOCH

    def _advance(self) -> int:
        epoch = self.epoch
        self.epoch = next_epoch(epoch)
        return epoch

    def fetch_request(self, wanted: Iterable[TP], acks: Mapping[TP, Acknowledgements],
                      topic_ids: Mapping[str, uuid.UUID], *, max_wait_ms: int, min_bytes: int, max_bytes: int,
                      max_records: int) -> sfq.ShareFetchRequest:
        """A ShareFetch: at epoch 0 every wanted partition (no acknowledgements may go with it),
        later the partitions added or acknowledged, and those no longer wanted as forgotten."""
        want = {tp for tp in wanted if tp[0] in topic_ids}
        if not self.open:
            listed = {tp: None for tp in want}
            acks = {}
            forgotten: set[TP] = set()
        else:
            listed = {tp: None for tp in want - self.partitions}
            listed.update((tp, None) for tp, a in acks.items() if a and tp[0] in topic_ids)
            # Listed only for its acknowledgements: forgotten too, else the broker (which adds
            # the listed partitions before removing the forgotten) keeps fetching it for us.
            forgotten = {tp for tp in (self.partitions | set(listed)) - want if tp[0] in topic_ids}
        self.partitions = want
        topics: dict[str, list[sfq.FetchPartition]] = {}
        for tp in sorted(listed):
            a = acks.get(tp)
            topics.setdefault(tp[0], []).append(sfq.FetchPartition(
                partition_index=tp[1], partition_max_bytes=max_bytes,
                acknowledgement_batches=[sfq.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=t)
                                         for f, la, t in (a.batches() if a else [])]))
        gone: dict[str, list[int]] = {}
        for tp in sorted(forgotten):
            gone.setdefault(tp[0], []).append(tp[1])
        return sfq.ShareFetchRequest(
            group_id=self.group_id, member_id=self.member_id, share_session_epoch=self._advance(),
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, max_records=max_records,
            batch_size=max_records, share_acquire_mode=0, is_renew_ack=False,
            topics=[sfq.FetchTopic(topic_id=topic_ids[t], partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[sfq.ForgottenTopic(topic_id=topic_ids[t], partitions=ps) for t, ps in gone.items()])

    def acknowledge_request(self, acks: Mapping[TP, Acknowledgements], topic_ids: Mapping[str, uuid.UUID], *,
                            close: bool = False) -> saq.ShareAcknowledgeRequest:
        """A ShareAcknowledge alone; ``close`` makes it the session's last (epoch -1), after
        which the session is forgotten."""
        topics: dict[str, list[saq.AcknowledgePartition]] = {}
        for tp in sorted(acks):
            a = acks[tp]
            if a and tp[0] in topic_ids:
                topics.setdefault(tp[0], []).append(saq.AcknowledgePartition(
                    partition_index=tp[1],
                    acknowledgement_batches=[saq.AcknowledgementBatch(first_offset=f, last_offset=la,
                                                                      acknowledge_types=t)
                                             for f, la, t in a.batches()]))
        if close:
            epoch = FINAL_EPOCH
            self.reset()
        else:
            epoch = self._advance()
        return saq.ShareAcknowledgeRequest(
            group_id=self.group_id, member_id=self.member_id, share_session_epoch=epoch,
            is_renew_ack=any(a.has_renew() for a in acks.values()),
            topics=[saq.AcknowledgeTopic(topic_id=topic_ids[t], partitions=ps) for t, ps in topics.items()])

    def handle_response(self, error_code: int, generation: int) -> bool:
        """After an answer to a request built in ``generation``: False (and the session starts
        again) when the broker no longer knows the session."""
        if error_code in SESSION_ERRORS:
            if generation == self.generation:
                self.reset()
            return False
        return True

    def reset(self) -> None:
        """Forget the session (failed connection, closed session): the next request opens one."""
        self.epoch = INITIAL_EPOCH
        self.partitions = set()
        self.generation += 1
