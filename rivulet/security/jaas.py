"""Kafka's JAAS configuration syntax (``sasl.jaas.config`` and its listener-prefixed forms).

One entry is ``<LoginModule class> <flag> [name=value ...];`` where the flag is required,
requisite, sufficient or optional and a value is a bare word or a quoted string (double or
single quotes, backslash escapes). Kafka's ``sasl.jaas.config`` holds exactly one entry."""

from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class JaasError(ValueError):
    pass


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs: 'word', 'quoted', '=' or ';'."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            out.append((c, c))
            i += 1
        elif c in "\"'":
            quote, i, buf = c, i + 1, []
            while True:
                if i >= n:
                    raise JaasError("unterminated quoted value in JAAS configuration")
                ch = text[i]
                if ch == "\\" and i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                    continue
                i += 1
                if ch == quote:
                    break
                buf.append(ch)
            out.append(("quoted", "".join(buf)))
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JaasError("unterminated comment in JAAS configuration")
            i = end + 2
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in "=;\"'":
                i += 1
            out.append(("word", text[start:i]))
    return out


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every login module entry of ``text``; JaasError names what is wrong."""
    toks = _tokens(text)
    entries: list[JaasEntry] = []
    i = 0
    while i < len(toks):
        kind, module = toks[i]
        if kind != "word":
            raise JaasError(f"JAAS configuration: expected a login module class, found '{module}'")
        if i + 1 >= len(toks) or toks[i + 1][0] != "word" or toks[i + 1][1].lower() not in FLAGS:
            raise JaasError(f"JAAS configuration: login module {module} needs a control flag "
                            f"({', '.join(FLAGS)})")
        flag = toks[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(toks):
                raise JaasError("JAAS configuration: an entry must end with ';'")
            kind, name = toks[i]
            if kind == ";":
                i += 1
                break
            if kind != "word" or i + 2 >= len(toks) or toks[i + 1][0] != "=" or toks[i + 2][0] not in (
                    "word", "quoted"):
                raise JaasError(f"JAAS configuration: expected name=value in the options of {module}, "
                                f"found '{name}'")
            options[name] = toks[i + 2][1]
            i += 3
        entries.append(JaasEntry(module, flag, options))
    return entries


def single_entry(text: str, what: str = "sasl.jaas.config") -> JaasEntry:
    """The one entry ``sasl.jaas.config`` must hold, as Kafka requires."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasError(f"{what} must contain exactly one login module, found {len(entries)}")
    return entries[0]


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
