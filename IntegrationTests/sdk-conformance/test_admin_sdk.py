"""Drives TopicLedger through the official firebase-admin SDK and asserts the SDK's own results."""

import json

import google.auth.exceptions
import pytest
from firebase_admin import exceptions, messaging


def test_subscribe_and_unsubscribe_v1(app, register):
    good, other = register(), register()
    result = messaging.subscribe_to_topic([good, other, "unknown-token", "bad token"], "news", app=app)
    assert result.success_count == 2
    assert result.failure_count == 2
    assert [(e.index, e.reason) for e in result.errors] == [(2, "NOT_FOUND"), (3, "INVALID_ARGUMENT")]
    # Subscribing again answers 409 ALREADY_EXISTS, which the SDK counts as success.
    again = messaging.subscribe_to_topic(good, "/topics/news", app=app)
    assert again.success_count == 1 and again.failure_count == 0
    removed = messaging.unsubscribe_from_topic([good, "unknown-token"], "news", app=app)
    assert removed.success_count == 1
    assert [(e.index, e.reason) for e in removed.errors] == [(1, "NOT_FOUND")]
    # allow_missing: removing a subscription that is gone still succeeds for a registered token.
    assert messaging.unsubscribe_from_topic(good, "news", app=app).success_count == 1


def test_subscribe_and_unsubscribe_legacy(app, register):
    good = register()
    result = messaging.subscribe_to_topic_legacy([good, "unknown-token", "bad token"], "weather", app=app)
    assert result.success_count == 1
    assert [(e.index, e.reason) for e in result.errors] == [(1, "NOT_FOUND"), (2, "INVALID_ARGUMENT")]
    removed = messaging.unsubscribe_from_topic_legacy([good, good], "weather", app=app)
    assert removed.success_count == 2


def test_topic_names_are_checked_by_the_sdk_and_the_server(app, register):
    with pytest.raises(ValueError):
        messaging.subscribe_to_topic(register(), "bad topic!", app=app)


def test_send_to_topic_condition_and_token(app, register, log_lines):
    token = register()
    messaging.subscribe_to_topic(token, "TopicA", app=app)
    name = messaging.send(messaging.Message(topic="TopicA", notification=messaging.Notification("Hi", "There")), app=app)
    assert name.startswith("projects/demo-project/messages/")
    assert int(name.rsplit("/", 1)[1]) > 0
    condition = "'TopicA' in topics && ('TopicB' in topics || 'TopicC' in topics)"
    assert messaging.send(messaging.Message(condition=condition, data={"k": "v"}), app=app).startswith("projects/")
    assert messaging.send(messaging.Message(fid=token), app=app).startswith("projects/")
    with pytest.warns(DeprecationWarning):
        assert messaging.send(messaging.Message(token=token), app=app).startswith("projects/")
    sent = [json.loads(line) for line in log_lines() if json.loads(line)["kind"] == "sent"]
    targets = [event["target"] for event in sent[-4:]]
    assert targets == [{"topic": "TopicA"}, {"condition": condition}, {"token": token}, {"token": token}]
    assert sent[-4]["message"]["notification"] == {"title": "Hi", "body": "There"}


def test_errors_are_the_sdk_exception_classes(app):
    with pytest.raises(messaging.UnregisteredError):
        messaging.send(messaging.Message(fid="never-registered-token"), app=app)
    with pytest.raises(exceptions.InvalidArgumentError) as error:
        messaging.send(messaging.Message(condition="'A' in topics &&"), app=app)
    assert "offset" in str(error.value)
    six = " || ".join(f"'T{i}' in topics" for i in range(6))
    with pytest.raises(exceptions.InvalidArgumentError):
        messaging.send(messaging.Message(condition=six), app=app)


def test_dry_run_appends_nothing(app, log_lines):
    before = len(log_lines())
    name = messaging.send(messaging.Message(topic="news"), dry_run=True, app=app)
    assert name == "projects/demo-project/messages/fake_message_id"
    with pytest.raises(exceptions.InvalidArgumentError):
        messaging.send(messaging.Message(condition="bad"), dry_run=True, app=app)
    assert len(log_lines()) == before


def test_send_each_mixes_successes_and_failures(app, register):
    token = register()
    batch = messaging.send_each(
        [
            messaging.Message(topic="news"),
            messaging.Message(condition="'A' in topics ||"),
            messaging.Message(fid="never-registered-token"),
            messaging.Message(fid=token, data={"k": "v"}),
        ],
        app=app)
    assert batch.success_count == 2
    assert batch.failure_count == 2
    assert isinstance(batch.responses[1].exception, exceptions.InvalidArgumentError)
    assert isinstance(batch.responses[2].exception, messaging.UnregisteredError)
    assert batch.responses[3].message_id.startswith("projects/demo-project/messages/")


def test_wrong_credentials(wrong_app, auditor_app, register, log_lines):
    token = register()
    before = len(log_lines())
    # A key the server does not know: 401. google-auth answers a 401 by trying to refresh the credential,
    # as it does against FCM, and a fixed token cannot be refreshed.
    with pytest.raises(google.auth.exceptions.RefreshError):
        messaging.send(messaging.Message(topic="news"), app=wrong_app)
    # A valid key without the right: 403 PERMISSION_DENIED (errorCode SENDER_ID_MISMATCH).
    with pytest.raises(exceptions.PermissionDeniedError):
        messaging.send(messaging.Message(topic="news"), app=auditor_app)
    result = messaging.subscribe_to_topic(token, "news", app=auditor_app)
    assert result.failure_count == 1
    assert result.errors[0].reason == "SENDER_ID_MISMATCH"
    with pytest.raises(exceptions.PermissionDeniedError):
        messaging.subscribe_to_topic_legacy(token, "news", app=auditor_app)
    assert len(log_lines()) == before
