"""Schemathesis over the service's own OpenAPI, against the real Serve application, bounded in time: every
operation gets a fixed number of generated requests (valid and invalid; a fixed seed), authenticated with a real
token. No answer may be a 5xx; every JSON answer must match the schema the route documents for its status."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import content_type_conformance, not_a_server_error, response_schema_conformance

pytestmark = pytest.mark.integration

EXAMPLES_PER_OPERATION = 12


@pytest.fixture(scope="module")
def api_schema(serve_url: str):  # type: ignore[no-untyped-def]
    return schemathesis.openapi.from_url(f"{serve_url}/openapi.json")


@pytest.fixture(scope="module")
def fuzz_headers(make_token) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"X-CLIENT-TOKEN": make_token("fuzz")}


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,  # the same requests every run: a failure reproduces
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors_and_answers_match_the_schema(case, fuzz_headers, serve_url) -> None:  # type: ignore[no-untyped-def]
    case.call_and_validate(
        base_url=serve_url,
        headers={**(case.headers or {}), **fuzz_headers},
        checks=[not_a_server_error, content_type_conformance, response_schema_conformance],
        timeout=120,
    )
