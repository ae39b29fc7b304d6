#!/usr/bin/env python3
"""The hashed form of a sealed TopicLedger event (encoding version 3), outside Swift: only hashlib and hmac.

    sealed_form.py PREV_HASH_HEX ENCODED_EVENT_HEX     prints the hashed form and the record's hash, in hex

A sealed event is stored as 0x03 || protobuf(Event), its identifiers and content in the clear beside their keys
(field 30, one `Seal` per sealed value). Its chain hash is SHA-256(prevHash || hashedForm), where hashedForm is
0x03 || protobuf(Event) with every sealed value replaced by its commitment, HMAC-SHA-256(key, value) — or, once
forgotten, the commitment the seal keeps — and no field 30. A string field (a registration token) holds the
commitment's 64 lowercase hex digits, a bytes field (an APNs token, the message JSON) its 32 bytes.
docs/event-format.md, "Sealed fields", gives the rule and a worked example this script reproduces.
"""

import hashlib
import hmac
import sys

SEALED_VERSION = 3


class Malformed(Exception):
    pass


def read_varint(data, offset):
    value, shift = 0, 0
    while True:
        if offset >= len(data) or shift > 63:
            raise Malformed("a varint runs past the end")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
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
    seal = {}
    for number, wire, value in fields(data):
        if wire != 2 or number not in (1, 2, 3) or {1: "key", 2: "commitment", 3: "forgotten"}[number] in seal:
            raise Malformed("a seal holds fields 1 to 3, length-delimited, each once")
        seal[{1: "key", 2: "commitment", 3: "forgotten"}[number]] = value
    if ("key" in seal) == ("commitment" in seal) or len(seal.get("key", seal.get("commitment", b""))) != 32:
        raise Malformed("a seal holds a 32-byte key or a 32-byte commitment")
    return seal


def replace(entries, number, make):
    """`entries` with field `number` set to make(its value, b"" when absent): the value as a length-delimited field."""
    value = next((v for n, _, v in entries if n == number), b"")
    return [e for e in entries if e[0] != number] + [(number, 2, make(value))]


def hashed_form(encoded):
    if not encoded or encoded[0] != SEALED_VERSION:
        raise Malformed("not a sealed event (encoding version 3)")
    top = fields(encoded[1:])
    seals = [parse_seal(value) for number, _, value in top if number == 30]
    bodies = [(number, value) for number, _, value in top if 10 <= number <= 21]
    if len(bodies) != 1:
        raise Malformed("an event has exactly one body")
    kind, body = bodies[0]
    if serialize(top) != encoded[1:]:
        raise Malformed("a sealed event must be in its canonical encoding (fields in order, each once)")
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

    entries = fields(body)
    if serialize(entries) != body:
        raise Malformed("a sealed event's body must be in its canonical encoding")
    if kind in (10, 11, 12, 13, 16, 18):          # registered … acknowledged, apns_token_cleared: the token
        entries = replace(entries, 1, token)
    elif kind == 17:                               # apns_token_set: the token, then the APNs token
        entries = replace(replace(entries, 1, token), 2, raw)
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
    rest = [(n, w, v) for n, w, v in top if n != 30 and not 10 <= n <= 21]
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
