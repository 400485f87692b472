"""Where the tables live: the catalog and the warehouse, resolved from the broker's settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

NAMESPACE = "rivulet"
# The SQL catalog's name, stored in its rows: a JDBC catalog that reads them (Spark's) must be
# given this name, and one other than the namespace keeps `rivulet.<topic>` unambiguous in Spark.
CATALOG_NAME = "iceberg"
SQL = "sql"
REST = "rest"
CATALOG_TYPES = ("", SQL, REST)


@dataclass(frozen=True, slots=True)
class CatalogSettings:
    """A catalog and the warehouse its tables' files go to: an SQL catalog (``uri`` an
    SQLAlchemy URI: SQLite, PostgreSQL) or an Iceberg REST catalog (``uri`` its base URL;
    ``credential`` OAuth2 client credentials, ``token`` a bearer token; the warehouse, if
    given, is the warehouse name or location the REST server is asked for)."""

    uri: str
    warehouse: str
    type: str = SQL
    credential: str = field(default="", repr=False)
    token: str = field(default="", repr=False)

    @classmethod
    def resolve(cls, uri: str, warehouse: str, data_dir: str, type: str = "", credential: str = "",
                token: str = "") -> CatalogSettings:
        """The configured catalog and warehouse. The type, if not given, is read from the URI
        as pyiceberg's ``load_catalog`` does: http(s) is REST, anything else SQL. An empty SQL
        catalog and warehouse default under ``data_dir`` (the broker's first log dir): an SQLite
        catalog ``iceberg/catalog.db`` and the warehouse ``iceberg/warehouse``, so that tables
        work with nothing else installed. A REST catalog's empty warehouse stays empty: the
        server places the tables."""
        if type not in CATALOG_TYPES:
            raise ValueError(f"unknown Iceberg catalog type {type!r}: {SQL} or {REST}")
        if not type:
            type = REST if uri.startswith(("http://", "https://")) else SQL
        if type == REST:
            if not uri:
                raise ValueError("an Iceberg REST catalog needs iceberg.catalog.uri, its base URL")
            if warehouse and "://" not in warehouse and os.path.isabs(warehouse):
                warehouse = "file://" + warehouse
            return cls(uri, warehouse, REST, credential, token)
        home = os.path.join(os.path.abspath(data_dir), "iceberg")
        if not uri:
            uri = "sqlite:///" + os.path.join(home, "catalog.db")
        if not warehouse:
            warehouse = "file://" + os.path.join(home, "warehouse")
        elif "://" not in warehouse:
            warehouse = "file://" + os.path.abspath(warehouse)
        return cls(uri, warehouse, SQL)

    def local_dirs(self) -> list[str]:
        """Local directories the catalog and warehouse need before the catalog opens."""
        out = []
        if self.uri.startswith("sqlite:///"):
            out.append(os.path.dirname(self.uri[len("sqlite:///"):]))
        if self.warehouse.startswith("file://"):
            out.append(self.warehouse[len("file://"):])
        return [d for d in out if d]

    def properties(self) -> dict[str, str]:
        """The catalog's pyiceberg properties (those ``load_catalog`` takes)."""
        props = {"type": self.type, "uri": self.uri}
        for name, value in (("warehouse", self.warehouse), ("credential", self.credential), ("token", self.token)):
            if value:
                props[name] = value
        return props


def open_catalog(settings: CatalogSettings) -> Catalog:
    """Open the catalog (an SQL one's tables are made on first use) and the namespace;
    imports pyiceberg."""
    for d in settings.local_dirs():
        os.makedirs(d, exist_ok=True)
    catalog: Catalog
    if settings.type == REST:
        from pyiceberg.catalog.rest import RestCatalog

        catalog = RestCatalog(CATALOG_NAME, **settings.properties())
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog(CATALOG_NAME, **settings.properties())
    catalog.create_namespace_if_not_exists(NAMESPACE)
    return catalog
