"""ssl.principal.mapping.rules: Kafka's RULE:pattern/replacement/[LU] and DEFAULT."""

from __future__ import annotations

import pytest

from rivulet.security.principal import KafkaPrincipal
from rivulet.security.ssl_principal import NoMatchingRule, SslPrincipalMapper, parse_rules, principal_from_dn

pytestmark = pytest.mark.fast

DN = "CN=kafka-client,OU=ServiceUsers,O=Acme,L=Paris,ST=IDF,C=FR"


def test_default_is_the_whole_dn():
    assert SslPrincipalMapper("DEFAULT").name(DN) == DN
    assert SslPrincipalMapper(None).name(DN) == DN
    assert SslPrincipalMapper("").name(DN) == DN


@pytest.mark.parametrize("rules,dn,expected", [
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", DN, "kafka-client"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L", DN, "kafka-client@serviceusers"),
    ("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.-]*).*$/$1/U", DN, "KAFKA-CLIENT"),
    # The first rule whose pattern matches the whole DN wins; a partial match does not count.
    ("RULE:OU=ServiceUsers/nope/,RULE:^CN=([^,]*),.*$/$1/", DN, "kafka-client"),
    ("RULE:^CN=(.*?),OU=Other.*$/$1/,DEFAULT", DN, DN),
    # Escaped slashes and commas inside a pattern.
    (r"RULE:^CN=([^,]*),OU=Service\/Users,.*$/svc\/$1/", "CN=a,OU=Service/Users,O=x", "svc/a"),
    ("  RULE:^CN=([^,]*),O=(.*)$/$2-$1/L ,  DEFAULT  ", "CN=Bob,O=Acme", "acme-bob"),
    # A literal dollar in the replacement.
    (r"RULE:^CN=(.*)$/\$$1/", "CN=x", "$x"),
])
def test_rules(rules, dn, expected):
    assert SslPrincipalMapper(rules).name(dn) == expected


def test_no_matching_rule_refuses_the_dn():
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x"):
        SslPrincipalMapper("RULE:^CN=admin$/admin/").name("CN=x")


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*)$", "RULE:^CN=(.*)$/$1", "DEFAULTS", "RULE:^CN=(.*)$/$1/X",
                                   "garbage", "RULE:^CN=(.*$/$1/"])
def test_invalid_rules(rules):
    with pytest.raises(ValueError):
        parse_rules(rules)


def test_principal_of_a_tls_peer():
    mapper = SslPrincipalMapper("RULE:^CN=([^,]*),.*$/$1/")
    assert principal_from_dn("CN=app,OU=eng", mapper) == KafkaPrincipal("User", "app")
    assert principal_from_dn(None, mapper) is KafkaPrincipal.ANONYMOUS
    assert str(principal_from_dn("CN=app,OU=eng", SslPrincipalMapper())) == "User:CN=app,OU=eng"
