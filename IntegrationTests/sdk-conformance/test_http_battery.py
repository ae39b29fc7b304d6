"""Bad input over raw HTTP against a live server: each request gets the documented 4xx with the documented
body (checked against docs/openapi.yaml by the `contract` fixture), `ledger log` shows nothing appended, and
the server keeps serving. Also every read route once on the happy path, so the contract covers them."""

import json
import pathlib
import subprocess
import sys
import time

import pytest
import requests

from conftest import PROJECT, start_server, stop_and_verify

ADMIN = {"Authorization": "Bearer owner"}
AUDITOR = {"Authorization": "Bearer auditor"}
CLIENT = {"x-goog-api-key": "dev-client-key"}
SAMPLE_CONFIG = pathlib.Path(__file__).resolve().parents[2] / "samples" / "server-config.json"


def head_seq(server, project=PROJECT):
    """The number of events in the project's log; 0 while the server has not created its ledger (the battery
    run on its own, before any test wrote)."""
    if not (pathlib.Path(server["data"]) / project).exists():
        return 0
    out = subprocess.run(
        [server["binary"], "stats", "--data", server["data"], "--project", project, "--format", "json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["events"]


def expect_rejected(server, method, path, *, status, code, body=None, headers=None, google=True, field=None,
                    project=PROJECT):
    """Sends one bad request and checks the answer, the unchanged log and that the server still serves."""
    before = head_seq(server, project)
    data = body if isinstance(body, (bytes, type(None))) else body.encode()
    reply = requests.request(method, server["base"] + path, data=data, headers=headers or {}, timeout=10)
    assert reply.status_code == status, (method, path, reply.status_code, reply.text)
    error = reply.json()["error"]
    if google:
        assert error["code"] == status
        codes = [d["errorCode"] for d in error["details"] if d["@type"].endswith("FcmError")]
        assert codes == [code], (path, error)
        if field is not None:
            violations = [v for d in error["details"] if d["@type"].endswith("BadRequest")
                          for v in d["fieldViolations"]]
            assert [v["field"] for v in violations] == [field], error
            assert violations[0]["description"]
    else:
        assert error == code, (path, reply.text)
    assert head_seq(server, project) == before, f"{method} {path} appended events"
    assert requests.get(server["base"] + "/healthz", timeout=5).status_code == 200
    return reply


SEND = f"/v1/projects/{PROJECT}/messages:send"


@pytest.mark.parametrize("body,field", [
    ('{"message":', None),                                              # malformed JSON
    ("[1,2]", None),                                                    # not an object
    ('"text"', None),
    ('{"message":"x"}', "message"),                                     # wrong JSON types
    ('{"message":{"topic":5}}', "message.topic"),
    ('{"message":{"topic":"a","data":{"k":1}}}', "message.data.k"),
    ('{"message":{"topic":"a","data":["k"]}}', "message.data"),
    ('{"message":{"topic":"a"},"validate_only":"yes"}', "validate_only"),
    ('{"message":{"topic":"a"},"extra":1}', "extra"),                  # unknown fields
    ('{"message":{"topic":"a","bogus":1}}', "message.bogus"),
    ('{"message":{"topic":"a","notification":{"tilte":"x"}}}', "message.notification.tilte"),
    ('{"message":{}}', "message"),                                      # no target
    ('{"message":{"topic":"a","condition":"\'a\' in topics"}}', "message"),  # two targets
    ('{"message":{"topic":"bad topic!"}}', "message.topic"),            # invalid topics
    ('{"message":{"topic":"%s"}}' % ("t" * 901), "message.topic"),
    ('{"message":{"topic":""}}', "message.topic"),
    ('{"message":{"condition":"\'a\' in topics &&"}}', "message.condition"),  # invalid conditions
    ('{"message":{"condition":"%s"}}' % " || ".join(f"'t{i}' in topics" for i in range(6)), "message.condition"),
    ('{"message":{"condition":"%s\'a\' in topics%s"}}' % ("(" * 100, ")" * 100), "message.condition"),
    ('{"message":{"condition":"\'a\' IN topics"}}', "message.condition"),
    ('{"message":{"topic":"a","data":{"from":"x"}}}', "message.data.from"),  # reserved keys
    ('{"message":{"topic":"a","data":{"gcm.notification":"x"}}}', "message.data.gcm.notification"),
    ('{"message":{"topic":"a","data":{"k":"%s"}}}' % ("v" * 5000), "message"),  # payload over 4096 bytes
    ('{"message":{"token":"bad token"}}', "message.token"),
])
def test_send_rejects_bad_input(server, body, field):
    reply = expect_rejected(server, "POST", SEND, body=body, headers=ADMIN, status=400, code="INVALID_ARGUMENT",
                            field=field)
    assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_send_rejects_empty_and_huge_bodies(server):
    expect_rejected(server, "POST", SEND, body=b"", headers=ADMIN, status=400, code="INVALID_ARGUMENT")
    huge = b'{"message":{"topic":"a","data":{"k":"' + b"v" * (2 << 20) + b'"}}}'
    expect_rejected(server, "POST", SEND, body=huge, headers=ADMIN, status=413, code="INVALID_ARGUMENT")


def test_send_to_an_unregistered_token_is_404_unregistered(server):
    expect_rejected(server, "POST", SEND, body='{"message":{"token":"never-registered"}}', headers=ADMIN,
                    status=404, code="UNREGISTERED")


def write_routes(token):
    """Every route that appends, with a body it would accept from the right credential."""
    base = f"/v1/projects/{PROJECT}/registrations"
    return [
        ("POST", SEND, '{"message":{"topic":"a"}}'),
        ("POST", f"{base}/{token}/topicSubscriptions?topicName=a", "{}"),
        ("DELETE", f"{base}/{token}/topicSubscriptions/a?allowMissing=true", None),
        ("DELETE", f"{base}/{token}", None),
        ("POST", base, "{}"),
    ]


def iid_routes(token):
    return [
        ("POST", "/iid/v1:batchAdd", json.dumps({"to": "/topics/a", "registration_tokens": [token]})),
        ("POST", "/iid/v1:batchRemove", json.dumps({"to": "/topics/a", "registration_tokens": [token]})),
        ("POST", f"/iid/v1/{token}/rel/topics/a", None),
        ("GET", f"/iid/info/{token}", None),
    ]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic b3duZXI="},
                                     {"x-goog-api-key": "wrong"}])
