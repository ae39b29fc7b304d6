#!/usr/bin/env python3
"""An independent verifier of TopicLedger's proofs, outside Swift: only hashlib and `cryptography`.

    verify_proof.py PROOF.json --public-key KEYLINE     a message proof (`ledger prove --message`) or a
                                                       consistency proof (`ledger prove --consistency`)
    verify_proof.py --vectors VECTORS.json             tree test vectors (the Swift tests write them)

    --witness VKEY ... [--quorum K]    also require the proof's checkpoint to carry valid cosignatures
                                       (C2SP tlog-cosignature, cosignature/v1, Ed25519) of K of those witnesses
                                       (default: all); a consistency proof must then carry its toCheckpoint

Exit status 0: verified; 2: not verified (the reason is printed); 1: bad usage.

Formats (docs/event-format.md): RFC 6962 §2.1 leaves SHA-256(0x00 || chain hash) and nodes
SHA-256(0x01 || left || right); RFC 9162 §2.1.3.2 / §2.1.4.2 proof verification; C2SP signed-note
checkpoints `<origin>\\n<size>\\n<base64 root>\\n\\n— <name> <base64(key hash || Ed25519 signature)>\\n`.
"""

import argparse
import base64
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sealed_form  # noqa: E402


class Refused(Exception):
    pass


