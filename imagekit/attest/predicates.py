"""The predicate types' JSON schemas: generated from their models, committed, held equal.

Each kind that signs its verdict names its predicate type and model in its spec
(imagekit.kinds); for imagekit's own types (no published type carries an audit's checks,
scope, profile and evidence digests) the JSON schema is committed under
imagekit/attest/schemas/ and a unit test holds it equal to the model's, so the document
others read and the code that writes it cannot drift apart. The URIs name the types; they
are not promised to resolve.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

SCHEMAS = Path(__file__).with_name("schemas")


def schema_document(model: type[BaseModel], predicate_type: str) -> dict[str, Any]:
    """The JSON schema committed for a predicate model."""
    document = model.model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["$id"] = predicate_type
    return document


def schema_text(model: type[BaseModel], predicate_type: str) -> str:
    return json.dumps(schema_document(model, predicate_type), indent=2, sort_keys=True) + "\n"
