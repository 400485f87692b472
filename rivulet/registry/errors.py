"""Confluent Schema Registry's errors: the HTTP status, the ``error_code`` and the message of
its ``{"error_code": ..., "message": ...}`` bodies, as its Errors class and Rest*Exception
classes state them."""

from __future__ import annotations

# HTTP 404
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
SCHEMAVERSION_SOFT_DELETED = 40406
SCHEMAVERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
# HTTP 409: the status itself is the error code (RestIncompatibleSchemaException's default).
INCOMPATIBLE_SCHEMA = 409
# HTTP 422
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
ID_DOES_NOT_MATCH = 42207
INVALID_SUBJECT = 42208
SCHEMA_TOO_LARGE = 42209
# HTTP 500
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
REQUEST_FORWARDING_FAILED = 50003
UNKNOWN_LEADER = 50004
# Confluent's REST framework's own codes for a body that is not JSON or not the expected shape.
JSON_PARSE_ERROR = 50005


class RestError(Exception):
    """An answer other than 200: ``status`` is the HTTP status, ``error_code`` and ``message``
    the body's."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.error_code, "message": self.message}


def subject_not_found(subject: str) -> RestError:
    return RestError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RestError:
    return RestError(404, VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RestError:
    return RestError(404, SCHEMA_NOT_FOUND, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RestError:
    # Confluent's message has no space after the first sentence.
    return RestError(404, SUBJECT_SOFT_DELETED, f"Subject '{subject}' was soft deleted.Set permanent=true to delete "
                     "permanently")


def subject_not_soft_deleted(subject: str) -> RestError:
    return RestError(404, SUBJECT_NOT_SOFT_DELETED, f"Subject '{subject}' was not deleted first before being "
                     "permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RestError:
    return RestError(404, SCHEMAVERSION_SOFT_DELETED, f"Subject '{subject}' Version {version} was soft deleted.Set "
                     "permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RestError:
    return RestError(404, SCHEMAVERSION_NOT_SOFT_DELETED, f"Subject '{subject}' Version {version} was not deleted "
                     "first before being permanently deleted")


def subject_compatibility_not_configured(subject: str) -> RestError:
    return RestError(404, SUBJECT_COMPATIBILITY_NOT_CONFIGURED, f"Subject '{subject}' does not have subject-level "
                     "compatibility configured")


def subject_mode_not_configured(subject: str) -> RestError:
    return RestError(404, SUBJECT_MODE_NOT_CONFIGURED, f"Subject '{subject}' does not have subject-level mode "
                     "configured")


def incompatible_schema(message: str) -> RestError:
    return RestError(409, INCOMPATIBLE_SCHEMA, message)


def invalid_schema(message: str) -> RestError:
    return RestError(422, INVALID_SCHEMA, message)


def invalid_version(version: str) -> RestError:
    return RestError(422, INVALID_VERSION, f"The specified version '{version}' is not a valid version id. Allowed "
                     'values are between [1, 2^31-1] and the string "latest"')


def invalid_compatibility_level() -> RestError:
    return RestError(422, INVALID_COMPATIBILITY_LEVEL, "Invalid compatibility level. Valid values are none, backward, "
                     "forward, full, backward_transitive, forward_transitive, and full_transitive")


def invalid_mode(message: str = "Invalid mode. Valid values are READWRITE, READONLY, and IMPORT.") -> RestError:
    return RestError(422, INVALID_MODE, message)


def operation_not_permitted(message: str) -> RestError:
    return RestError(422, OPERATION_NOT_PERMITTED, message)


def reference_exists(schema_key: str) -> RestError:
    return RestError(422, REFERENCE_EXISTS, f"One or more references exist to the schema {schema_key}.")


def invalid_subject(subject: str) -> RestError:
    return RestError(422, INVALID_SUBJECT, f"The specified subject '{subject}' is not a valid.")


def schema_too_large(message: str) -> RestError:
    # A server error in Confluent's (RestServerErrorException), with a 422-range code.
    return RestError(500, SCHEMA_TOO_LARGE, message)


def store_error(message: str) -> RestError:
    return RestError(500, STORE_ERROR, message)


def operation_timeout(message: str) -> RestError:
    return RestError(500, OPERATION_TIMEOUT, message)


def unknown_leader(message: str) -> RestError:
    return RestError(500, UNKNOWN_LEADER, message)


def request_forwarding_failed(message: str) -> RestError:
    return RestError(500, REQUEST_FORWARDING_FAILED, message)
