"""Who asks the registry, and whether they may (docs/schema-registry.md, "Security").

Authentication, as the broker's listeners: HTTP basic against the broker's SASL users (its
SCRAM credentials and the PLAIN users of its JAAS configuration), or the client certificate of
a TLS connection, named by the broker's ``ssl.principal.mapping.rules``.

Authorization with the broker's ACLs, as Confluent's topic ACL authorizer does it: a subject is
guarded by the ACLs of its topic (``<topic>-key`` and ``<topic>-value``, Confluent's
TopicNameStrategy; any other subject by the topic of its own name, which a PREFIXED ACL
covers), so no resource type unknown to Kafka's tools is needed:

- read a subject (its versions, look-ups, compatibility checks) needs DESCRIBE on the topic,
  which Kafka grants with READ or WRITE (Karapace's "write implies read");
- register a schema needs WRITE; delete a version or a subject needs DELETE;
- a subject's compatibility or mode: DESCRIBE_CONFIGS to read, ALTER_CONFIGS to change;
- the registry's own compatibility and mode: DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster;
- a schema by id: read on one of the subjects that use it; lists (subjects, schemas, an id's
  versions) hold what the principal may read.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rivulet.registry.errors import RestError
from rivulet.security.acls import AclOperation as Op
from rivulet.security.acls import ResourceType
from rivulet.security.principal import USER_TYPE, KafkaPrincipal

UNAUTHORIZED = 40101
FORBIDDEN = 40301
CLUSTER_NAME = "kafka-cluster"
SUFFIXES = ("-key", "-value")

PasswordCheck = Callable[[str, str], bool]
# The broker's authorizer: principal, client host, operation, resource type, resource name.
Authorize = Callable[[KafkaPrincipal, str, Op, ResourceType, str], bool]


def subject_topic(subject: str) -> str:
    """The topic whose ACLs guard ``subject``."""
    for suffix in SUFFIXES:
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[:-len(suffix)]
    return subject


def unauthorized(message: str = "Unauthorized") -> RestError:
    return RestError(401, UNAUTHORIZED, message)


def forbidden(principal: KafkaPrincipal, op: Op, what: str) -> RestError:
    return RestError(403, FORBIDDEN, f"User {principal.name} is denied operation {op.pascal} on {what}")


@dataclass(frozen=True)
class Caller:
    """Who sent a request, from where."""

    principal: KafkaPrincipal
    host: str


class RegistryAuthenticator:
    """``passwords``: checks HTTP basic credentials (None: basic authentication is off);
    ``certificate``: the principal of a verified client certificate's subject (None: the
    listener takes no certificates). Without either, every caller is ANONYMOUS."""

    def __init__(self, passwords: PasswordCheck | None = None,
                 certificate: Callable[[str], KafkaPrincipal] | None = None) -> None:
        self._passwords = passwords
        self._certificate = certificate

    @property
    def basic(self) -> bool:
        return self._passwords is not None

    def caller(self, authorization: str | None, peer_dn: str | None, host: str) -> Caller:
        """The caller of a request with this ``Authorization`` header, over a connection whose
        client certificate has this subject; a ``RestError`` 401 if it cannot be."""
        if self._passwords is not None and authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "basic":
                raise unauthorized()
            try:
                user, sep, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                raise unauthorized() from None
            if not sep or not user or not self._passwords(user, password):
                raise unauthorized()
            return Caller(KafkaPrincipal(USER_TYPE, user), host)
        if self._certificate is not None and peer_dn:
            try:
                return Caller(self._certificate(peer_dn), host)
            except ValueError:  # no mapping rule applies
                raise unauthorized() from None
        if self._passwords is not None:
            raise unauthorized()
        return Caller(KafkaPrincipal.ANONYMOUS, host)


class SubjectAuthorizer:
    """The broker's ACLs applied to subjects (see the module's docstring)."""

    def __init__(self, authorize: Authorize) -> None:
        self._authorize = authorize

    def may(self, caller: Caller, op: Op, subject: str | None) -> bool:
        """``subject`` None: the registry as a whole (the cluster)."""
        if subject is None:
            return self._authorize(caller.principal, caller.host, op, ResourceType.CLUSTER, CLUSTER_NAME)
        return self._authorize(caller.principal, caller.host, op, ResourceType.TOPIC, subject_topic(subject))

    def check(self, caller: Caller, op: Op, subject: str | None) -> None:
        if not self.may(caller, op, subject):
            raise forbidden(caller.principal, op, "the registry" if subject is None else f"Subject: {subject}")

    def check_any(self, caller: Caller, subjects: Iterable[str], what: str) -> None:
        """Reading something the ``subjects`` use: allowed if one of them may be read."""
        if not any(self.may(caller, Op.DESCRIBE, s) for s in subjects):
            raise forbidden(caller.principal, Op.DESCRIBE, what)

    def readable(self, caller: Caller, subjects: Iterable[str]) -> set[str]:
        return {s for s in set(subjects) if self.may(caller, Op.DESCRIBE, s)}


# What a route needs: an operation on its subject, or on the registry when it has none.
_SUBJECT_OPS = {"GET": Op.DESCRIBE, "POST": Op.DESCRIBE, "DELETE": Op.DELETE}
_CONFIG_OPS = {"GET": Op.DESCRIBE_CONFIGS, "PUT": Op.ALTER_CONFIGS, "DELETE": Op.ALTER_CONFIGS}


def required(rule: str, method: str) -> tuple[Op, bool] | None:
    """The operation a request on ``rule`` needs and whether on its subject (else the
    registry); None where the answer is filtered instead (lists, schemas by id) or free."""
    if rule.startswith(("/config", "/mode")):
        return _CONFIG_OPS[method], "<subject>" in rule
    if "<subject>" in rule:
        if rule == "/subjects/<subject>/versions" and method == "POST":
            return Op.WRITE, True
        return _SUBJECT_OPS[method], True
    return None


@dataclass(frozen=True)
class RegistrySecurity:
    """The listener's authentication, and its authorization (None: every caller may do all)."""

    authenticator: RegistryAuthenticator
    authorizer: SubjectAuthorizer | None = None
