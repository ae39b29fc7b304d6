"""Issue "No split views": `ledger witness` as C2SP tlog-witness specifies it, and `ledger serve` serving only
checkpoints that a quorum of its witnesses cosigned. Run by run.sh (LEDGER_BIN: the built `ledger`)."""

import base64
import concurrent.futures
import contextlib
import json
import os
import subprocess
import time

import pytest
import requests

from witness_harness import (
    NoteKey, PlayedLog, ScriptedWitness, Server, Witness, binary, consistency_proof, remove, temporary_directory,
    verify_proof)


@pytest.fixture
def directory():
    path = temporary_directory()
    yield path
    remove(path)


@pytest.fixture
def played(directory):
    """A witness of a log this script plays (not TopicLedger)."""
    log = PlayedLog()
    witness = Witness(directory / "w", "witness.example/w1", [(log.origin, log.key.vkey)]).start()
    yield log, witness
    witness.stop()


LEAVES = [f"leaf {i}".encode() for i in range(40)]


def cosign(witness, log, old, leaves, old_leaves=None):
    proof = consistency_proof(old, leaves) if old else []
    return witness.add(PlayedLog.request(old, proof, log.checkpoint(leaves)))


def test_a_played_log_is_cosigned_and_the_cosignature_verifies_from_the_c2sp_text(played):
    log, witness = played
    response = cosign(witness, log, 0, LEAVES[:5])
    assert response.status_code == 200, response.text
    lines = response.text.splitlines()
    assert lines and all(line.startswith("\u2014 witness.example/w1 ") for line in lines)
    cosigned = log.checkpoint(LEAVES[:5]) + response.text
    assert verify_proof.count_cosignatures(cosigned, [witness.vkey]) == 1
    # The cosignature's timestamp is now (C2SP tlog-cosignature: big-endian seconds after the key ID).
    stamp = int.from_bytes(base64.b64decode(lines[0].split(" ")[2])[4:12], "big")
    assert abs(stamp - time.time()) < 60
    # A cosignature over another body does not count.
    other = log.checkpoint(LEAVES[:6]) + response.text
    assert verify_proof.count_cosignatures(other, [witness.vkey]) == 0
    # It grows: old 5 with a proof to 9.
    assert cosign(witness, log, 5, LEAVES[:9]).status_code == 200


def test_each_error_code_of_the_spec(played):
    log, witness = played
    assert cosign(witness, log, 0, LEAVES[:8]).status_code == 200
    # 404: an origin the witness does not know.
    stranger = PlayedLog("example.com/unknown")
    assert witness.add(PlayedLog.request(8, [], stranger.checkpoint(LEAVES[:8]))).status_code == 404
    # 403: signed only by a key the witness does not trust for the origin (that key is ignored).
    impostor = PlayedLog(log.origin)
    assert witness.add(PlayedLog.request(8, consistency_proof(8, LEAVES[:10]), impostor.checkpoint(LEAVES[:10]))
                       ).status_code == 403
    # 400: an old size above the checkpoint's; a body that is not the format.
    assert witness.add(PlayedLog.request(12, [], log.checkpoint(LEAVES[:10]))).status_code == 400
    assert witness.add(b"old 08\n\n" + log.checkpoint(LEAVES[:10]).encode()).status_code == 400
    assert witness.add(b"hello").status_code == 400
    # 409 with text/x.tlog.size: an old size that is not the witness's latest.
    conflict = cosign(witness, log, 3, LEAVES[:10])
    assert conflict.status_code == 409
    assert conflict.headers["Content-Type"] == "text/x.tlog.size" and conflict.text == "8\n"
    # 422: a proof that does not lead from the witness's root.
    bad = [bytes(32)] * len(consistency_proof(8, LEAVES[:10]))
    assert witness.add(PlayedLog.request(8, bad, log.checkpoint(LEAVES[:10]))).status_code == 422
    # 409 without a size: the same size as the latest, another root.
    forked = [b"forked"] + LEAVES[1:8]
    same_size = witness.add(PlayedLog.request(8, [], log.checkpoint(forked)))
    assert same_size.status_code == 409 and same_size.headers["Content-Type"] != "text/x.tlog.size"
    # None of these moved the witness: old 8 still cosigns.
    assert cosign(witness, log, 8, LEAVES[:10]).status_code == 200