def test_missing_or_unknown_credentials_are_401(server, register, headers):
    token = register()
    for method, path, body in write_routes(token) + [("GET", f"/v1/projects/{PROJECT}/topics", None)]:
        expect_rejected(server, method, path, body=body, headers=headers, status=401, code="THIRD_PARTY_AUTH_ERROR")
    for method, path, body in iid_routes(token):
        expect_rejected(server, method, path, body=body, headers=headers, google=False, status=401,
                        code="UNAUTHENTICATED")


def test_the_auditor_credential_cannot_write(server, register):
    token = register()
    for method, path, body in write_routes(token):
        expect_rejected(server, method, path, body=body, headers=AUDITOR, status=403, code="SENDER_ID_MISMATCH")
    for method, path, body in iid_routes(token):
        if method == "GET":  # reading an instance's topics is the auditor's too
            continue
        expect_rejected(server, method, path, body=body, headers=AUDITOR, google=False, status=403,
                        code="PERMISSION_DENIED")


def test_the_client_key_cannot_send_or_use_instance_id(server, register):
    token = register()
    expect_rejected(server, "POST", SEND, body='{"message":{"topic":"a"}}', headers=CLIENT, status=403,
                    code="SENDER_ID_MISMATCH")
    expect_rejected(server, "GET", f"/v1/projects/{PROJECT}/topics", headers=CLIENT, status=403,
                    code="SENDER_ID_MISMATCH")
    for method, path, body in iid_routes(token):
        expect_rejected(server, method, path, body=body, headers={"Authorization": "Bearer dev-client-key"},
                        google=False, status=403, code="PERMISSION_DENIED")


def test_unknown_and_malformed_projects(server):
    # A well-formed project this key is not for: 403, never revealing whether it exists.
    expect_rejected(server, "POST", "/v1/projects/someone-else/messages:send", body='{"message":{"topic":"a"}}',
                    headers=ADMIN, status=403, code="SENDER_ID_MISMATCH")
    expect_rejected(server, "GET", "/v1/projects/someone-else/topics", headers=ADMIN, status=403,
                    code="SENDER_ID_MISMATCH")
    # Not a project id at all: 404.
    expect_rejected(server, "POST", "/v1/projects/..%2F..%2Fetc/messages:send", body='{"message":{"topic":"a"}}',
                    headers=ADMIN, status=404, code="NOT_FOUND")


