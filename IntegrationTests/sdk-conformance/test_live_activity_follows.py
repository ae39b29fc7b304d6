"""A device's Live Activity follows and push-to-start tokens (docs/server.md, "Topics' Live Activities") through the
suite's server, every answer checked against docs/openapi.yaml: follow, replace, list, unfollow and set a
push-to-start token answer 2xx; a bad token, a registration that is not ios, an unknown one and a wrong credential
answer 4xx and change nothing."""

import json

import requests

from conftest import CLIENT_KEY, PROJECT

CLIENT = {"x-goog-api-key": CLIENT_KEY}
AUDITOR = {"Authorization": "Bearer auditor"}


def _url(server, path):
    return f"{server['base']}/v1/projects/{PROJECT}/registrations/{path}"


def test_follows_and_push_to_start_tokens_answer_as_documented(server, register, log_lines):
    device = register("ios")
    token = "a1" * 32
    followed = requests.put(_url(server, f"{device}/liveActivities/match-42"), headers=CLIENT,
                            json={"pushToken": token}, timeout=10)
    assert followed.status_code == 200, followed.text
    assert followed.json() == {"topic": "match-42", "pushToken": token}
    replaced = requests.put(_url(server, f"{device}/liveActivities/match-42"), headers=CLIENT,
                            json={"pushToken": "B2" * 32}, timeout=10)
    assert replaced.status_code == 200 and replaced.json()["pushToken"] == "b2" * 32, replaced.text
    started = requests.put(_url(server, f"{device}/pushToStartTokens/MatchAttributes"), headers=CLIENT,
                           json={"pushToken": "c3" * 32}, timeout=10)
    assert started.status_code == 200, started.text
    held = requests.get(_url(server, f"{device}/liveActivities"), headers=AUDITOR, timeout=10)
    assert held.status_code == 200, held.text
    assert held.json()["liveActivities"] == [{"topic": "match-42", "pushToken": "b2" * 32}]
    removed = requests.delete(_url(server, f"{device}/liveActivities/match-42"), headers=CLIENT, timeout=10)
    assert removed.status_code == 200 and removed.json() == {}, removed.text
    assert requests.get(_url(server, f"{device}/liveActivities"), headers=AUDITOR,
                        timeout=10).json()["liveActivities"] == []
    kinds = [json.loads(line)["kind"] for line in log_lines()]
    assert kinds.count("liveActivityFollowed") >= 2 and "liveActivityUnfollowed" in kinds
    assert "pushToStartTokenSet" in kinds


def test_refusals_answer_4xx_and_change_nothing(server, register, log_lines):
    device = register("ios")
    android = register("android")
    before = len(log_lines())
    cases = [
        ("put", f"{device}/liveActivities/match-42", CLIENT, {"pushToken": "abc"}, 400),
        ("put", f"{android}/liveActivities/match-42", CLIENT, {"pushToken": "a1" * 32}, 400),
        ("put", f"{device}/pushToStartTokens/Match%20Attributes", CLIENT, {"pushToken": "a1" * 32}, 400),
        ("put", "never-registered-token/liveActivities/match-42", CLIENT, {"pushToken": "a1" * 32}, 404),
        ("delete", "never-registered-token/liveActivities/match-42", CLIENT, None, 404),
        ("get", "never-registered-token/liveActivities", AUDITOR, None, 404),
        ("put", f"{device}/liveActivities/match-42", {"x-goog-api-key": "wrong"}, {"pushToken": "a1" * 32}, 401),
    ]
    for method, path, headers, body, status in cases:
        reply = requests.request(method, _url(server, path), headers=headers, json=body, timeout=10)
        assert reply.status_code == status, (method, path, reply.status_code, reply.text)
    assert len(log_lines()) == before