def _body(note):
    """The signed text of a note (through its last text line's newline)."""
    return note.split("\n\n")[0] + "\n"


def test_a_forked_history_is_kept_once_as_evidence_with_the_logs_lines_only(played):
    log, witness = played
    stranger = NoteKey("someone.else/key")
    held = log.checkpoint(LEAVES[:8])
    assert witness.add(PlayedLog.request(0, [], held + stranger.sign(_body(held)))).status_code == 200
    forked = LEAVES[:4] + [b"rewritten"] + LEAVES[5:12]
    fork = log.checkpoint(forked[:8])
    # The fork at the same size: 409, kept once however often it is shown, without the stranger's line.
    for _ in range(3):
        assert witness.add(PlayedLog.request(8, [], fork + stranger.sign(_body(fork)))).status_code == 409
    # The fork grown past it, with its own (valid for it) proof: 422, and nothing kept — a proof is anyone's to write.
    assert witness.add(PlayedLog.request(8, consistency_proof(8, forked), log.checkpoint(forked))).status_code == 422
    metrics = requests.get(witness.base + "/metrics", timeout=10).text
    assert "topicledger_witness_evidence 1\n" in metrics and "topicledger_witness_evidence_dropped_total 0\n" in metrics
    output = witness.stop()
    assert output.count("SPLIT VIEW") == 1, output
    [evidence] = witness.evidence()
    assert evidence["reason"] == "different-root" and evidence["origin"] == log.origin and evidence["heldSize"] == 8
    assert evidence["submittedNote"] == fork
    assert "someone.else/key" not in evidence["heldNote"]
    # What the witness held is in the evidence, cosigned: both views, each signed by the log.
    assert verify_proof.count_cosignatures(evidence["heldNote"], [witness.vkey]) == 1
    output = witness.start().stop()
    assert "SPLIT VIEW" not in output  # logged when shown, not again at start


def test_proofs_anyone_can_write_are_refused_and_nothing_is_kept_or_alarmed(played, directory):
    """Without credentials, with only a checkpoint the log signed (any proof carries one): no evidence, no SPLIT
    VIEW, and a file that does not grow."""
    log, witness = played
    junk = [os.urandom(32)]
    # A fresh witness: old 0, one random proof line, the valid checkpoint.
    assert witness.add(PlayedLog.request(0, junk, log.checkpoint(LEAVES[:5]))).status_code == 422
    assert cosign(witness, log, 0, LEAVES[:5]).status_code == 200
    # After it cosigned size 5: the same checkpoint, old 5 and a junk proof line: the root is the same, no fork.
    assert witness.add(PlayedLog.request(5, junk, log.checkpoint(LEAVES[:5]))).status_code == 422
    # Bodies padded to about 62 KB: 63 proof lines and signature lines of unknown keys.
    note = log.checkpoint(LEAVES[:9])
    strangers = [NoteKey(f"someone.else/k{i}") for i in range(4)]
    padding = "".join(strangers[i % 4].sign(_body(note)) for i in range(520))
    padded = PlayedLog.request(5, [os.urandom(32) for _ in range(63)], note + padding)
    assert 60_000 < len(padded) < 64 * 1024
    data = directory / "w" / "data" / "data.mdb"
    before = data.stat().st_size
    with requests.Session() as session:
        for _ in range(600):
            assert session.post(f"{witness.base}/add-checkpoint", data=padded, timeout=10).status_code == 422
    assert data.stat().st_size - before < 256 * 1024, (before, data.stat().st_size)
    metrics = requests.get(witness.base + "/metrics", timeout=10).text
    assert "topicledger_witness_refused_proofs_total 602\n" in metrics, metrics
    assert "topicledger_witness_evidence 0\n" in metrics
    output = witness.stop()
    assert "SPLIT VIEW" not in output
    assert output.count("a consistency proof did not verify") == 1, output  # at most once a minute per origin
    assert witness.evidence() == []
    # The witness still cosigns the log's growth.
    witness.start()
    assert cosign(witness, log, 5, LEAVES[:9]).status_code == 200


def test_a_restarted_witness_keeps_its_size(played):
    log, witness = played
    assert cosign(witness, log, 0, LEAVES[:7]).status_code == 200
    witness.stop(kill=True)
    witness.start()
    conflict = cosign(witness, log, 0, LEAVES[:9])
    assert conflict.status_code == 409 and conflict.text == "7\n"
    assert cosign(witness, log, 7, LEAVES[:9]).status_code == 200


