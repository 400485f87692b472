"""Which catalog a broker's iceberg.catalog.* settings name, and the properties pyiceberg is
given for it (a real REST catalog: tests/integration/test_iceberg_rest.py)."""

from __future__ import annotations

import os

import pytest

from rivulet.common.config import ConfigError
from rivulet.iceberg.catalog import CatalogSettings
from rivulet.server.config import BROKER_CONFIGS, BrokerConfig

pytestmark = pytest.mark.fast


def test_sql_by_default_under_the_log_dir(tmp_path) -> None:
    s = CatalogSettings.resolve("", "", str(tmp_path))
    home = os.path.join(str(tmp_path), "iceberg")
    assert (s.type, s.uri, s.warehouse) == ("sql", f"sqlite:///{home}/catalog.db", f"file://{home}/warehouse")
    assert s.properties() == {"type": "sql", "uri": s.uri, "warehouse": s.warehouse}


def test_postgresql_goes_through_the_sql_catalog(tmp_path) -> None:
    uri = "postgresql+psycopg2://rivulet:secret@db:5432/iceberg"
    s = CatalogSettings.resolve(uri, "wh", str(tmp_path))
    assert (s.type, s.uri, s.warehouse) == ("sql", uri, "file://" + os.path.abspath("wh"))


def test_an_http_uri_is_a_rest_catalog_whose_server_places_the_tables(tmp_path) -> None:
    s = CatalogSettings.resolve("https://catalog.example:8181/api", "", str(tmp_path), credential="id:secret",
                                token="t0k")
    assert s.type == "rest" and s.local_dirs() == []
    assert s.properties() == {"type": "rest", "uri": "https://catalog.example:8181/api", "credential": "id:secret",
                              "token": "t0k"}
    assert "secret" not in repr(s) and "t0k" not in repr(s)
    # A warehouse given is asked for; an absolute path as a file URL.
    assert CatalogSettings.resolve("http://c:8181", "analytics", "").properties()["warehouse"] == "analytics"
    assert CatalogSettings.resolve("http://c:8181", "/srv/wh", "").warehouse == "file:///srv/wh"


def test_the_type_named_wins_over_the_uri_and_rest_needs_a_uri(tmp_path) -> None:
    assert CatalogSettings.resolve("http://gateway/db", "", str(tmp_path), "sql").type == "sql"
    with pytest.raises(ValueError, match="REST catalog needs iceberg.catalog.uri"):
        CatalogSettings.resolve("", "", str(tmp_path), "rest")
    with pytest.raises(ValueError, match="unknown Iceberg catalog type 'hive'"):
        CatalogSettings.resolve("", "", str(tmp_path), "hive")


def test_broker_settings_validate_the_type_and_keep_secrets_as_passwords() -> None:
    cfg = BrokerConfig({"iceberg.catalog.type": "rest", "iceberg.catalog.uri": "http://c:8181",
                        "iceberg.catalog.credential": "id:secret"})
    assert (cfg["iceberg.catalog.type"], cfg["iceberg.catalog.credential"], cfg["iceberg.catalog.token"]) == \
        ("rest", "id:secret", None)
    with pytest.raises(ConfigError):
        BrokerConfig({"iceberg.catalog.type": "glue"})
    assert BROKER_CONFIGS["iceberg.catalog.credential"].sensitive and BROKER_CONFIGS["iceberg.catalog.token"].sensitive


def test_external_registry_settings_validate_the_url_and_keep_the_user_info_as_a_password() -> None:
    cfg = BrokerConfig({"iceberg.schema.registry.url": "https://registry:8081",
                        "iceberg.schema.registry.basic.auth.user.info": "sam:secret"})
    assert (cfg["iceberg.schema.registry.url"], cfg["iceberg.schema.registry.basic.auth.user.info"]) == \
        ("https://registry:8081", "sam:secret")
    assert BrokerConfig({})["iceberg.schema.registry.url"] == ""  # the broker's own registry
    for bad in ("registry:8081", "ftp://registry", "http://"):
        with pytest.raises(ConfigError, match="must be an http:// or https:// URL"):
            BrokerConfig({"iceberg.schema.registry.url": bad})
    assert BROKER_CONFIGS["iceberg.schema.registry.basic.auth.user.info"].sensitive


def test_a_registry_clients_tls_comes_from_confluents_locations(tmp_path) -> None:
    import ssl

    from rivulet.registry.client import registry_client_tls
    assert registry_client_tls("http://registry:8081", str(tmp_path / "ignored.pem")) is None
    context = registry_client_tls("https://registry:8081")
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    with pytest.raises(FileNotFoundError):
        registry_client_tls("https://registry:8081", str(tmp_path / "missing-ca.pem"))
    assert BrokerConfig({})["iceberg.schema.registry.ssl.ca.location"] == ""
