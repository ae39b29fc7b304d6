#!/usr/bin/env python3
"""The hashed form of a sealed TopicLedger event (encoding version 3), outside Swift: only hashlib and hmac.

    sealed_form.py PREV_HASH_HEX ENCODED_EVENT_HEX     prints the hashed form and the record's hash, in hex

A sealed event is stored as 0x03 || protobuf(Event), its identifiers and content in the clear beside their keys
(field 30, one `Seal` per sealed value). Its chain hash is SHA-256(prevHash || hashedForm), where hashedForm is
0x03 || protobuf(Event) with every sealed value replaced by its commitment, HMAC-SHA-256(key, value) — or, once
forgotten, the commitment the seal keeps — and no field 30. A string field (a registration token) holds the
commitment's 64 lowercase hex digits, a bytes field (an APNs token, the message JSON) its 32 bytes.
docs/event-format.md, "Sealed fields", gives the rule and a worked example this script reproduces.

The hash binds the bytes only as the event they decode to, so a sealed event must be its canonical encoding, as
Swift requires (HashChain.recomputedHash re-encodes it and compares): anything else (a field repeated or out of order,
a default written, an unknown field, a long varint, in the event, its body, a failure or a seal) is refused.
"""

import hashlib
import hmac
import sys

SEALED_VERSION = 3


class Malformed(Exception):
    pass


def read_varint(data, offset):
    """The varint at `offset` and the offset after it; a varint past 64 bits or not in its shortest form is refused."""
    value, shift, start = 0, 0, offset
    while True:
        if offset >= len(data) or shift > 63:
            raise Malformed("a varint runs past the end")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> 64 or offset - start != len(varint(value)):
                raise Malformed("a varint is not in its shortest form")
            return value, offset
        shift += 7


def varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def fields(data):
    """[(number, wire type, value)]: an int for a varint, bytes for a length-delimited field."""
    out, offset = [], 0
    while offset < len(data):
        key, offset = read_varint(data, offset)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, offset = read_varint(data, offset)
        elif wire == 2:
            length, offset = read_varint(data, offset)
            if offset + length > len(data):
                raise Malformed("a field runs past the end")
            value, offset = data[offset:offset + length], offset + length
        else:
            raise Malformed(f"wire type {wire} is not used by the schema")
        out.append((number, wire, value))
    return out


# ledger_event.proto, for the canonical check: a field's type is "u" (a varint: uint64, int64), "u32", "bool",
# an enum's largest value, "str", "opt" (an `optional` string: written when set, even empty), "bytes", or a message.
SCHEMA = {
    "Event": {1: "u", 2: "u", 3: "str", 4: "str", 10: "Registered", 11: "Unregistered", 12: "Subscribed",
              13: "Subscribed", 14: "Sent", 15: "Audience", 16: "Acknowledged", 17: "ApnsTokenSet",
              18: "Unregistered", 19: "PushProgress", 20: "Erased", 21: "Retention", 22: "LiveActivityFollowed",
              23: "LiveActivityUnfollowed", 24: "LiveActivityChannelCreated", 25: "LiveActivityChannelDeleted",
              26: "LiveActivityFollowed", 27: "LiveActivitiesEnded", 30: "Seal"},
    "Seal": {1: "bytes", 2: "bytes", 3: "str"},
    "Registered": {1: "str", 2: "opt", 3: "opt"},
    "Unregistered": {1: "str", 2: "str"},                       # and apns_token_cleared
    "Subscribed": {1: "str", 2: "str", 3: 3},                   # and unsubscribed; via
    "Sent": {1: "u", 2: 3, 3: "str", 4: 2, 5: "bytes", 6: "str", 7: "u32", 8: "str"},
    "Audience": {1: "u", 2: "u", 3: "u", 4: "bytes", 5: "u32"},
    "Acknowledged": {1: "str", 2: "u"},
    "ApnsTokenSet": {1: "str", 2: "bytes", 3: "bool"},
    "PushProgress": {1: "u", 2: "str", 3: "bool", 4: "bool", 5: "PushFailure", 6: "u", 7: "Broadcast"},
    "Broadcast": {1: "str", 2: "u32", 3: "str", 4: "str"},
    "PushFailure": {1: "str", 2: 3, 3: "u32", 4: "str"},
    "Erased": {1: "str", 2: "u", 3: "str", 4: "u"},
    "Retention": {1: "u", 2: "u", 3: "u", 4: "u", 5: "u"},
    "LiveActivityChannelCreated": {1: "str", 2: "str", 3: "u32", 4: "str"},
    "LiveActivityChannelDeleted": {1: "str", 2: "str", 3: "str", 4: "str"},
    "LiveActivityFollowed": {1: "str", 2: "str", 3: "bytes"},  # and push_to_start_token_set (attributes_type)
    "LiveActivityUnfollowed": {1: "str", 2: "str", 3: "str"},
    "LiveActivitiesEnded": {1: "str", 2: "u", 3: "u"},
}
REPEATED = {("Event", 30), ("PushProgress", 5)}


