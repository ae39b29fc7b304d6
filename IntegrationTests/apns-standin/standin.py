"""An Apple Push Notification service stand-in for tests and benchmarks, written from Apple's documentation
("Sending notification requests to APNs", "Establishing a token-based connection to APNs", "Handling
notification responses from APNs").

It is a real HTTP/2-over-TLS server (ALPN h2 only, as api.push.apple.com) that answers
`POST /3/device/{token}` as APNs does:

- the provider token: `authorization: bearer <JWT>`, ES256, header {alg, kid}, claims {iss, iat}, verified with
  the team's public key: a bad signature, kid or iss is 403 InvalidProviderToken; an `iat` more than an hour
  old is 403 ExpiredProviderToken, after which the connection answers nothing else (Apple leaves it unusable);
  a new token for the same key less than `--token-update-interval` seconds (20 minutes) after the last new one
  is 429 TooManyProviderTokenUpdates; no token is 403 MissingProviderToken;
- the headers: `apns-topic` (400 MissingTopic, or TopicDisallowed when it is not `--topic`, or `--topic` with
  `.push-type.liveactivity` below), `apns-push-type`
  (InvalidPushType), `apns-priority` (BadPriority), `apns-expiration` (BadExpirationDate), `apns-collapse-id`
  (BadCollapseId, over 64 bytes), `apns-id` (BadMessageId, not a UUID); the device token (BadDeviceToken: hex of
  even length, 16 to 200 bytes); the body (PayloadEmpty; 413 PayloadTooLarge over 4096 bytes);
- HTTP/2 as APNs runs it with token authentication: one concurrent stream until a request has gone through,
  then `--max-streams` announced in SETTINGS;
- ActivityKit pushes, as Apple's "Starting and updating Live Activities with ActivityKit push notifications"
  (*Construct the ActivityKit remote push notification payload*) and "Sending notification requests to APNs"
  require them: `apns-push-type: liveactivity` goes with `apns-topic: <--topic>.push-type.liveactivity` ("If you
  set this push type, the apns-topic header field must use your app's bundle ID with .push-type.liveactivity
  appended to the end") and `apns-priority` 5 or 10 (BadPriority). Apple does not name the answer to a wrong
  pairing; the stand-in answers TopicDisallowed ("Pushing to this topic is not allowed") to a liveactivity push on
  another topic, and InvalidPushType ("The apns-push-type value is invalid") to another push type on the
  `.push-type.liveactivity` topic. The payload: `aps.timestamp` an integer, `aps.event` start, update or end,
  `aps.content-state` an object, and `start` with `attributes-type`, `attributes` and an `alert`. Apple's APNs
  takes such a payload and the device drops it (ActivityKit's daemon logs why); Apple names no reason for it, so
  the stand-in refuses it with one of its own, 400 `StandInBadLiveActivityPayload` with a `field` naming the key,
  so that a provider sending one fails its tests instead of passing them.

Broadcast channels (iOS 18), as "Sending channel management requests to APNs" and "Sending broadcast push
notification requests to APNs" describe them (one stand-in serves both hosts' paths; a provider's
`channelEndpoint` and `broadcastEndpoint` name it):

- `POST /1/apps/<--topic>/channels` with `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`: 201 with
  the new channel's id (base64 of 16 random bytes) in `apns-channel-id` (400 InvalidPolicy, InvalidPushType;
  400 CannotCreateChannelConfig past `--max-channels`, Apple's 10,000 per app and environment);
- `GET /1/apps/<--topic>/channels` with `apns-channel-id`: 200 with the channel's `message-storage-policy` and
  `push-type`; `DELETE` the same: 204; an unknown id is 404 ChannelNotRegistered, none 400 MissingChannelId, one
  that is not base64 400 BadChannelId;
- `GET /1/apps/<--topic>/all-channels`: 200 `{"channels": [ids]}`;
- `POST /4/broadcasts/apps/<--topic>` with `apns-channel-id`, `apns-push-type: liveactivity` (400
  MissingPushType, InvalidPushType), `apns-priority` 5 or 10, `apns-expiration` (400 BadExpirationDate; and it
  must be 0 on a channel whose policy is 0, which stores nothing), the ActivityKit payload as above (at most
  4096 bytes): 200;
- another bundle id in the path is 400 TopicDisallowed; every answer carries `apns-request-id` (the request's,
  else a new UUID). The channel-management reasons are Apple's names in "Handling error responses from APNs".

A 200 carries `apns-id` (the request's, else a new UUID). Errors carry `{"reason": …}`, and 410 also
`"timestamp"` (milliseconds). Every request is recorded.

Scripting and inspection go through a plain-HTTP control port on loopback (`--control-port`):
  POST /script   {"token": HEX, "replies": [{"status": 410, "reason": "Unregistered", "timestamp": MS}, …],
                  "sticky": false}  the next requests for the token get these replies in order (the last one
                  for ever when sticky); `"delay": SECONDS` in a reply holds its answer that long
  POST /script   {"broadcast": true, "replies": [{"status": 503, "reason": "ServiceUnavailable", "retryAfter": 2},
                  {"drop": true}, …], "sticky": false}  the same for the next broadcasts (`POST /4/broadcasts/…`),
                  whatever their channel: a reply's `retryAfter` is sent as `retry-after`, and `"drop": true` answers
                  nothing (the stream is reset, RST_STREAM INTERNAL_ERROR; recorded with status 0); `"replies": []`
                  ends the script
  POST /goaway   sends GOAWAY on every open connection (NO_ERROR) and closes them
  POST /unanswered-channel-requests {"count": N}  the next N channel-management requests are carried out (a
                 channel made or deleted) and never answered: the stream stays open until the provider resets it
                 (a timeout after Apple acted); recorded with `"status": null`
  POST /reset    forgets scripts, records and provider-token history
  GET  /requests the recorded requests as a JSON list
  GET  /channels the broadcast channels held, id → message storage policy
  GET  /stats    {"count", "statuses", "first", "last", "connectionsOpened", "resets"} (and "times", every
                 answer's time, with ?times=1);
                 with --summary-only nothing else is recorded (benchmarks)
  GET  /healthz  200 once both ports listen

    python3 standin.py --cert server.pem --key server.key --team-key team.pub.pem --team-id ABCDE12345 \\
        --key-id KEY1234567 --topic com.example.app --port 2197 --control-port 2198
"""

