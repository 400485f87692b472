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


# The status of a code, where it is not the code's first three digits.
_STATUS = {INCOMPATIBLE_SCHEMA: 409,
           SCHEMA_TOO_LARGE: 500}  # a server error in Confluent's (RestServerErrorException)


def error(code: int, message: str) -> RestError:
    """The error of ``code`` with a message of the caller's."""
    return RestError(_STATUS.get(code, code // 100), code, message)


def subject_not_found(subject: str) -> RestError:
    return RestError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RestError:
    return RestError(404, VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RestError:
    return RestError(404, SCHEMA_NOT_FOUND, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def _deleted_target(subject: str, version: int | None) -> str:
    return f"Subject '{subject}'" if version is None else f"Subject '{subject}' Version {version}"


def soft_deleted(subject: str, version: int | None = None) -> RestError:
    """A soft delete of what is already soft deleted: the subject, or one version of it."""
    # Confluent's message has no space after the first sentence.
    return RestError(404, SUBJECT_SOFT_DELETED if version is None else SCHEMAVERSION_SOFT_DELETED,
                     f"{_deleted_target(subject, version)} was soft deleted.Set permanent=true to delete permanently")


def not_soft_deleted(subject: str, version: int | None = None) -> RestError:
    """A permanent delete of what was not soft deleted first: the subject, or one version of it."""
    return RestError(404, SUBJECT_NOT_SOFT_DELETED if version is None else SCHEMAVERSION_NOT_SOFT_DELETED,
                     f"{_deleted_target(subject, version)} was not deleted first before being "
                     "permanently deleted")


def not_configured(subject: str, setting: str) -> RestError:
    """No subject-level ``setting`` ("compatibility" or "mode") for the subject."""
    code = SUBJECT_COMPATIBILITY_NOT_CONFIGURED if setting == "compatibility" else SUBJECT_MODE_NOT_CONFIGURED
    return RestError(404, code, f"Subject '{subject}' does not have subject-level {setting} configured")




def invalid_version(version: str) -> RestError:
    return RestError(422, INVALID_VERSION, f"The specified version '{version}' is not a valid version id. Allowed "
                     'values are between [1, 2^31-1] and the string "latest"')


def invalid_compatibility_level() -> RestError:
    return RestError(422, INVALID_COMPATIBILITY_LEVEL, "Invalid compatibility level. Valid values are none, backward, "
                     "forward, full, backward_transitive, forward_transitive, and full_transitive")


def invalid_mode(message: str = "Invalid mode. Valid values are READWRITE, READONLY, and IMPORT.") -> RestError:
    return RestError(422, INVALID_MODE, message)



def reference_exists(schema_key: str) -> RestError:
    return RestError(422, REFERENCE_EXISTS, f"One or more references exist to the schema {schema_key}.")


def invalid_subject(subject: str) -> RestError:
    return RestError(422, INVALID_SUBJECT, f"The specified subject '{subject}' is not a valid.")