@pytest.mark.parametrize("body", [
    '{"to":"/topics/a","registration_tokens":[]}',                     # empty list
    '{"to":"/topics/a","registration_tokens":%s}' % json.dumps([f"t{i}" for i in range(1001)]),  # 1001 tokens
    '{"to":"/topics/bad topic","registration_tokens":["t"]}',          # bad topics
    '{"to":"/topics/%s","registration_tokens":["t"]}' % ("t" * 901),
    '{"to":"","registration_tokens":["t"]}',
    '{"registration_tokens":["t"]}',                                   # missing `to`
    '{"to":5,"registration_tokens":["t"]}',                            # wrong types
    '{"to":"/topics/a","registration_tokens":"t"}',
    '{"to":"/topics/a",',                                              # malformed JSON
    "",                                                                # empty body
])
def test_instance_id_batches_reject_bad_requests_whole(server, body):
    for route in ("/iid/v1:batchAdd", "/iid/v1:batchRemove"):
        expect_rejected(server, "POST", route, body=body, headers=ADMIN, google=False, status=400,
                        code="INVALID_ARGUMENT")


def test_instance_id_huge_body_and_bad_path_values(server, register):
    huge = json.dumps({"to": "/topics/a", "registration_tokens": ["t" * 4000] * 300})
    expect_rejected(server, "POST", "/iid/v1:batchAdd", body=huge, headers=ADMIN, google=False, status=413,
                    code="INVALID_ARGUMENT")
    token = register()
    expect_rejected(server, "POST", f"/iid/v1/{token}/rel/topics/bad%20topic", headers=ADMIN, google=False,
                    status=400, code="INVALID_ARGUMENT")
    expect_rejected(server, "POST", "/iid/v1/bad%20token/rel/topics/a", headers=ADMIN, google=False, status=400,
                    code="INVALID_ARGUMENT")
    expect_rejected(server, "POST", "/iid/v1/unknown-token/rel/topics/a", headers=ADMIN, google=False,
                    status=404, code="NOT_FOUND")
    expect_rejected(server, "GET", "/iid/info/unknown-token", headers=ADMIN, google=False, status=404,
                    code="NOT_FOUND")
    expect_rejected(server, "GET", "/iid/info/bad%20token", headers=ADMIN, google=False, status=400,
                    code="INVALID_ARGUMENT")


@pytest.mark.parametrize("query,field", [
    ("?topicName=bad%20topic", "topicName"),
    ("?topicName=" + "t" * 901, "topicName"),
    ("?topicName=", "topicName"),
    ("", "topicName"),
])
def test_v1_subscribe_rejects_bad_topics(server, register, query, field):
    path = f"/v1/projects/{PROJECT}/registrations/{register()}/topicSubscriptions{query}"
    expect_rejected(server, "POST", path, body="{}", headers=ADMIN, status=400, code="INVALID_ARGUMENT",
                    field=field)


def test_v1_topic_management_rejects_bad_tokens_and_bodies(server, register):
    base = f"/v1/projects/{PROJECT}/registrations"
    expect_rejected(server, "POST", f"{base}/bad%20token/topicSubscriptions?topicName=a", body="{}",
                    headers=ADMIN, status=400, code="INVALID_ARGUMENT", field="registration token")
    expect_rejected(server, "POST", f"{base}/unknown-token/topicSubscriptions?topicName=a", body="{}",
                    headers=ADMIN, status=404, code="NOT_FOUND")
    # The device itself is told UNREGISTERED: its SDK registers again.
    expect_rejected(server, "POST", f"{base}/unknown-token/topicSubscriptions?topicName=a", body="{}",
                    headers={"x-goog-api-key": "dev-client-key"}, status=404, code="UNREGISTERED")
    token = register()
    expect_rejected(server, "POST", f"{base}/{token}/topicSubscriptions?topicName=a", body="{",
                    headers=ADMIN, status=400, code="INVALID_ARGUMENT")
    expect_rejected(server, "DELETE", f"{base}/{token}/topicSubscriptions/a", headers=ADMIN, status=404,
                    code="NOT_FOUND")
    expect_rejected(server, "GET", f"{base}/{token}/topicSubscriptions/a", headers=ADMIN, status=404,
                    code="NOT_FOUND")
    for query in ("?pageSize=0", "?pageSize=-1", "?pageSize=x"):
        expect_rejected(server, "GET", f"{base}/{token}/topicSubscriptions{query}", headers=ADMIN, status=400,
                        code="INVALID_ARGUMENT", field="pageSize")
    # Above the maximum is coerced to it (Google AIP-158), not refused.
    clamped = requests.get(server["base"] + f"{base}/{token}/topicSubscriptions?pageSize=2001", headers=ADMIN)
    assert clamped.status_code == 200 and clamped.json() == {"topicSubscriptions": []}
    expect_rejected(server, "DELETE", f"{base}/unknown-token", headers=ADMIN, status=404, code="NOT_FOUND")
    expect_rejected(server, "DELETE", f"{base}/bad%20token", headers=ADMIN, status=400, code="INVALID_ARGUMENT")