import argparse
import asyncio
import base64
import json
import os
import re
import signal
import ssl
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

PUSH_TYPES = {"alert", "background", "voip", "complication", "fileprovider", "mdm", "liveactivity",
              "pushtotalk", "location", "widgets", "controls"}
TOKEN_PATTERN = re.compile(r"^/3/device/([0-9a-fA-F]+)$")
UUID_PATTERN = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
MAX_PAYLOAD = 4096
LIVE_ACTIVITY = "liveactivity"
LIVE_ACTIVITY_SUFFIX = ".push-type.liveactivity"
LIVE_ACTIVITY_EVENTS = {"start", "update", "end"}


def live_activity_problem(body):
    """The `aps` key an ActivityKit payload gets wrong, as Apple documents the payload; None when it is sound."""
    try:
        document = json.loads(body)
    except ValueError:
        return "aps"
    aps = document.get("aps") if isinstance(document, dict) else None
    if not isinstance(aps, dict):
        return "aps"
    timestamp = aps.get("timestamp")
    if not isinstance(timestamp, int) or isinstance(timestamp, bool):
        return "aps.timestamp"
    if aps.get("event") not in LIVE_ACTIVITY_EVENTS:
        return "aps.event"
    if "content-state" in aps and not isinstance(aps["content-state"], dict):
        return "aps.content-state"
    if aps["event"] == "start":
        if not isinstance(aps.get("attributes-type"), str):
            return "aps.attributes-type"
        if not isinstance(aps.get("attributes"), dict):
            return "aps.attributes"
        if "alert" not in aps:
            return "aps.alert"
    return None
TOKEN_LIFETIME = 3600
CHANNELS_PATTERN = re.compile(r"^/1/apps/([^/]+)/(channels|all-channels)$")
BROADCAST_PATTERN = re.compile(r"^/4/broadcasts/apps/([^/]+)$")
BROADCAST_SCRIPT = "broadcast"  # the scripts' key for broadcasts (a device token is hex: it cannot be this)
CHANNEL_ID_PATTERN = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