def leaf_hash(data):
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_from_inclusion(proof, index, size, leaf):
    """RFC 9162 §2.1.3.2."""
    if index >= size:
        raise Refused(f"leaf index {index} is not below the tree size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise Refused("the inclusion proof is longer than the path")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise Refused("the inclusion proof is shorter than the path")
    return r


def verify_consistency(proof, old_size, new_size, old_root, new_root):
    """RFC 9162 §2.1.4.2."""
    if old_size > new_size:
        raise Refused("the old tree is larger than the new one")
    if old_size == new_size:
        if proof or old_root != new_root:
            raise Refused("equal sizes need an empty proof and equal roots")
        return
    if old_size == 0:
        if proof:
            raise Refused("the empty tree's consistency proof is empty")
        return
    if not proof:
        raise Refused("the consistency proof is empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise Refused("the consistency proof is longer than the path")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise Refused("the consistency proof does not lead to both roots")


def parse_key(line, key_type=0x01, what="a verifier key"):
    """`<name>+<8 hex key hash>+<base64(type || Ed25519 public key)>` → (name, key hash, public key): a signed-note
    verifier key (type 0x01), or a cosigner vkey (type 0x04, C2SP tlog-cosignature, whose key ID is computed the
    same way)."""
    parts = line.strip().split("+", 2)  # the name holds no '+'; the base64 key may
    if len(parts) != 3:
        raise Refused(f"{what} is <name>+<hex key hash>+<base64 key>")
    name, hash_hex, blob = parts[0], parts[1], base64.b64decode(parts[2], validate=True)
    if len(blob) != 33 or blob[0] != key_type:
        raise Refused(f"{what} is not an Ed25519 key of type {key_type:#04x}")
    key_hash = hashlib.sha256(name.encode() + b"\n" + blob).digest()[:4]
    if key_hash.hex() != hash_hex:
        raise Refused(f"{what}'s hash does not match its name and key")
    return name, key_hash, blob[1:]


def verify_note(note, key_line):
    """The checkpoint (origin, size, root) of a signed note, if the key's signature verifies."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    name, key_hash, public_key = parse_key(key_line)
    body, separator, signatures = note.partition("\n\n")
    if not separator:
        raise Refused("a signed note has a blank line after its text")
    body += "\n"
    lines = body.split("\n")
    if len(lines) < 4:
        raise Refused("a checkpoint has an origin, a size and a root hash")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    if not size_text.isdigit() or (size_text.startswith("0") and size_text != "0"):
        raise Refused("the checkpoint size is not a decimal number")
    root = base64.b64decode(root_text, validate=True)
    if len(root) != 32:
        raise Refused("the checkpoint root is not 32 bytes")
    for line in signatures.rstrip("\n").split("\n"):
        fields = line.split(" ")
        if len(fields) != 3 or fields[0] != "\u2014":
            raise Refused("a signature line is `\u2014 <name> <base64>`")
        blob = base64.b64decode(fields[2], validate=True)
        if fields[1] != name or blob[:4] != key_hash:
            continue
        try:
            Ed25519PublicKey.from_public_bytes(public_key).verify(blob[4:], body.encode())
        except InvalidSignature:
            raise Refused(f"the signature of {name} does not verify")
        return origin, int(size_text), root
    raise Refused(f"the note has no signature by {name}")


def parse_cosigner_key(vkey):
    """`<name>+<8 hex key ID>+<base64(0x04 || Ed25519 public key)>` (C2SP tlog-cosignature) → (name, key ID, key)."""
    return parse_key(vkey, key_type=0x04, what="a witness vkey")


def count_cosignatures(note, vkeys):
    """How many of the witnesses `vkeys` have a valid cosignature/v1 line on `note`: the line's blob is
    key ID (4) || big-endian timestamp (8) || Ed25519 signature (64) over
    "cosignature/v1\\ntime <timestamp>\\n" followed by the note's text."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    body, separator, signatures = note.partition("\n\n")
    if not separator:
        raise Refused("a signed note has a blank line after its text")
    body += "\n"
    valid = set()
    for vkey in vkeys:
        name, key_id, public_key = parse_cosigner_key(vkey)
        for line in signatures.rstrip("\n").split("\n"):
            fields = line.split(" ")
            if len(fields) != 3 or fields[0] != "\u2014" or fields[1] != name:
                continue
            blob = base64.b64decode(fields[2], validate=True)
            if len(blob) != 76 or blob[:4] != key_id:
                continue
            timestamp = int.from_bytes(blob[4:12], "big")
            if timestamp > 2**63 - 1:
                continue
            message = f"cosignature/v1\ntime {timestamp}\n{body}".encode()
            try:
                Ed25519PublicKey.from_public_bytes(public_key).verify(blob[12:], message)
            except InvalidSignature:
                continue
            valid.add((name, public_key))
            break
    return len(valid)


def require_quorum(note, vkeys, quorum):
    if note is None:
        raise Refused("the proof carries no checkpoint to count cosignatures on")
    count = count_cosignatures(note, vkeys)
    if count < quorum:
        raise Refused(f"the checkpoint carries {count} valid cosignatures of the {len(set(vkeys))} witnesses given, "
                      f"fewer than the quorum of {quorum}")
    return f"; cosigned by {count} of {len(set(vkeys))} witnesses (quorum {quorum})"


def verify_message_proof(document, key_line):
    origin, size, root = verify_note(document["checkpoint"], key_line)
    erased = 0
    for entry in document["entries"]:
        event = base64.b64decode(entry["event"], validate=True)
        previous, claimed = bytes.fromhex(entry["prevHash"]), bytes.fromhex(entry["hash"])
        # A sealed event (first byte 3) hashes through its hashed form, forgotten values or not (sealed_form.py).
        # An event an erasure rewrote before the ledger sealed (first byte 2) keeps the hash of the bytes it
        # replaced: the tree vouches for that hash; its bytes are what is left (docs/event-format.md, "Erasure").
        try:
            computed = sealed_form.record_hash(previous, event)
        except sealed_form.Malformed as error:
            raise Refused(f"the {entry['kind']} event at seq {entry['seq']} is malformed: {error}")
        if computed != claimed and event[:1] != b"\x02":
            raise Refused(f"the {entry['kind']} event at seq {entry['seq']} does not hash to its chain hash")
        erased += computed != claimed
        if entry["leafIndex"] != entry["seq"] - 1:
            raise Refused("a leaf index is its seq minus one")
        proof = [base64.b64decode(p, validate=True) for p in entry["inclusionProof"]]
        if root_from_inclusion(proof, entry["leafIndex"], size, leaf_hash(claimed)) != root:
            raise Refused(f"the {entry['kind']} event at seq {entry['seq']} is not in the checkpoint's tree")
    note = f" ({erased} of them rewritten by an erasure: their hashes are in the tree, their bytes no longer give them)"
    return f"{len(document['entries'])} events included in {origin} at size {size}" + (note if erased else "")


def verify_consistency_proof(document, key_line):
    old_root = base64.b64decode(document["fromRoot"], validate=True)
    new_root = base64.b64decode(document["toRoot"], validate=True)
    proof = [base64.b64decode(p, validate=True) for p in document["proof"]]
    verify_consistency(proof, document["from"], document["to"], old_root, new_root)
    for note in (document.get("fromCheckpoint"), document.get("toCheckpoint")):
        if note is not None:
            _, size, root = verify_note(note, key_line)
            if (size, root) not in ((document["from"], old_root), (document["to"], new_root)):
                raise Refused("a checkpoint does not match the proof's sizes and roots")
    return f"the tree of size {document['from']} is a prefix of the tree of size {document['to']}"


def verify_vectors(document):
    """Tree test vectors: every inclusion and consistency proof in the file must verify."""
    leaves = [bytes.fromhex(h) for h in document["leafHashes"]]
    roots = [bytes.fromhex(h) for h in document["roots"]]  # roots[n]: the tree of the first n leaves
    for case in document["inclusion"]:
        proof = [bytes.fromhex(p) for p in case["proof"]]
        if root_from_inclusion(proof, case["index"], case["size"], leaves[case["index"]]) != roots[case["size"]]:
            raise Refused(f"inclusion of leaf {case['index']} in size {case['size']}")
    for case in document["consistency"]:
        proof = [bytes.fromhex(p) for p in case["proof"]]
        verify_consistency(proof, case["from"], case["to"], roots[case["from"]], roots[case["to"]])
    return f"{len(document['inclusion'])} inclusion and {len(document['consistency'])} consistency proofs"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("proof", nargs="?")
    parser.add_argument("--public-key")
    parser.add_argument("--vectors")
    parser.add_argument("--witness", action="append", default=[])
    parser.add_argument("--quorum", type=int)
    args = parser.parse_args()
    quorum = args.quorum if args.quorum is not None else len(set(args.witness))
    if args.quorum is not None and not 1 <= args.quorum <= len(args.witness):
        print("--quorum is between 1 and the number of --witness keys")
        return 1
    try:
        if args.vectors:
            with open(args.vectors) as file:
                print("verified:", verify_vectors(json.load(file)))
            return 0
        if not args.proof or not args.public_key:
            parser.print_usage()
            return 1
        with open(args.proof) as file:
            document = json.load(file)
        if "entries" in document:
            shown, note = verify_message_proof(document, args.public_key), document["checkpoint"]
        else:
            shown, note = verify_consistency_proof(document, args.public_key), document.get("toCheckpoint")
        if quorum > 0:
            shown += require_quorum(note, args.witness, quorum)
        print("verified:", shown)
        return 0
    except (Refused, ValueError, KeyError, TypeError) as error:
        print(f"not verified: {error}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