@pytest.mark.parametrize("body,field", [
    ('{"platform":5}', "platform"),
    ('{"platform":"ios","colour":"red"}', "colour"),
    ('{"appId":"%s"}' % ("a" * 300), "appId"),
    ("{", None),
])
def test_registration_rejects_bad_bodies(server, body, field):
    expect_rejected(server, "POST", f"/v1/projects/{PROJECT}/registrations", body=body, headers=CLIENT,
                    status=400, code="INVALID_ARGUMENT", field=field)


def test_read_routes_answer_what_the_contract_says(server, register):
    token = register()
    base = f"/v1/projects/{PROJECT}/registrations/{token}"
    get = lambda path, headers=ADMIN: requests.get(server["base"] + path, headers=headers, timeout=10)
    assert requests.post(server["base"] + f"/iid/v1/{token}/rel/topics/reads", headers=ADMIN).json() == {}
    assert get(f"{base}/topicSubscriptions/reads").json()["topicName"] == "reads"
    listed = get(f"{base}/topicSubscriptions?pageSize=1", AUDITOR).json()
    assert [s["topicName"] for s in listed["topicSubscriptions"]] == ["reads"]
    topics = get(f"/v1/projects/{PROJECT}/topics", AUDITOR).json()["topics"]
    assert {"name": "reads", "subscriberCount": 1} in topics
    info = get(f"/iid/info/{token}?details=true").json()
    assert list(info["rel"]["topics"]) == ["reads"] and info["platform"] == "IOS"
    assert get(f"/iid/info/{token}?details=true", AUDITOR).json() == info
    metrics = get("/metrics", {}).text
    assert "ledger_http_requests_total" in metrics and PROJECT not in metrics
    assert "ledger_project_events" in get(f"/v1/projects/{PROJECT}/metrics", AUDITOR).text
    assert get(f"/v1/projects/{PROJECT}/metrics", {}).status_code == 401
    assert requests.delete(server["base"] + f"/v1/projects/{PROJECT}/registrations/{token}",
                           headers=CLIENT).json() == {}
    assert get(f"/iid/info/{token}").status_code == 404


@pytest.fixture(scope="module")
def configured(contract):
    """A second server with the sample config: two projects, each with its own keys."""
    process, base, data, binary = start_server(["--config", str(SAMPLE_CONFIG)])
    yield {"base": base, "data": data, "binary": binary}
    stop_and_verify(process, data, binary, projects=("shop-prod", "news-staging"))


def test_cross_project_credentials_reach_nothing(configured):
    shop = {"Authorization": "Bearer shop-admin-secret"}
    news = {"Authorization": "Bearer news-admin-secret"}
    reply = requests.post(configured["base"] + "/v1/projects/shop-prod/registrations",
                          headers={"x-goog-api-key": "shop-client-key"}, json={"platform": "android"})
    token = reply.json()["token"]
    assert requests.post(configured["base"] + "/iid/v1:batchAdd", headers=shop,
                         json={"to": "/topics/deals", "registration_tokens": [token]}).json() == {"results": [{}]}
    requests.post(configured["base"] + "/v1/projects/news-staging/registrations",
                  headers={"x-goog-api-key": "news-client-key"}, json={})
    for method, path, body in [
        ("POST", "/v1/projects/shop-prod/messages:send", '{"message":{"topic":"deals"}}'),
        ("POST", f"/v1/projects/shop-prod/registrations/{token}/topicSubscriptions?topicName=x", "{}"),
        ("DELETE", f"/v1/projects/shop-prod/registrations/{token}", None),
        ("GET", "/v1/projects/shop-prod/topics", None),
        ("GET", f"/v1/projects/shop-prod/registrations/{token}/topicSubscriptions", None),
    ]:
        expect_rejected(configured, method, path, body=body, headers=news, status=403, code="SENDER_ID_MISMATCH",
                        project="shop-prod")
    # The dev key means nothing to a configured server; the news key's batches act on news only.
    expect_rejected(configured, "GET", "/v1/projects/shop-prod/topics", headers=ADMIN, status=401,
                    code="THIRD_PARTY_AUTH_ERROR", project="shop-prod")
    results = requests.post(configured["base"] + "/iid/v1:batchRemove", headers=news,
                            json={"to": "/topics/deals", "registration_tokens": [token]}).json()
    assert results == {"results": [{"error": "NOT_FOUND"}]}
    topics = requests.get(configured["base"] + "/v1/projects/shop-prod/topics",
                          headers={"Authorization": "Bearer shop-auditor-secret"}).json()["topics"]
    assert topics == [{"name": "deals", "subscriberCount": 1}]