def _b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class State:
    """What the stand-in knows across connections: scripts, records, provider-token history."""

    def __init__(self, args, public_key):
        self.args = args
        self.public_key = public_key
        self.lock = threading.Lock()
        self.scripts = {}
        self.requests = []
        self.statuses = {}  # status → count, kept as requests are recorded: /stats answers without a scan
        self.times = []  # with --summary-only, each answer's time instead of its record
        self.token_updates = {}  # kid -> (last new JWT, when it was first seen)
        self.connections = set()
        self.unanswered_channel_requests = 0  # channel-management requests still to carry out without answering
        self.channels = {}  # channel id -> message storage policy (0: stores nothing, 1: stores the latest)
        self.opened = 0  # connections accepted since the last reset
        self.resets = 0  # streams the provider reset (RST_STREAM) since the last reset
        self.loop = None

    def reset(self):
        with self.lock:
            self.scripts.clear()
            self.requests.clear()
            self.token_updates.clear()
            self.statuses.clear()
            self.times.clear()
            self.channels.clear()
            self.unanswered_channel_requests = 0
            self.opened = 0
            self.resets = 0

    def scripted_reply(self, token):
        with self.lock:
            script = self.scripts.get(token.lower())
            if not script or not script["replies"]:
                return None
            if len(script["replies"]) == 1 and script.get("sticky"):
                return script["replies"][0]
            return script["replies"].pop(0)

    def check_provider_token(self, authorization, connection):
        """None when the token is good, else (status, reason)."""
        if not authorization or not authorization.lower().startswith("bearer "):
            return 403, "MissingProviderToken"
        jwt = authorization[7:].strip()
        try:
            header_b64, claims_b64, signature_b64 = jwt.split(".")
            header = json.loads(_b64url_decode(header_b64))
            claims = json.loads(_b64url_decode(claims_b64))
            signature = _b64url_decode(signature_b64)
        except (ValueError, json.JSONDecodeError):
            return 403, "InvalidProviderToken"
        if header.get("alg") != "ES256" or header.get("kid") != self.args.key_id or len(signature) != 64:
            return 403, "InvalidProviderToken"
        if claims.get("iss") != self.args.team_id or not isinstance(claims.get("iat"), int):
            return 403, "InvalidProviderToken"
        der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
        try:
            self.public_key.verify(der, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return 403, "InvalidProviderToken"
        now = time.time()
        if claims["iat"] > now + 60:
            return 403, "InvalidProviderToken"
        if now - claims["iat"] > TOKEN_LIFETIME:
            connection.unusable = True
            return 403, "ExpiredProviderToken"
        with self.lock:
            last = self.token_updates.get(header["kid"])
            if last is None or last[0] != jwt:
                if (last is not None and now - last[1] < self.args.token_update_interval
                        and now - _iat(last[0]) <= TOKEN_LIFETIME):
                    return 429, "TooManyProviderTokenUpdates"
                self.token_updates[header["kid"]] = (jwt, now)
        return None


def _iat(jwt):
    return json.loads(_b64url_decode(jwt.split(".")[1]))["iat"]


class Connection:
    """One provider connection: the h2 state machine and its streams."""

    def __init__(self, state, reader, writer):
        self.state = state
        self.reader = reader
        self.writer = writer
        self.id = uuid.uuid4().hex[:8]
        self.h2 = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False,
                                                                              header_encoding="utf-8"))
        self.streams = {}
        self.unusable = False
        self.opened = False
        # The provider's bytes, read as frames for what h2 does not report: an RST_STREAM for a stream already
        # closed (which h2 drops without an event) counts as a reset too.
        self.frames = bytearray()
        self.preface = len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

    def count_resets(self, data):
        self.frames += data
        if self.preface:
            skipped = min(self.preface, len(self.frames))
            del self.frames[:skipped]
            self.preface -= skipped
        resets, offset, frames = 0, 0, self.frames
        while len(frames) - offset >= 9:
            length = int.from_bytes(frames[offset:offset + 3], "big")
            if len(frames) - offset < 9 + length:
                break
            if frames[offset + 3] == 0x3:  # RST_STREAM
                resets += 1
            offset += 9 + length
        del frames[:offset]
        if resets:
            with self.state.lock:
                self.state.resets += resets

    async def run(self):
        self.h2.initiate_connection()
        # Token authentication: one stream until a request has gone through.
        self.h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1})
        await self.flush()
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                if not self.state.args.summary_only:  # the benchmark's stand-in keeps to the wire
                    self.count_resets(data)
                for event in self.h2.receive_data(data):
                    await self.handle(event)
                await self.flush()
        except (ConnectionResetError, h2.exceptions.ProtocolError, ssl.SSLError):
            pass
        finally:
            self.state.connections.discard(self)
            self.writer.close()

    async def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def handle(self, event):
        if isinstance(event, h2.events.RequestReceived):
            self.streams[event.stream_id] = {"headers": dict(event.headers), "body": b""}
        elif isinstance(event, h2.events.DataReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream["body"] += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                asyncio.ensure_future(self.answer(event.stream_id, stream["headers"], stream["body"]))
        elif isinstance(event, h2.events.StreamReset):
            self.streams.pop(event.stream_id, None)

    async def answer(self, stream_id, headers, body):
        path = headers.get(":path", "")
        if CHANNELS_PATTERN.match(path) or BROADCAST_PATTERN.match(path):
            status, reason, extra, response_extra = self.decide_channel(headers, body)
            with self.state.lock:
                silent = CHANNELS_PATTERN.match(path) and self.state.unanswered_channel_requests > 0
                if silent:
                    self.state.unanswered_channel_requests -= 1
            if silent:
                # Done, never answered: what a provider sees when Apple acted and the answer was lost.
                self.record_unanswered(stream_id, headers, body, response_extra)
                return
            await self.answer_channel(stream_id, headers, body, status, reason, extra, response_extra)
            return
        status, reason, extra, delay = self.decide(headers, body)
        if delay:
            await asyncio.sleep(delay)
        apns_id = headers.get("apns-id") or str(uuid.uuid4()).upper()
        record = {
            "connection": self.id, "stream": stream_id, "time": time.time(), "path": headers.get(":path"),
            "token": (TOKEN_PATTERN.match(headers.get(":path", "")) or [None, None])[1],
            "headers": {k: v for k, v in headers.items() if k.startswith("apns-") or k == "authorization"},
            "body": body.decode("utf-8", "replace"), "status": status, "reason": reason, "apnsId": apns_id,
        }
        with self.state.lock:
            if self.state.args.summary_only:
                self.state.times.append(record["time"])
            else:
                self.state.requests.append(record)
            self.state.statuses[str(status)] = self.state.statuses.get(str(status), 0) + 1
        response_headers = [(":status", str(status)), ("apns-id", apns_id)]
        payload = b""
        if status != 200:
            document = {"reason": reason}
            document.update(extra)
            payload = json.dumps(document).encode()
            response_headers.append(("content-type", "application/json"))
            response_headers.append(("content-length", str(len(payload))))
        try:
            if status == 200 and not self.opened:
                # A request went through: the real stream limit is announced with its answer, just before it, so
                # that it arrives while the request is still open. (AsyncHTTPClient 1.37 asserts, in debug builds,
                # when a larger limit reaches a connection already idle: its idle timer is scheduled twice.)
                self.opened = True
                self.h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.state.args.max_streams})
            self.h2.send_headers(stream_id, response_headers, end_stream=not payload)
            if payload:
                self.h2.send_data(stream_id, payload, end_stream=True)
            await self.flush()
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, ConnectionResetError):
            pass

    def decide(self, headers, body):
        """(status, reason, extra body fields, delay) for one request."""
        if self.unusable:
            return 403, "ExpiredProviderToken", {}, 0
        if headers.get(":method") != "POST":
            return 405, "MethodNotAllowed", {}, 0
        match = TOKEN_PATTERN.match(headers.get(":path", ""))
        if not match and not headers.get(":path", "").startswith("/3/device/"):
            return 404, "BadPath", {}, 0
        problem = self.state.check_provider_token(headers.get("authorization"), self)
        if problem:
            return problem[0], problem[1], {}, 0
        token = match.group(1) if match else ""
        if not token or len(token) % 2 or not 32 <= len(token) <= 400:
            return 400, "BadDeviceToken", {}, 0
        topic = headers.get("apns-topic")
        if not topic:
            return 400, "MissingTopic", {}, 0
        live_topic = self.state.args.topic + LIVE_ACTIVITY_SUFFIX
        if topic not in (self.state.args.topic, live_topic):
            return 400, "TopicDisallowed", {}, 0
        push_type = headers.get("apns-push-type")
        if push_type not in PUSH_TYPES:
            return 400, "InvalidPushType", {}, 0
        if push_type == LIVE_ACTIVITY and topic != live_topic:
            return 400, "TopicDisallowed", {}, 0
        if topic == live_topic and push_type != LIVE_ACTIVITY:
            return 400, "InvalidPushType", {}, 0
        if headers.get("apns-priority", "10") not in (("5", "10") if push_type == LIVE_ACTIVITY else ("1", "5", "10")):
            return 400, "BadPriority", {}, 0
        if not re.fullmatch(r"\d+", headers.get("apns-expiration", "0")):
            return 400, "BadExpirationDate", {}, 0
        if len(headers.get("apns-collapse-id", "").encode()) > 64:
            return 400, "BadCollapseId", {}, 0
        if "apns-id" in headers and not UUID_PATTERN.match(headers["apns-id"]):
            return 400, "BadMessageId", {}, 0
        if not body:
            return 400, "PayloadEmpty", {}, 0
        if len(body) > MAX_PAYLOAD:
            return 413, "PayloadTooLarge", {}, 0
        if push_type == LIVE_ACTIVITY:
            problem = live_activity_problem(body)
            if problem:
                return 400, "StandInBadLiveActivityPayload", {"field": problem}, 0
        scripted = self.state.scripted_reply(token)
        if scripted:
            # Any other field of the script (`timestamp`, a test's padding) goes into the answer's body.
            extra = {k: v for k, v in scripted.items() if k not in ("status", "reason", "delay")}
            return scripted.get("status", 200), scripted.get("reason"), extra, scripted.get("delay", 0)
        return 200, None, {}, self.state.args.delay

    async def answer_channel(self, stream_id, headers, body, status, reason, extra, response_extra):
        """Answers a channel-management or broadcast request: `apns-request-id`, then the decided headers and body
        (or, for a scripted `drop`, nothing: the stream is reset)."""
        dropped = response_extra.pop("drop", False)
        if dropped:
            status, reason = 0, None
        request_id = headers.get("apns-request-id") or str(uuid.uuid4())
        record = {
            "connection": self.id, "stream": stream_id, "time": time.time(), "path": headers.get(":path"),
            "method": headers.get(":method"), "token": None,
            "headers": {k: v for k, v in headers.items() if k.startswith("apns-") or k == "authorization"},
            "body": body.decode("utf-8", "replace"), "status": status, "reason": reason, "requestId": request_id,
            "channelId": response_extra.get("apns-channel-id") or headers.get("apns-channel-id"),
        }
        with self.state.lock:
            self.state.requests.append(record)
            self.state.statuses[str(status)] = self.state.statuses.get(str(status), 0) + 1
        if dropped:
            try:
                self.h2.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.INTERNAL_ERROR)
                await self.flush()
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, ConnectionResetError):
                pass
            return
        response_headers = [(":status", str(status)), ("apns-request-id", request_id)]
        response_headers += [(k, v) for k, v in response_extra.items() if k != "body"]
        payload = b""
        if status >= 400:
            document = {"reason": reason}
            document.update(extra)
            payload = json.dumps(document).encode()
        elif "body" in response_extra:
            payload = json.dumps(response_extra["body"]).encode()
        if payload:
            response_headers.append(("content-type", "application/json"))
            response_headers.append(("content-length", str(len(payload))))
        try:
            self.h2.send_headers(stream_id, response_headers, end_stream=not payload)
            if payload:
                self.h2.send_data(stream_id, payload, end_stream=True)
            await self.flush()
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, ConnectionResetError):
            pass

    def record_unanswered(self, stream_id, headers, body, response_extra):
        record = {
            "connection": self.id, "stream": stream_id, "time": time.time(), "path": headers.get(":path"),
            "method": headers.get(":method"), "token": None,
            "headers": {k: v for k, v in headers.items() if k.startswith("apns-") or k == "authorization"},
            "body": body.decode("utf-8", "replace"), "status": None, "reason": None, "requestId": None,
            "channelId": response_extra.get("apns-channel-id") or headers.get("apns-channel-id"),
        }
        with self.state.lock:
            self.state.requests.append(record)

    def channel_id(self, headers):
        """(channel id, None) or (None, (status, reason)) for a request that names a channel."""
        channel = headers.get("apns-channel-id")
        if not channel:
            return None, (400, "MissingChannelId")
        if not CHANNEL_ID_PATTERN.match(channel):
            return None, (400, "BadChannelId")
        with self.state.lock:
            if channel not in self.state.channels:
                return None, (404, "ChannelNotRegistered")
        return channel, None

    def decide_channel(self, headers, body):
        """(status, reason, extra body fields, response headers and `body`) for a channel or broadcast request."""
        if self.unusable:
            return 403, "ExpiredProviderToken", {}, {}
        path, method = headers.get(":path", ""), headers.get(":method")
        problem = self.state.check_provider_token(headers.get("authorization"), self)
        if problem:
            return problem[0], problem[1], {}, {}
        management = CHANNELS_PATTERN.match(path)
        bundle = management.group(1) if management else BROADCAST_PATTERN.match(path).group(1)
        if bundle != self.state.args.topic:
            return 400, "TopicDisallowed", {}, {}
        if management and management.group(2) == "all-channels":
            if method != "GET":
                return 405, "MethodNotAllowed", {}, {}
            with self.state.lock:
                return 200, None, {}, {"body": {"channels": list(self.state.channels)}}
        if management:
            if method == "POST":
                try:
                    document = json.loads(body or b"null")
                except ValueError:
                    document = None
                if not isinstance(document, dict):
                    return 400, "BadRequest", {}, {}
                policy = document.get("message-storage-policy")
                if policy not in (0, 1) or isinstance(policy, bool):
                    return 400, "InvalidPolicy", {}, {}
                if document.get("push-type") != "LiveActivity":
                    return 400, "InvalidPushType", {}, {}
                with self.state.lock:
                    if len(self.state.channels) >= self.state.args.max_channels:
                        return 400, "CannotCreateChannelConfig", {}, {}
                    channel = base64.b64encode(os.urandom(16)).decode()
                    self.state.channels[channel] = policy
                return 201, None, {}, {"apns-channel-id": channel}
            if method not in ("GET", "DELETE"):
                return 405, "MethodNotAllowed", {}, {}
            channel, problem = self.channel_id(headers)
            if problem:
                return problem[0], problem[1], {}, {}
            with self.state.lock:
                if method == "DELETE":
                    self.state.channels.pop(channel, None)
                    return 204, None, {}, {}
                policy = self.state.channels[channel]
            return 200, None, {}, {"body": {"message-storage-policy": policy, "push-type": "LiveActivity"}}
        # A broadcast.
        if method != "POST":
            return 405, "MethodNotAllowed", {}, {}
        scripted = self.state.scripted_reply(BROADCAST_SCRIPT)
        if scripted:
            if scripted.get("drop"):
                return 0, None, {}, {"drop": True}
            response_extra = {"retry-after": str(scripted["retryAfter"])} if "retryAfter" in scripted else {}
            extra = {k: v for k, v in scripted.items() if k not in ("status", "reason", "retryAfter")}
            return scripted.get("status", 200), scripted.get("reason"), extra, response_extra
        channel, problem = self.channel_id(headers)
        if problem:
            return problem[0], problem[1], {}, {}
        push_type = headers.get("apns-push-type")
        if not push_type:
            return 400, "MissingPushType", {}, {}
        if push_type != LIVE_ACTIVITY:
            return 400, "InvalidPushType", {}, {}
        if headers.get("apns-priority", "10") not in ("5", "10"):
            return 400, "BadPriority", {}, {}
        expiration = headers.get("apns-expiration", "0")
        if not re.fullmatch(r"\d+", expiration):
            return 400, "BadExpirationDate", {}, {}
        with self.state.lock:
            stores_nothing = self.state.channels.get(channel) == 0
        if stores_nothing and int(expiration) != 0:
            return 400, "BadExpirationDate", {}, {}
        if not body:
            return 400, "PayloadEmpty", {}, {}
        if len(body) > MAX_PAYLOAD:
            return 413, "PayloadTooLarge", {}, {}
        problem = live_activity_problem(body)
        if problem:
            return 400, "StandInBadLiveActivityPayload", {"field": problem}, {}
        return 200, None, {}, {}

    def goaway(self):
        try:
            self.h2.close_connection()
            self.writer.write(self.h2.data_to_send())
        finally:
            self.writer.close()


