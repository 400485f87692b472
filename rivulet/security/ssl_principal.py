"""The principal of an SSL connection: the client certificate's subject, as an RFC 2253
distinguished name (``CN=app,OU=eng,O=acme``), mapped by ``ssl.principal.mapping.rules``.

The rules are Kafka's: a comma-separated list of ``DEFAULT`` (the whole DN) and
``RULE:pattern/replacement/[LU]`` entries, tried in order; a RULE applies only when its
pattern matches the whole DN, and its result is the DN with every match replaced (``$1``
for a group), then lower- or upper-cased. A DN no rule applies to is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rivulet.security.principal import USER_TYPE, KafkaPrincipal

__all__ = ["MappingRule", "NoMatchingRule", "SslPrincipalMapper", "principal_from_dn"]


class NoMatchingRule(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        out = self.pattern.sub(self.replacement, dn)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def _java_replacement(text: str) -> str:
    """A Java replacement string (``$1``, ``\\$``) as Python's ``re.sub`` takes it."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


def _until_slash(text: str, pos: int, rules: str) -> tuple[str, int]:
    """The part of a RULE from ``pos`` up to its next unescaped ``/`` (kept escaped)."""
    out = []
    while pos < len(text):
        c = text[pos]
        if c == "\\" and pos + 1 < len(text):
            out.append(text[pos:pos + 2])
            pos += 2
            continue
        if c == "/":
            return "".join(out), pos + 1
        out.append(c)
        pos += 1
    raise ValueError(f"Invalid rule: {text} in ssl.principal.mapping.rules '{rules}'")


def parse_rules(rules: str | None) -> list[MappingRule]:
    """``ssl.principal.mapping.rules``; ValueError naming an entry that is neither form."""
    text = (rules or "DEFAULT").strip()
    out: list[MappingRule] = []
    pos = 0
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        rest = text[pos:]
        if rest.startswith("DEFAULT"):
            out.append(MappingRule(None))
            pos += len("DEFAULT")
        elif rest.startswith("RULE:"):
            pattern, pos = _until_slash(text, pos + len("RULE:"), rules or "")
            replacement, pos = _until_slash(text, pos, rules or "")
            case = ""
            if pos < len(text) and text[pos] in "LU":
                case, pos = text[pos], pos + 1
            try:
                compiled = re.compile(pattern.replace("\\/", "/"))
            except re.error as e:
                raise ValueError(f"Invalid rule pattern '{pattern}': {e}") from None
            out.append(MappingRule(compiled, _java_replacement(replacement.replace("\\/", "/")), case))
        else:
            raise ValueError(f"Invalid rule: {rest.split(',', 1)[0].strip()} in ssl.principal.mapping.rules")
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos < len(text):
            if text[pos] != ",":
                raise ValueError(f"Invalid rule: {text[pos:].split(',', 1)[0].strip()} in "
                                 "ssl.principal.mapping.rules")
            pos += 1
    return out or [MappingRule(None)]


class SslPrincipalMapper:
    def __init__(self, rules: str | None = "DEFAULT") -> None:
        self.rules = parse_rules(rules)
        self.text = rules or "DEFAULT"

    def name(self, dn: str) -> str:
        for rule in self.rules:
            out = rule.apply(dn)
            if out is not None:
                return out
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self.text}")


def principal_from_dn(dn: str | None, mapper: SslPrincipalMapper) -> KafkaPrincipal:
    """The principal of a TLS peer: ANONYMOUS without a client certificate."""
    if dn is None:
        return KafkaPrincipal.ANONYMOUS
    return KafkaPrincipal(USER_TYPE, mapper.name(dn))
