"""The console against an attacker, through `ledger serve` over plain HTTP (no browser needed): sessions are
kept per project, wrong keys are throttled per client address, every page answers HEAD, a recipients page
past the end shows the last page, and the recipients CSV cannot carry a spreadsheet formula."""

import hashlib
import html
import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from conftest import PROJECT  # noqa: F401 (the conftest puts ledger_server on the path)
from ledger_server import start_server, stop_and_verify


def _hash(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def _serve_config(config):
    directory = Path(tempfile.mkdtemp(prefix="ledger-config-"))
    (directory / "config.json").write_text(json.dumps(config))
    process, base, data, binary = start_server(["--config", str(directory / "config.json")])
    return process, base, data, binary, directory


def _sign_in(base, key, session=None, source="127.0.0.1"):
    """Posts the sign-in form from `source`; returns (status, session cookie or None, headers, body)."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10, source_address=(source, 0))
    connection.request("POST", "/console/sign-in", body=f"key={key}",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    reply = connection.getresponse()
    body = reply.read().decode()
    connection.close()
    cookie = re.match(r"tl_console=([^;]+);", reply.getheader("Set-Cookie") or "")
    return reply.status, cookie.group(1) if cookie else None, reply, body


def _page(base, path, cookie, method="GET"):
    return requests.request(method, base + path, cookies={"tl_console": cookie} if cookie else {},
                            allow_redirects=False, timeout=10)


@pytest.fixture(scope="module")
def two_projects():
    config = {"projects": {
        "alpha": {"adminKeys": [_hash("alpha-admin")], "auditorKeys": [_hash("alpha-auditor")]},
        "beta": {"adminKeys": [_hash("beta-admin")], "auditorKeys": [_hash("beta-auditor")]},
    }}
    process, base, data, binary, directory = _serve_config(config)
    yield base
    stop_and_verify(process, data, binary, projects=())
    shutil.rmtree(directory, ignore_errors=True)


def test_another_projects_sign_ins_cannot_sign_anyone_out(two_projects):
    """10,001 sign-ins with beta's key (past the 10,000 sessions all projects used to share) leave alpha's
    session alone; beta's own oldest sessions go, past beta's cap."""
    base = two_projects
    status, alpha, _, _ = _sign_in(base, "alpha-auditor")
    assert status == 303 and alpha
    _, first_beta, _, _ = _sign_in(base, "beta-auditor")

    def sign_in_many(count):
        with requests.Session() as session:
            for _ in range(count):
                reply = session.post(base + "/console/sign-in", data={"key": "beta-auditor"},
                                     allow_redirects=False, timeout=10)
                assert reply.status_code == 303
                session.cookies.clear()
            return reply.cookies["tl_console"]

    with ThreadPoolExecutor(4) as pool:
        last_beta = list(pool.map(sign_in_many, [2500] * 4))[-1]
    overview = _page(base, "/console", alpha)
    assert overview.status_code == 200 and "Project alpha" in overview.text, overview.status_code
    assert _page(base, "/console", last_beta).status_code == 200
    evicted = _page(base, "/console", first_beta)
    assert evicted.status_code == 303 and evicted.headers["Location"] == "/console/sign-in"


def test_wrong_keys_are_throttled_per_client_address(two_projects):
    base = two_projects
    for attempt in range(5):
        status, cookie, _, body = _sign_in(base, f"guess-{attempt}", source="127.0.0.7")
        assert status == 401 and cookie is None and "does not open the audit console" in body
    status, cookie, reply, body = _sign_in(base, "guess-6", source="127.0.0.7")
    assert status == 429 and cookie is None, status
    assert 1 <= int(reply.getheader("Retry-After")) <= 12 and "Too many wrong keys" in body
    # While throttled the key is not even looked at: the right one is refused too (no oracle).
    assert _sign_in(base, "alpha-auditor", source="127.0.0.7")[0] == 429
    # Another address is not held back, and right keys never count.
    for _ in range(8):
        status, cookie, _, _ = _sign_in(base, "alpha-auditor", source="127.0.0.8")
        assert status == 303 and cookie


@pytest.fixture(scope="module")
def imported():
    """A ledger imported with a device and a topic whose names begin with `-`, served in dev mode."""
    operations = [
        {"op": "register", "token": "-cmd:APA91bX", "platform": "ios", "time": "2026-03-01T09:00:00Z"},
        {"op": "register", "token": "plain:APA91bY", "platform": "ios", "time": "2026-03-01T09:00:00Z"},
        {"op": "subscribe", "token": "-cmd:APA91bX", "topic": "-weather", "via": "client",
         "time": "2026-03-01T09:05:00Z"},
        {"op": "subscribe", "token": "plain:APA91bY", "topic": "-weather", "via": "client",
         "time": "2026-03-01T09:05:00Z"},
        {"op": "send", "topic": "-weather", "message": {"data": {"k": "v"}}, "time": "2026-03-03T12:00:00Z"},
    ]
    binary = os.environ["LEDGER_BIN"]
    data = tempfile.mkdtemp(prefix="ledger-import-")
    lines = Path(data) / "operations.jsonl"
    lines.write_text("".join(json.dumps(operation) + "\n" for operation in operations))
    result = subprocess.run([binary, "import", "--data", data, str(lines)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    process, base, unused, binary = start_server(["--data", data])  # the last --data given is served
    shutil.rmtree(unused, ignore_errors=True)
    _, cookie, _, _ = _sign_in(base, "auditor")
    messages = _page(base, "/console/messages", cookie).text
    message = re.search(r'/console/messages/(\d+)"', messages).group(1)
    yield {"base": base, "data": data, "binary": binary, "cookie": cookie, "message": message}
    stop_and_verify(process, data, binary)


def test_the_recipients_csv_neutralises_formulas_as_ledger_replay_does(imported):
    csv = _page(imported["base"], f"/console/messages/{imported['message']}/recipients.csv", imported["cookie"])
    assert csv.status_code == 200
    lines = csv.text.splitlines()
    assert lines[0] == "token,device" and [line.rsplit(",", 1)[0] for line in lines[1:]] == [
        "\"'-cmd:APA91bX\"", "plain:APA91bY"]
    replay = subprocess.run([imported["binary"], "replay", "--data", imported["data"], "--message",
                             imported["message"], "--format", "csv"], capture_output=True, text=True)
    assert replay.returncode == 0 and replay.stdout == csv.text, (replay.stdout, csv.text)
    topics = subprocess.run([imported["binary"], "topics", "--data", imported["data"], "--format", "csv"],
                            capture_output=True, text=True)
    assert topics.stdout.splitlines() == ["topic,subscribers", "\"'-weather\",2"]
    # docs/compliance.md's digests by hand: of the device numbers, the digest recorded at send time (version 2);
    # of the tokens, guard undone, the version-1 digest over the same recipients.
    csv_command = (f"{imported['binary']} replay --data {imported['data']} --message {imported['message']}"
                   " --format csv | tail -n +2")
    devices = f"{csv_command} | cut -d, -f2 | sort -n | sha256sum"
    tokens = f"{csv_command} | cut -d, -f1 | sed -E \"s/^\\\"'(.*)\\\"\\$/\\1/\" | LC_ALL=C sort | sha256sum"
    by_hand = {name: subprocess.run(["bash", "-c", recipe], capture_output=True, text=True).stdout.split()[0]
               for name, recipe in (("devices", devices), ("tokens", tokens))}
    replay = json.loads(subprocess.run([imported["binary"], "replay", "--data", imported["data"], "--message",
                                        imported["message"], "--format", "json"], capture_output=True,
                                       text=True).stdout)
    assert replay["digestVersion"] == 2 and by_hand["devices"] == replay["recordedDigest"]
    assert by_hand["tokens"] == hashlib.sha256(b"-cmd:APA91bX\nplain:APA91bY\n").hexdigest()


def test_a_recipients_page_past_the_end_shows_the_last_page(imported):
    path = f"/console/messages/{imported['message']}"
    for start, shown in ((0, "1–2"), (1, "2–2"), (2, "1–2"), (500, "1–2"), (-3, "1–2")):
        page = html.unescape(_page(imported["base"], f"{path}?start={start}", imported["cookie"]).text)
        assert f"Recipients {shown} of 2" in page, (start, re.findall(r"Recipients [^<]*", page))


def test_every_console_page_answers_head_as_get(imported):
    base, cookie = imported["base"], imported["cookie"]
    for path, signed_in in (("/console/sign-in", False), ("/console/static/console.css", False),
                            ("/console/static/icon.svg", False), ("/console", True), ("/console/messages", True),
                            (f"/console/messages/{imported['message']}", True),
                            (f"/console/messages/{imported['message']}/recipients.csv", True),
                            ("/console/devices", True), ("/console/topics", True), ("/console/topics/-weather", True),
                            ("/console/log", True), ("/console", False), ("/console/messages/1", True)):
        get = _page(base, path, cookie if signed_in else None)
        head = _page(base, path, cookie if signed_in else None, method="HEAD")
        assert head.status_code == get.status_code, (path, head.status_code, get.status_code)
        assert head.headers.get("Content-Type") == get.headers.get("Content-Type"), path
        assert head.content == b"", path
        assert not head.headers.get("Content-Type", "").startswith("application/json"), path
