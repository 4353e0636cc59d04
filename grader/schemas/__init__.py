"""JSON Schemas of every file the grader reads from or writes for others."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from grader import jsonio

SCHEMA_DIR = Path(__file__).resolve().parent


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The schema ``<name>.schema.json`` as a dict."""
    schema: dict[str, Any] = jsonio.load_file(SCHEMA_DIR / f"{name}.schema.json")
    return schema


@cache
def validator(name: str) -> jsonschema.protocols.Validator:
    """A compiled validator for the schema ``name`` (checked once against its metaschema)."""
    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def first_error(name: str, instance: Any) -> jsonschema.ValidationError | None:
    """The most relevant validation error of ``instance`` against schema ``name``, or None."""
    errors = list(validator(name).iter_errors(instance))
    if not errors:
        return None
    return jsonschema.exceptions.best_match(errors)


def json_pointer(error: jsonschema.ValidationError) -> str:
    """The JSON pointer (RFC 6901) of the instance location an error is about."""
    parts = [str(part).replace("~", "~0").replace("/", "~1") for part in error.absolute_path]
    return "/" + "/".join(parts) if parts else "/"