def test_audit_api_answers_the_auditor_and_refuses_the_rest(server, register):
    tokens = sorted([register(), register(), register()], key=lambda t: t.encode())
    requests.post(server["base"] + "/iid/v1:batchAdd", headers=ADMIN,
                  json={"to": "/topics/audited", "registration_tokens": tokens[:2]}).raise_for_status()
    name = requests.post(server["base"] + SEND, headers=ADMIN,
                         json={"message": {"condition": "'audited' in topics && !('other' in topics)"}}).json()["name"]
    audit = f"/v1/projects/{PROJECT}/audit"
    replay_path = f"{audit}/messages/{name.rsplit('/', 1)[1]}"
    # The audience is recorded moments after the send is acknowledged.
    for _ in range(100):
        replay = requests.get(server["base"] + replay_path, headers=AUDITOR).json()
        if replay["matchesRecord"]:
            break
        time.sleep(0.05)
    assert replay["matchesRecord"] and replay["recipients"] == tokens[:2] and replay["recordedCount"] == 2
    page = requests.get(server["base"] + replay_path + "?pageSize=1", headers=ADMIN).json()
    assert page["recipients"] == tokens[:1] and page["nextPageToken"] == tokens[0]
    instance = requests.get(server["base"] + f"{audit}/instances/{tokens[0]}?atSeq=1", headers=AUDITOR).json()
    assert instance["token"] == tokens[0]
    topic = requests.get(server["base"] + f"{audit}/topics/audited?members=true", headers=AUDITOR).json()
    assert topic["subscriberCount"] == 2 and topic["members"] == tokens[:2]
    history = requests.get(server["base"] + f"{audit}/topics/audited/history", headers=AUDITOR).json()
    assert [entry["count"] for entry in history["history"]] == [1, 2]
    events = requests.get(server["base"] + f"{audit}/events?fromSeq=1&limit=3", headers=AUDITOR)
    assert [json.loads(line)["seq"] for line in events.text.splitlines()] == [1, 2, 3]
    for path, status, code in [
        (f"{audit}/messages/1", 404, "NOT_FOUND"),
        (f"{audit}/messages/abc", 400, "INVALID_ARGUMENT"),
        (f"{audit}/instances/unknown-token", 404, "NOT_FOUND"),
        (f"{audit}/topics/never-had-one", 404, "NOT_FOUND"),
        (f"{audit}/topics/audited/history?pageToken=x", 400, "INVALID_ARGUMENT"),
        (f"{audit}/events?fromSeq=0", 400, "INVALID_ARGUMENT"),
    ]:
        expect_rejected(server, "GET", path, headers=AUDITOR, status=status, code=code)
    for path in (replay_path, f"{audit}/instances/{tokens[0]}", f"{audit}/topics/audited",
                 f"{audit}/topics/audited/history", f"{audit}/events"):
        expect_rejected(server, "GET", path, headers=CLIENT, status=403, code="SENDER_ID_MISMATCH")
        expect_rejected(server, "GET", path, headers={}, status=401, code="THIRD_PARTY_AUTH_ERROR")


