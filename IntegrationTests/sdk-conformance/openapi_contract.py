"""Checks every response of the server against docs/openapi.yaml.

The document itself is validated with openapi-spec-validator; each response is matched to its operation (path
template and method), its status must be one the operation lists, and its JSON body must validate against the
listed schema (jsonschema, draft 2020-12, which is what OpenAPI 3.1 schemas are). Which (operation, status)
pairs were seen is recorded, so the suite can require that every documented operation was exercised.
"""

import contextlib
import json
import pathlib
import re
from urllib.parse import urlsplit

import jsonschema
import referencing
import referencing.jsonschema
import yaml
from openapi_spec_validator import validate as validate_spec

SPEC_PATH = pathlib.Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
SPEC_URI = "urn:topicledger:openapi"


class Contract:
    def __init__(self, path=SPEC_PATH):
        self.spec = yaml.safe_load(path.read_text())
        validate_spec(self.spec)
        resource = referencing.Resource.from_contents(
            self.spec, default_specification=referencing.jsonschema.DRAFT202012)
        self.registry = referencing.Registry().with_resource(SPEC_URI, resource)
        self.routes = []
        for template, item in self.spec["paths"].items():
            pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
            # Literal segments outrank parameters: `/iid/v1:batchAdd` before `/iid/v1/{token}/…`.
            literal = len(re.sub(r"\{[^}]+\}", "", template))
            self.routes.append((literal, re.compile(pattern), template, item))
        self.routes.sort(key=lambda route: -route[0])
        self.seen = set()

    def operations(self):
        """Every (path template, method) the document lists."""
        return {(template, method) for _, _, template, item in self.routes for method in item
                if method in ("get", "post", "put", "delete", "patch")}

    def match(self, method, url):
        path = urlsplit(url).path
        for _, pattern, template, item in self.routes:
            if pattern.match(path) and method.lower() in item:
                return template, item[method.lower()]
        return None, None

    def check(self, method, url, status, headers, read_body):
        """Raises AssertionError when the response breaks the contract. `read_body()` gives the body; it is not
        called for event streams, which do not end."""
        template, operation = self.match(method, url)
        assert operation is not None, f"{method} {urlsplit(url).path} is not in docs/openapi.yaml"
        responses = operation["responses"]
        key = str(status)
        streaming = headers.get("content-type", "").startswith("text/event-stream")
        body = b"" if streaming else read_body()
        assert key in responses, (
            f"{method} {template} answered {status}, which docs/openapi.yaml does not list "
            f"({sorted(responses)}): {body[:300]!r}")
        self.seen.add((template, method.lower(), key))
        response = responses[key]
        pointer = f"/paths/{_escape(template)}/{method.lower()}/responses/{key}"
        if "$ref" in response:
            pointer = response["$ref"][1:]
            response = self._resolve(response["$ref"])
        for name, header in response.get("headers", {}).items():
            if header.get("required"):
                assert name.lower() in {h.lower() for h in headers}, f"{method} {template} {status}: no {name} header"
        content = response.get("content", {})
        if "application/json" in content:
            assert headers.get("content-type", "").startswith("application/json"), (
                f"{method} {template} {status}: content-type {headers.get('content-type')!r}")
            document = json.loads(body)
            schema = {"$ref": f"{SPEC_URI}#{pointer}/content/application~1json/schema"}
            validator = jsonschema.Draft202012Validator(schema, registry=self.registry)
            errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
            assert not errors, f"{method} {template} {status}: {errors[0].message} in {document}"
        elif "application/x-ndjson" in content:
            assert headers.get("content-type", "").startswith("application/x-ndjson")
            schema = {"$ref": f"{SPEC_URI}#{pointer}/content/application~1x-ndjson/schema"}
            validator = jsonschema.Draft202012Validator(schema, registry=self.registry)
            for line in body.decode().splitlines():
                errors = list(validator.iter_errors(json.loads(line)))
                assert not errors, f"{method} {template} {status}: {errors[0].message} in {line}"
        elif "text/event-stream" in content:
            assert streaming, f"{method} {template} {status}: content-type {headers.get('content-type')!r}"
        elif "text/plain" in content:
            assert headers.get("content-type", "").startswith("text/plain")

    def _resolve(self, ref):
        node = self.spec
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node


@contextlib.contextmanager
def checking_responses(checker, applies):
    """While inside, every response `requests` receives for a request whose URL `applies(url)` accepts is checked
    by `checker` (every Session goes through `Session.send`)."""
    import requests

    original = requests.Session.send

    def send(session, request, **kwargs):
        response = original(session, request, **kwargs)
        if applies(request.url):
            checker.check(request.method, request.url, response.status_code, response.headers,
                          lambda: response.content)
        return response

    requests.Session.send = send
    try:
        yield checker
    finally:
        requests.Session.send = original


def _escape(template):
    return template.replace("~", "~0").replace("/", "~1")