def test_concurrent_add_checkpoints_cannot_roll_the_size_back(played):
    log, witness = played
    assert cosign(witness, log, 0, LEAVES[:4]).status_code == 200
    sizes = list(range(5, 37))
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda n: (n, cosign(witness, log, 4, LEAVES[:n]).status_code), sizes))
    winners = [n for n, status in answers if status == 200]
    assert len(winners) == 1, answers
    assert all(status == 409 for n, status in answers if n not in winners)
    # The witness holds the winner's size, not a smaller one written after it.
    assert cosign(witness, log, 0, LEAVES[:37]).text == f"{winners[0]}\n"


def test_public_key_and_key_file(directory):
    key = directory / "k.key"
    first = subprocess.run([binary(), "witness", "--key", str(key), "--name", "a.example/w", "--public-key"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    again = subprocess.run([binary(), "witness", "--key", str(key), "--name", "a.example/w", "--public-key"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert first == again and first.startswith("a.example/w+")
    assert verify_proof.parse_cosigner_key(first)[0] == "a.example/w"
    key.chmod(0o644)
    refused = subprocess.run([binary(), "witness", "--key", str(key), "--public-key"], capture_output=True, text=True)
    assert refused.returncode != 0 and "chmod 600" in refused.stdout + refused.stderr


# ---- ledger serve with witnesses ----

def server_with_witnesses(directory, quorum=None, start=(True, True)):
    log_key_holder = Server.ORIGIN
    witnesses = [Witness(directory / f"w{i}", f"witness.example/w{i}", []) for i in (1, 2)]
    server = Server(directory / "server", witnesses, quorum)
    for witness, started in zip(witnesses, start):
        witness.logs = [(log_key_holder, server.log_key.vkey)]
        if started:
            witness.start()
    return server, witnesses


@contextlib.contextmanager
def running(server, witnesses):
    """The server started; it and every witness stopped afterwards (its output returned in `output`)."""
    output = {}
    server.start()
    try:
        yield output
    finally:
        output["server"] = server.stop()
        for witness in witnesses:
            witness.stop()


def checkpoint_past(server, size, timeout=20):
    """The server's checkpoint once one larger than `size` is served (200), polled for up to `timeout` s."""
    deadline = time.time() + timeout
    while True:
        checkpoint = server.get("/ledger:checkpoint")
        if checkpoint.status_code == 200 and int(checkpoint.text.split("\n")[1]) > size:
            return checkpoint
        assert time.time() < deadline, checkpoint.text
        time.sleep(0.3)


def verify_with_python(proof_path, server, witnesses, quorum):
    arguments = [proof_path, "--public-key", server.log_key.vkey]
    for witness in witnesses:
        arguments += ["--witness", witness.vkey]
    arguments += ["--quorum", str(quorum)]
    return subprocess.run(["python3", str(verify_proof.__file__), *arguments], capture_output=True, text=True)


def test_two_witnesses_and_a_quorum_of_two(directory):
    server, witnesses = server_with_witnesses(directory, quorum=2)
    with running(server, witnesses):
        message = server.send()
        deadline = time.time() + 20
        while True:
            checkpoint = server.get("/ledger:checkpoint")
            if checkpoint.status_code == 200 and int(checkpoint.text.split("\n")[1]) >= 2:
                break  # the send and its audience
            assert time.time() < deadline, checkpoint.text
            time.sleep(0.2)
        note = checkpoint.text
        assert verify_proof.verify_note(note, server.log_key.vkey)[0] == Server.ORIGIN
        assert verify_proof.count_cosignatures(note, [w.vkey for w in witnesses]) == 2

        proof = server.get(f"/messages/{message}:proof")
        assert proof.status_code == 200, proof.text
        path = directory / "proof.json"
        path.write_text(proof.text)
        accepted = verify_with_python(str(path), server, witnesses, 2)
        assert accepted.returncode == 0 and "cosigned by 2 of 2" in accepted.stdout, accepted.stdout
        # One cosignature short of the quorum: refused, by both verifiers.
        document = json.loads(proof.text)
        lines = document["checkpoint"].split("\n")
        document["checkpoint"] = "\n".join(line for line in lines if "witness.example/w2" not in line)
        short = directory / "short.json"
        short.write_text(json.dumps(document))
        refused = verify_with_python(str(short), server, witnesses, 2)
        assert refused.returncode == 2 and "fewer than the quorum of 2" in refused.stdout, refused.stdout
        assert verify_with_python(str(short), server, witnesses, 1).returncode == 0
        swift = [binary(), "verify-proof", str(short), "--public-key", server.log_key.vkey,
                 "--witness", witnesses[0].vkey, "--witness", witnesses[1].vkey]
        assert subprocess.run(swift, capture_output=True, text=True).returncode == 2
        assert subprocess.run(swift + ["--quorum", "1"], capture_output=True, text=True).returncode == 0
        full = [binary(), "verify-proof", str(path), "--public-key", server.log_key.vkey,
                "--witness", witnesses[0].vkey, "--witness", witnesses[1].vkey]
        assert subprocess.run(full, capture_output=True, text=True).returncode == 0

        # A consistency proof ends at the cosigned checkpoint and carries it.
        consistency = server.get("/ledger:consistency?from=1")
        assert consistency.status_code == 200, consistency.text
        body = consistency.json()
        assert body["toCheckpoint"].split("\n")[1] == str(body["to"])
        assert verify_proof.count_cosignatures(body["toCheckpoint"], [w.vkey for w in witnesses]) == 2
        cpath = directory / "consistency.json"
        cpath.write_text(consistency.text)
        assert verify_with_python(str(cpath), server, witnesses, 2).returncode == 0
        # Kept durably beside the ledger.
        kept = (server.data / "shop" / "cosigned.jsonl").read_text().splitlines()
        assert json.loads(kept[-1])["note"].count("\u2014 witness.example/") == 2


def test_a_witness_down_means_503_and_readyz_says_which_then_recovery(directory):
    server, witnesses = server_with_witnesses(directory, quorum=2, start=(True, False))
    with running(server, witnesses):
        server.send()
        refused = server.get("/ledger:checkpoint")
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["status"] == "UNAVAILABLE"
        ready = requests.get(f"{server.base}/readyz", timeout=10)
        assert ready.status_code == 503
        reasons = " ".join(ready.json()["reasons"])
        assert "witness.example/w2: unreachable" in reasons and "witness.example/w1" not in reasons, reasons
        metrics = requests.get(f"{server.base}/metrics", timeout=10).text
        assert "topicledger_witness_quorum_missing 1" in metrics
        assert 'topicledger_witness_failing{witness="witness.example/w2"} 1' in metrics
        assert 'topicledger_witness_failing{witness="witness.example/w1"} 0' in metrics

        witnesses[1].start()
        recovered = server.get("/ledger:checkpoint")
        assert recovered.status_code == 200, recovered.text
        assert verify_proof.count_cosignatures(recovered.text, [w.vkey for w in witnesses]) == 2
        assert requests.get(f"{server.base}/readyz", timeout=10).status_code == 200
        assert "topicledger_witness_quorum_missing 0" in requests.get(f"{server.base}/metrics", timeout=10).text

        # A witness restarted keeps its size: the server's next checkpoint is cosigned from it (old = its size).
        witnesses[0].stop(kill=True)
        witnesses[0].start()
        server.send("sports")
        later = checkpoint_past(server, int(recovered.text.split("\n")[1]))
        assert verify_proof.count_cosignatures(later.text, [w.vkey for w in witnesses]) == 2

        # A restarted server knows no witness's size: each answers its first submission (old 0) with 409 and its
        # size, the server retries from it, and both cosign — no witness is reported failing.
        server.stop()
        cosigned_before = int(later.text.split("\n")[1])
        server.start()
        server.send("weather")
        again = checkpoint_past(server, cosigned_before)
        assert verify_proof.count_cosignatures(again.text, [w.vkey for w in witnesses]) == 2
        assert requests.get(f"{server.base}/readyz", timeout=10).status_code == 200
        metrics = requests.get(f"{server.base}/metrics", timeout=10).text
        assert 'topicledger_witness_failing{witness="witness.example/w1"} 0' in metrics
        assert 'topicledger_witness_failing{witness="witness.example/w2"} 0' in metrics


def test_a_witness_that_does_not_trust_the_log_is_reported(directory):
    server, witnesses = server_with_witnesses(directory, quorum=1, start=(True, False))
    witnesses[1].logs = [(Server.ORIGIN, PlayedLog(Server.ORIGIN).key.vkey)]  # another key for the origin
    witnesses[1].start()
    with running(server, witnesses) as output:
        server.send()
        checkpoint = server.get("/ledger:checkpoint")
        assert checkpoint.status_code == 200  # a quorum of 1: w1 suffices
        assert verify_proof.count_cosignatures(checkpoint.text, [w.vkey for w in witnesses]) == 1
        metrics = requests.get(f"{server.base}/metrics", timeout=10).text
        assert 'topicledger_witness_failing{witness="witness.example/w2"} 1' in metrics
        assert "topicledger_witness_quorum_missing 0" in metrics
    assert "403: the witness trusts no key that signed this checkpoint" in output["server"]


def test_a_config_with_a_bad_witness_is_refused(directory):
    server, _ = server_with_witnesses(directory, quorum=3, start=(False, False))
    result = subprocess.run([binary(), "serve", "--data", str(server.data), "--port", "0", "--config",
                             str(server.config)], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0 and "witnessQuorum" in result.stdout + result.stderr


# ---- the server's witness client against a witness that misbehaves ----

STARTS = "a witness did not cosign the project's checkpoint"
ENDS = "a witness cosigns the project's checkpoints again"


def readiness(server):
    ready = requests.get(f"{server.base}/readyz", timeout=10)
    return ready.status_code, " ".join(ready.json().get("reasons", [])) if ready.status_code != 200 else ""


def failing_gauge(server, name):
    metrics = requests.get(f"{server.base}/metrics", timeout=10).text
    prefix = f'topicledger_witness_failing{{witness="{name}"}} '
    return float(next(line[len(prefix):] for line in metrics.splitlines() if line.startswith(prefix)))


def test_a_409_with_a_size_above_the_checkpoint_fails_that_round_only(directory):
    """Anything between the server and an http:// witness can answer 409 with text/x.tlog.size 2^64-1: the witness
    fails that round, the next starts again from the size it last cosigned (or 0), and once it answers correctly
    it cosigns again, without a restart. The problem is logged once when it starts and once when it ends."""
    real = Witness(directory / "w1", "witness.example/w1", [])
    stand_in = ScriptedWitness("witness.example/w1", forward_to=real)
    server = Server(directory / "server", [stand_in], quorum=1)
    real.logs = [(Server.ORIGIN, server.log_key.vkey)]
    real.start()
    try:
        with running(server, [real]) as output:
            server.send()
            cosigned = int(checkpoint_past(server, 0).text.split("\n")[1])
            huge = (409, "text/x.tlog.size", "18446744073709551615\n")
            stand_in.set_script(lambda old, size: huge)
            server.send("sports")
            # Three rounds answered so: the witness is still asked (not disabled), and reported failing.
            stand_in.wait_for(lambda seen: sum(how == "scripted" for *_, how, _ in seen) >= 3, what="three rounds")
            status, reasons = readiness(server)
            assert status == 503 and "witness.example/w1: 409" in reasons, reasons
            assert "above this checkpoint" in reasons, reasons
            assert failing_gauge(server, "witness.example/w1") == 1
            # No round after the first is answered by anything but the script: none sent an old size from it.
            assert all(old <= size for old, size, *_ in stand_in.recorded()), stand_in.recorded()
            last_cosigned = max(size for _, size, how, status in stand_in.recorded()
                                if how == "forwarded" and status == 200)
            assert last_cosigned >= cosigned

            switched = len(stand_in.recorded())
            stand_in.set_script(None)
            started = time.time()
            recovered = checkpoint_past(server, last_cosigned, timeout=10)
            assert time.time() - started < 5, "cosigned again only after more than a few rounds"
            assert verify_proof.count_cosignatures(recovered.text, [real.vkey]) == 1
            first_after = stand_in.recorded()[switched]
            assert first_after[0] in (last_cosigned, 0), first_after  # from what it last cosigned, or from 0
            assert readiness(server) == (200, "")
            assert failing_gauge(server, "witness.example/w1") == 0
    finally:
        stand_in.close()
    assert output["server"].count(STARTS) == 1, output["server"]
    assert output["server"].count(ENDS) == 1, output["server"]


def test_cosignatures_dated_0_or_ahead_of_the_clock_are_refused_and_reported(directory):
    stand_in = ScriptedWitness("stand-in.example/w")
    server = Server(directory / "server", [stand_in], quorum=1)
    try:
        with running(server, []) as output:
            server.send()
            for bad in (lambda: 0, lambda: int(time.time()) + 3600, lambda: 2**63 - 1):
                stand_in.time = bad
                seen = len(stand_in.recorded())
                server.send("sports")
                refused = server.get("/ledger:checkpoint")
                assert refused.status_code == 503, refused.text  # none was ever cosigned
                stand_in.wait_for(lambda requests: len(requests) > seen)
                status, reasons = readiness(server)
                assert status == 503 and "stand-in.example/w: the cosignature's time" in reasons, reasons
                assert failing_gauge(server, "stand-in.example/w") == 1
            stand_in.time = lambda: int(time.time())
            accepted = checkpoint_past(server, 0, timeout=10)
            assert verify_proof.count_cosignatures(accepted.text, [stand_in.vkey]) == 1
            assert readiness(server) == (200, "")
            assert failing_gauge(server, "stand-in.example/w") == 0
    finally:
        stand_in.close()
    assert output["server"].count(STARTS) == 1, output["server"]
    assert output["server"].count(ENDS) == 1, output["server"]


# ---- bounded checkpoint files ----

HOUR, DAY = 3600, 86400


def expected_survivors(times, now):
    """The retention rule of docs/compliance.md, written here from its text: every checkpoint of the last hour; of
    older ones, the last of each clock hour that began less than 30 days ago, and the last of each UTC day before."""
    last_of = {}
    for index, signed in enumerate(times):
        hour_began = signed // HOUR * HOUR
        bucket = (("recent", index) if now - signed < HOUR
                  else ("hour", hour_began) if now - hour_began < 30 * DAY else ("day", signed // DAY))
        last_of[bucket] = index
    return sorted(last_of.values())


def test_the_checkpoint_files_are_thinned_by_the_retention_rule_and_proofs_still_come_from_the_tree(directory):
    """Files seeded with a checkpoint every 10 minutes for 40 days (times 5 minutes from the last hour's boundary):
    the server's first signature thins both, atomically, to what the rule keeps, and appends after it."""
    server, witnesses = server_with_witnesses(directory, quorum=2)
    project = server.data / "shop"
    project.mkdir(parents=True, mode=0o700)
    if time.time() % HOUR > HOUR - 60:
        time.sleep(HOUR - time.time() % HOUR + 1)  # an hour leaves the 30 days at each hour: not while the server thins
    now = int(time.time())
    times = sorted(now - k * 600 - 300 for k in range(1, 40 * 144 + 1))
    for name in ("checkpoints.jsonl", "cosigned.jsonl"):
        with open(project / name, "w") as file:
            for size, signed in enumerate(times, start=1):
                file.write(json.dumps({"note": f"seeded\n{size}\n", "size": size, "time": signed}) + "\n")
        (project / name).chmod(0o600)
    survivors = [times[i] for i in expected_survivors(times, now)]
    assert 700 < len(survivors) < 760
    with running(server, witnesses):
        first = server.send()
        cosigned = checkpoint_past(server, 0)
        for name in ("checkpoints.jsonl", "cosigned.jsonl"):
            lines = [json.loads(line) for line in (project / name).read_text().splitlines()]
            seeded = [line for line in lines if line["note"].startswith("seeded\n")]
            assert [line["time"] for line in seeded] == survivors, name
            signed_here = lines[len(seeded):]
            assert signed_here and all(not line["note"].startswith("seeded") for line in signed_here)
            assert all(abs(line["time"] - time.time()) < 120 for line in signed_here), signed_here
            assert oct((project / name).stat().st_mode & 0o777) == "0o600"
            assert not [path for path in project.iterdir() if path.name.startswith(name) and path.name != name]
        # What is served and proved does not come from the files: the cosigned checkpoint, and a consistency proof
        # from size 1 to it, verified outside Swift.
        assert verify_proof.count_cosignatures(cosigned.text, [w.vkey for w in witnesses]) == 2
        consistency = server.get("/ledger:consistency?from=1")
        assert consistency.status_code == 200, consistency.text
        path = directory / "consistency.json"
        path.write_text(consistency.text)
        assert verify_with_python(str(path), server, witnesses, 2).returncode == 0
        proof = server.get(f"/messages/{first}:proof")
        assert proof.status_code == 200, proof.text
