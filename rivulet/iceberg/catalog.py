"""Where the tables live: the catalog and the warehouse, resolved from the broker's settings."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

NAMESPACE = "rivulet"
# The SQL catalog's name, stored in its rows: a JDBC catalog that reads them (Spark's) must be
# given this name, and one other than the namespace keeps `rivulet.<topic>` unambiguous in Spark.
CATALOG_NAME = "iceberg"


@dataclass(frozen=True, slots=True)
class CatalogSettings:
    """An SQL catalog (SQLAlchemy URI) and the warehouse its tables' files go to."""

    uri: str
    warehouse: str

    @classmethod
    def resolve(cls, uri: str, warehouse: str, data_dir: str) -> CatalogSettings:
        """The configured catalog and warehouse; empty ones default under ``data_dir`` (the
        broker's first log dir): an SQLite catalog ``iceberg/catalog.db`` and the warehouse
        ``iceberg/warehouse``, so that tables work with nothing else installed."""
        home = os.path.join(os.path.abspath(data_dir), "iceberg")
        if not uri:
            uri = "sqlite:///" + os.path.join(home, "catalog.db")
        if not warehouse:
            warehouse = "file://" + os.path.join(home, "warehouse")
        elif "://" not in warehouse:
            warehouse = "file://" + os.path.abspath(warehouse)
        return cls(uri, warehouse)

    def local_dirs(self) -> list[str]:
        """Local directories the catalog and warehouse need before the catalog opens."""
        out = []
        if self.uri.startswith("sqlite:///"):
            out.append(os.path.dirname(self.uri[len("sqlite:///"):]))
        if self.warehouse.startswith("file://"):
            out.append(self.warehouse[len("file://"):])
        return [d for d in out if d]


def open_catalog(settings: CatalogSettings) -> Catalog:
    """Open (and on first use create) the SQL catalog; imports pyiceberg."""
    from pyiceberg.catalog.sql import SqlCatalog

    for d in settings.local_dirs():
        os.makedirs(d, exist_ok=True)
    catalog = SqlCatalog(CATALOG_NAME, uri=settings.uri, warehouse=settings.warehouse)
    catalog.create_namespace_if_not_exists(NAMESPACE)
    return catalog
