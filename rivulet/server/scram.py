"""SCRAM credentials on the broker: what SCRAM-SHA-256/512 authenticate against, changed with
AlterUserScramCredentials and read with DescribeUserScramCredentials (Kafka's validation and
errors, as its ScramControlManager).

Where they are kept is the ``ScramStore``'s business: one node keeps them in its dynamic
configs' file, a cluster in ZooKeeper's /config/users/<user> (as Kafka's ZooKeeper mode, with
a change notification so that every broker re-reads the user)."""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.security.scram import (BY_TYPE, MAX_ITERATIONS, MECHANISMS, ScramCredential, ScramMechanism,
                                    salted_password)


class ScramStore(Protocol):
    def load_scram_credentials(self) -> dict[str, dict[str, str]]:
        """user -> {mechanism name: credential text}"""
        ...

    async def store_scram_credentials(self, user: str, credentials: Mapping[str, str]) -> None:
        """Replace ``user``'s credentials (none left: the user has none)."""
        ...


@dataclass(frozen=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


_TWICE = "A user credential cannot be altered twice in the same request"


class ScramCredentials:
    """Every user's SCRAM credentials, by user and mechanism name."""

    def __init__(self, store: ScramStore | None = None) -> None:
        self.store = store
        self.users: dict[str, dict[str, ScramCredential]] = {}
        # verify_password's: per user, the credential a password was right for and its tag.
        self._secret = os.urandom(32)
        self._verified: dict[str, tuple[ScramCredential, bytes]] = {}
        for user, creds in (store.load_scram_credentials() if store is not None else {}).items():
            self.set_user(user, creds)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def verify_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s under one of its SCRAM mechanisms (the schema
        registry's HTTP basic authentication). A password found right is remembered, keyed
        with a secret of this process, for as long as the credential stays the same: HTTP
        sends it with every request, and deriving the key costs thousands of iterations."""
        creds = self.users.get(user, {})
        tag = hmac.digest(self._secret, password.encode(), "sha256")
        known = self._verified.get(user)
        if known is not None and known[0] in creds.values() and hmac.compare_digest(known[1], tag):
            return True
        for name, cred in creds.items():
            mech = MECHANISMS[name]
            derived = ScramCredential.from_salted_password(
                mech, salted_password(mech, password, cred.salt, cred.iterations), cred.salt, cred.iterations)
            if hmac.compare_digest(derived.stored_key, cred.stored_key):
                self._verified[user] = (cred, tag)
                return True
        return False

    def set_user(self, user: str, credentials: Mapping[str, str]) -> None:
        """``user``'s credentials as stored (a change made here or, in a cluster, elsewhere);
        entries that are not SCRAM credentials (a user's quotas) are left out."""
        parsed = {}
        for mechanism, text in credentials.items():
            if mechanism in MECHANISMS:
                try:
                    parsed[mechanism] = ScramCredential.from_text(text)
                except ValueError:
                    continue
        if parsed:
            self.users[user] = parsed
        else:
            self.users.pop(user, None)

    # ------------------------------------------------------------ DescribeUserScramCredentials
    def describe(self, users: Sequence[str] | None) -> list[tuple[str, ApiError | list[tuple[int, int]]]]:
        """Each user with its (mechanism type, iterations), or its error; every user when
        ``users`` is None or empty."""
        names = sorted(self.users) if not users else list(dict.fromkeys(users))
        counts = {u: list(users or ()).count(u) for u in names}
        out: list[tuple[str, ApiError | list[tuple[int, int]]]] = []
        for user in names:
            if counts.get(user, 0) > 1:
                out.append((user, ApiError(ErrorCode.DUPLICATE_RESOURCE,
                                           "Cannot describe SCRAM credentials for the same user twice in a single "
                                           "request")))
            elif user not in self.users:
                out.append((user, ApiError(ErrorCode.RESOURCE_NOT_FOUND,
                                           "Attempt to describe a user credential that does not exist")))
            else:
                out.append((user, sorted((MECHANISMS[m].type_code, c.iterations) for m, c in self.users[user].items())))
        return out

    # ------------------------------------------------------------ AlterUserScramCredentials
    async def alter(self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[Upsertion]
                    ) -> list[tuple[str, ApiError | None]]:
        """Validate every change as Kafka does, apply the valid ones, persist each changed user;
        each user's result."""
        errors: dict[str, ApiError] = {}
        deletes: dict[str, tuple[str, int]] = {}
        upserts: dict[str, Upsertion] = {}
        for user, mech_type in deletions:
            if user in errors:
                continue
            if deletes.pop(user, None) is not None:
                errors[user] = ApiError(ErrorCode.DUPLICATE_RESOURCE, _TWICE)
                continue
            error = _check_name(user, mech_type)
            if error is None and self.lookup(user, BY_TYPE[mech_type].name) is None:
                error = ApiError(ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
            if error is not None:
                errors[user] = error
            else:
                deletes[user] = (user, mech_type)
        for up in upsertions:
            if up.user in errors:
                continue
            if deletes.pop(up.user, None) is not None or upserts.pop(up.user, None) is not None:
                errors[up.user] = ApiError(ErrorCode.DUPLICATE_RESOURCE, _TWICE)
                continue
            error = _check_name(up.user, up.mechanism)
            if error is None:
                mech = BY_TYPE[up.mechanism]
                if up.iterations < mech.min_iterations:
                    error = ApiError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
                elif up.iterations > MAX_ITERATIONS:
                    error = ApiError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            if error is not None:
                errors[up.user] = error
            else:
                upserts[up.user] = up
        changed: dict[str, dict[str, ScramCredential]] = {}
        for user, mech_type in deletes.values():
            creds = changed.setdefault(user, dict(self.users.get(user, {})))
            creds.pop(BY_TYPE[mech_type].name, None)
        for up in upserts.values():
            mech: ScramMechanism = BY_TYPE[up.mechanism]
            creds = changed.setdefault(up.user, dict(self.users.get(up.user, {})))
            creds[mech.name] = ScramCredential.from_salted_password(mech, up.salted_password, up.salt, up.iterations)
        for user, creds in changed.items():
            texts = {m: c.to_text() for m, c in creds.items()}
            if self.store is not None:
                await self.store.store_scram_credentials(user, texts)
            self.set_user(user, texts)
        return [*((u, None) for u in [*deletes, *upserts]), *errors.items()]


def _check_name(user: str, mech_type: int) -> ApiError | None:
    if not user:
        return ApiError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mech_type not in BY_TYPE:
        return ApiError(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None