def control_server(state, port):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, document):
            data = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/requests":
                with state.lock:
                    self.reply(200, list(state.requests))
            elif self.path in ("/stats", "/stats?times=1"):
                with state.lock:
                    times = state.times if state.args.summary_only else [r["time"] for r in state.requests]
                    document = {"count": sum(state.statuses.values()), "statuses": dict(state.statuses),
                                "first": times[0] if times else None, "last": times[-1] if times else None,
                                "connectionsOpened": state.opened, "resets": state.resets}
                    if self.path.endswith("times=1"):
                        document["times"] = list(times)
                self.reply(200, document)
            elif self.path == "/channels":
                with state.lock:
                    self.reply(200, dict(state.channels))
            elif self.path == "/healthz":
                self.reply(200, {"status": "ok"})
            else:
                self.reply(404, {"error": "unknown"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            document = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/script":
                key = BROADCAST_SCRIPT if document.get("broadcast") else document["token"].lower()
                with state.lock:
                    state.scripts[key] = {"replies": list(document["replies"]), "sticky": bool(document.get("sticky"))}
                self.reply(200, {})
            elif self.path == "/goaway":
                count = len(state.connections)
                for connection in list(state.connections):
                    state.loop.call_soon_threadsafe(connection.goaway)
                self.reply(200, {"connections": count})
            elif self.path == "/reset":
                state.reset()
                self.reply(200, {})
            elif self.path == "/unanswered-channel-requests":
                with state.lock:
                    state.unanswered_channel_requests = int(document["count"])
                self.reply(200, {})
            else:
                self.reply(404, {"error": "unknown"})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def main(args):
    public_key = serialization.load_pem_public_key(open(args.team_key, "rb").read())
    state = State(args, public_key)
    state.loop = asyncio.get_running_loop()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["h2"])

    async def accept(reader, writer):
        connection = Connection(state, reader, writer)
        state.connections.add(connection)
        with state.lock:
            state.opened += 1
        await connection.run()

    server = await asyncio.start_server(accept, "127.0.0.1", args.port, ssl=context)
    control_server(state, args.control_port)
    print(f"apns stand-in on https://127.0.0.1:{args.port}, control on http://127.0.0.1:{args.control_port}",
          flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="An APNs stand-in (HTTP/2, TLS, token authentication).")
    parser.add_argument("--cert", required=True, help="PEM certificate chain of the stand-in's TLS")
    parser.add_argument("--key", required=True, help="PEM key of --cert")
    parser.add_argument("--team-key", required=True, help="PEM public key the provider tokens must verify with")
    parser.add_argument("--team-id", required=True, help="the `iss` the provider tokens must carry")
    parser.add_argument("--key-id", required=True, help="the `kid` the provider tokens must carry")
    parser.add_argument("--topic", required=True, help="the app's bundle id: the only apns-topic accepted")
    parser.add_argument("--port", type=int, default=2197)
    parser.add_argument("--delay", type=float, default=0,
                        help="seconds every unscripted answer is held (APNs' latency; a script's delay overrides it)")
    parser.add_argument("--control-port", type=int, default=2198)
    parser.add_argument("--max-streams", type=int, default=1000,
                        help="concurrent streams announced once a request has gone through")
    parser.add_argument("--max-channels", type=int, default=10000,
                        help="broadcast channels the app may hold at once (Apple: 10,000 per app and environment)")
    parser.add_argument("--token-update-interval", type=float, default=1200,
                        help="seconds a new provider token must wait after the last new one (APNs: 20 minutes)")
    parser.add_argument("--summary-only", action="store_true",
                        help="record only each answer's time and status counts (/stats), not the requests: for "
                             "benchmarks of a million pushes")
    parser.add_argument("--exit-with-parent", action="store_true",
                        help="exit when the process that started this one ends (a test run that crashed)")
    arguments = parser.parse_args()
    # A parent that ignores SIGTERM (a server under swift-service-lifecycle traps it) passes that on: undo it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if arguments.exit_with_parent:
        parent = os.getppid()

        def watch():
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
    asyncio.run(main(arguments))