def canonical_fields(message, data):
    """fields(data), refused unless `data` is the canonical encoding of `message` — what Swift re-encodes byte for byte
    (HashChain.recomputedHash): known fields with their wire types, in number order, a singular one at most once,
    no proto3 default written (but an `optional` field written when set), shortest varints, valid UTF-8, every
    sub-message canonical too. Any other bytes could decode otherwise elsewhere (a protobuf reader keeps the LAST
    copy of a repeated singular field), so no hash would bind what they say."""
    entries, last = fields(data), 0
    for number, wire, value in entries:
        kind = SCHEMA[message].get(number)
        if kind is None:
            raise Malformed(f"field {number} is not a field of {message}")
        if number < last or (number == last and (message, number) not in REPEATED):
            raise Malformed(f"{message} field {number} is out of order or repeated: not the canonical encoding")
        last = number
        if wire != (0 if kind in ("u", "u32", "bool") or isinstance(kind, int) else 2):
            raise Malformed(f"{message} field {number} has the wrong wire type")
        if kind in SCHEMA:
            canonical_fields(kind, value)
        elif kind != "opt" and not value:
            raise Malformed(f"{message} field {number} writes its default: not the canonical encoding")
        elif (kind == "u32" and value >> 32) or (kind == "bool" and value != 1) or (isinstance(kind, int) and value > kind):
            raise Malformed(f"{message} field {number} holds {value}, not a value of its type")
        elif kind in ("str", "opt"):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                raise Malformed(f"{message} field {number} is not UTF-8") from None
    if any(isinstance(kind, int) and number not in [n for n, _, _ in entries] for number, kind in SCHEMA[message].items()):
        raise Malformed(f"{message} lacks an enum field: its value 0 is not one Swift reads")
    return entries


def serialize(entries):
    """Fields in number order (a repeated field keeps its order), as TopicLedger's canonical encoding writes them."""
    out = bytearray()
    for number, wire, value in sorted(entries, key=lambda entry: entry[0]):
        out += varint(number << 3 | wire)
        out += varint(value) if wire == 0 else varint(len(value)) + value
    return bytes(out)


def commitment(seal, value):
    if "key" in seal:
        return hmac.new(seal["key"], value, hashlib.sha256).digest()
    return seal["commitment"]


def parse_seal(data):
    """A Seal (canonical: canonical_fields("Event") checked it) holding a 32-byte key, or a 32-byte commitment and
    perhaps why its value was forgotten."""
    seal = {{1: "key", 2: "commitment", 3: "forgotten"}[number]: value for number, _, value in fields(data)}
    if ("key" in seal) == ("commitment" in seal) or ("key" in seal and "forgotten" in seal):
        raise Malformed("a seal holds a key, or a commitment and perhaps why its value was forgotten")
    if len(seal.get("key", seal.get("commitment"))) != 32:
        raise Malformed("a seal's key or commitment is 32 bytes")
    return seal


def replace(entries, number, make):
    """`entries` with field `number` set to make(its value, b"" when absent): the value as a length-delimited field.
    `entries` are canonical (canonical_fields): the field is there at most once."""
    value = next((v for n, _, v in entries if n == number), b"")
    return [e for e in entries if e[0] != number] + [(number, 2, make(value))]


def hashed_form(encoded):
    if not encoded or encoded[0] != SEALED_VERSION:
        raise Malformed("not a sealed event (encoding version 3)")
    top = canonical_fields("Event", encoded[1:])
    seals = [parse_seal(value) for number, _, value in top if number == 30]
    bodies = [(number, value) for number, _, value in top if 10 <= number < 30]
    if len(bodies) != 1:
        raise Malformed("an event has exactly one body")
    kind, body = bodies[0]
    slots = iter(seals)
    used = [0]

    def next_seal():
        seal = next(slots, None)
        if seal is None:
            raise Malformed(f"fewer seals ({len(seals)}) than sealed values")
        return seal

    def token(value):
        used[0] += 1
        return commitment(next_seal(), value).hex().encode()

    def raw(value):
        used[0] += 1
        return commitment(next_seal(), value)

    entries = fields(body)                         # canonical: canonical_fields("Event") checked it
    if kind in (10, 11, 12, 13, 16, 18, 23):      # registered … acknowledged, apns_token_cleared, unfollowed
        entries = replace(entries, 1, token)
    elif kind == 17:                               # apns_token_set: the token, then the APNs token
        entries = replace(replace(entries, 1, token), 2, raw)
    elif kind in (22, 26):                         # live_activity_followed, push_to_start_token_set: token, push token
        entries = replace(replace(entries, 1, token), 3, raw)
    elif kind == 14:                               # sent: the target when a token (kind 3), then the message JSON
        if any(n == 2 and v == 3 for n, _, v in entries):
            entries = replace(entries, 3, token)
        entries = replace(entries, 5, raw)
    elif kind == 19:                               # push_progress: through_token when set, then each failure's
        if any(n == 2 and v for n, _, v in entries):
            entries = replace(entries, 2, token)
        entries = [(n, w, serialize(replace(fields(v), 1, token)) if n == 5 else v) for n, w, v in entries]
    if used[0] != len(seals):
        raise Malformed(f"{len(seals)} seals for {used[0]} sealed values")
    rest = [(n, w, v) for n, w, v in top if n < 10]
    return bytes([SEALED_VERSION]) + serialize(rest + [(kind, 2, serialize(entries))])


def record_hash(previous, encoded):
    """The chain hash of a record: over the hashed form of a sealed event, over the bytes of a version-1 one."""
    form = hashed_form(encoded) if encoded[:1] == bytes([SEALED_VERSION]) else encoded
    return hashlib.sha256(previous + form).digest()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    form = hashed_form(bytes.fromhex(sys.argv[2]))
    print("hashed form:", form.hex())
    print("hash:", hashlib.sha256(bytes.fromhex(sys.argv[1]) + form).hexdigest())