def test_proofs_verify_with_the_independent_verifier(server, register):
    """Signed checkpoint, message proof and consistency proof over HTTP, each checked by tools/merkle's Python
    verifier with the key `ledger checkpoint --public-key` prints; tampering is refused."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "merkle"))
    import verify_proof

    token = register()
    requests.post(server["base"] + f"/iid/v1/{token}/rel/topics/proved", headers=ADMIN).raise_for_status()
    name = requests.post(server["base"] + SEND, headers=ADMIN, json={"message": {"topic": "proved"}}).json()["name"]
    message_id = name.rsplit("/", 1)[1]
    project = f"/v1/projects/{PROJECT}"
    for _ in range(100):  # the audience is recorded moments after the send
        if requests.get(server["base"] + f"{project}/audit/messages/{message_id}", headers=AUDITOR).json()[
                "matchesRecord"]:
            break
        time.sleep(0.05)
    note = requests.get(server["base"] + f"{project}/ledger:checkpoint", headers=AUDITOR)
    assert note.status_code == 200 and note.headers["content-type"].startswith("text/plain")
    key = subprocess.run([server["binary"], "checkpoint", "--public-key", "--data", server["data"]],
                         check=True, capture_output=True, text=True).stdout.strip()
    origin, size, root = verify_proof.verify_note(note.text, key)
    assert origin == f"topicledger/{PROJECT}" and size == head_seq(server)
    proof = requests.get(server["base"] + f"{project}/messages/{message_id}:proof", headers=ADMIN).json()
    assert [entry["kind"] for entry in proof["entries"]] == ["sent", "audience"]
    assert verify_proof.verify_message_proof(proof, key).startswith("2 events included")
    tampered = json.loads(json.dumps(proof))
    tampered["entries"][0]["inclusionProof"][0] = tampered["entries"][1]["inclusionProof"][0]
    with pytest.raises(verify_proof.Refused):
        verify_proof.verify_message_proof(tampered, key)
    requests.post(server["base"] + f"/iid/v1/{token}/rel/topics/later", headers=ADMIN).raise_for_status()
    consistency = requests.get(server["base"] + f"{project}/ledger:consistency?from={size}", headers=AUDITOR).json()
    assert consistency["to"] == size + 1
    assert verify_proof.verify_consistency_proof(consistency, key).endswith(f"size {size + 1}")
    for path, status, code in [
        (f"{project}/messages/1:proof", 404, "NOT_FOUND"),
        (f"{project}/messages/abc:proof", 400, "INVALID_ARGUMENT"),
        (f"{project}/ledger:consistency", 400, "INVALID_ARGUMENT"),
        (f"{project}/ledger:consistency?from=5&to=99999", 400, "INVALID_ARGUMENT"),
    ]:
        expect_rejected(server, "GET", path, headers=AUDITOR, status=status, code=code)
    for path in (f"{project}/ledger:checkpoint", f"{project}/messages/{message_id}:proof",
                 f"{project}/ledger:consistency?from=1"):
        expect_rejected(server, "GET", path, headers=CLIENT, status=403, code="SENDER_ID_MISMATCH")
        expect_rejected(server, "GET", path, headers={}, status=401, code="THIRD_PARTY_AUTH_ERROR")


def test_readiness_and_unknown_routes(server):
    """/readyz answers 200 while the project can be served; an unknown route is a Google-shaped 404 (checked
    here by hand: the contract lists only real routes)."""
    ready = requests.get(server["base"] + "/readyz", timeout=5)
    assert ready.status_code == 200 and ready.json() == {"status": "ok"}
    session = requests.Session()
    for path in ["/nope", f"/v1/projects/{PROJECT}/nothing-here"]:
        # A raw socket-level request outside the contract hook: the hook only checks documented paths.
        reply = requests.adapters.HTTPAdapter().send(
            session.prepare_request(requests.Request("GET", server["base"] + path)), timeout=5)
        assert reply.status_code == 404
        error = reply.json()["error"]
        assert error["code"] == 404 and error["status"] == "NOT_FOUND" and error["message"]


def test_the_cluster_status_is_404_without_a_cluster_and_401_without_a_key(server):
    assert requests.get(f"{server['base']}/v1/cluster", timeout=10).status_code == 401
    response = requests.get(f"{server['base']}/v1/cluster", headers=ADMIN, timeout=10)
    assert response.status_code == 404
    assert response.json()["error"]["status"] == "NOT_FOUND"
    # The client key, which every app holds, is not a credential here.
    assert requests.get(f"{server['base']}/v1/cluster", headers={"Authorization": "Bearer dev-client-key"},
                        timeout=10).status_code == 401
