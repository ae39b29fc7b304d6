# TopicLedger — the two set-up commands (see README.md). Both install liblmdb-dev when missing.
.PHONY: run test demo bench bench-full soak fuzz format-lint screenshots

# Runs the server on the embedded default: the ledger in ./ledger-data, dev credentials printed,
# listening on 127.0.0.1:8080.
run:
	@tools/install-deps.sh
	swift build --product ledger
	"$$(swift build --show-bin-path)/ledger" serve --data ./ledger-data

# Builds everything once, checks that every target imports only the modules it declares (tools/check-imports.py), and runs every test: Swift tests (fault injection included; the Merkle proofs are also
# checked by tools/merkle/verify_proof.py, which needs Python's `cryptography`), the firebase-admin SDK
# conformance suite and the raw-HTTP battery against the built server (pip installs firebase-admin 7.7.0),
# the same SDK and delivery suites over HTTPS with a test CA (HTTP/2, certificate reload and ledger-device over
# HTTPS in test_https.py, which adds the test CA to the system trust store for its run: URLSession on Linux trusts
# nothing else), samples/topicledger.service checked by systemd-analyze verify, the APNs stand-in's own tests
# (IntegrationTests/apns-standin: HTTP/2, provider tokens, Apple's documented replies, its Live Activity rules) and the APNs provider, Live Activity pushes included, through `ledger
# serve` against it, the cluster suite (IntegrationTests/cluster: three etcd members and three nodes on loopback, tmpfs mounts for full disks, and a
# network namespace for a node cut off; apt installs etcd-server, etcd-client and iptables), the witnesses (IntegrationTests/witness:
# `ledger witness` against a log the test plays from the C2SP texts, and `ledger serve` with two witnesses), the alert rules (IntegrationTests/alerts: promtool,
# and every metric the rules use scraped from `ledger serve`; apt installs prometheus), the seeds scenario, the audit console in headless chromium (apt installs chromium and
# chromium-driver, pip selenium; screenshots to IntegrationTests/console-browser/screenshots, ignored: `make screenshots`
# refreshes the ones in docs/console), and schemathesis against docs/openapi.yaml (30 s). The fuzz targets' checks run
# in the Swift tests (FuzzHarnessTests: their seed corpora and 50,000 mutations), in the one build; libFuzzer's own
# search needs a second, instrumented build of its own and is `make fuzz`. Each step's time is printed as it ends
# (tools/ci/step.sh); the suites' Debian and Python packages are installed while the build runs (tools/ci/prefetch.sh). The Swift tests
# run in three processes. The suites with in-process servers and time limits (LedgerServerTests,
# TopicLedgerMessagingTests) run apart from the store, core and CLI suites: those do seconds of synchronous LMDB
# work (opens, fsyncs, verify, rebuild) on Swift's cooperative pool, which has two threads on two cores, and in
# one process they held both for 11-53 s at a time (stack samples and a sleep probe, 2026-11-27), while the
# servers beside them answered nothing and a messaging test's 10 s wait ran out. The request cancellation stress
# test runs in a process of its own: a cancelled URLSession request can hold FoundationNetworking's work queue for
# its 60 s timeout, and the messaging and delivery tests beside it then time out (one CI run, 2026-11-26).
test:
	@tools/ci/step.sh deps sh -c 'tools/install-deps.sh && python3 -m pip install --quiet --disable-pip-version-check -r tools/merkle/requirements.txt && tools/ci/prefetch.sh start'
	@tools/ci/step.sh build swift build --build-tests --explicit-target-dependency-import-check=error
	@tools/ci/step.sh check-imports python3 tools/check-imports.py
	@tools/ci/step.sh swift-test-store swift test --skip-build --skip "CancellationTests|LedgerServerTests|TopicLedgerMessagingTests"
	@tools/ci/step.sh swift-test-servers swift test --skip-build --filter "LedgerServerTests|TopicLedgerMessagingTests" --skip CancellationTests
	@tools/ci/step.sh swift-test-cancel swift test --skip-build --filter CancellationTests
	@tools/ci/step.sh prefetch-wait tools/ci/prefetch.sh wait
	@tools/ci/step.sh sdk-conformance IntegrationTests/sdk-conformance/run.sh "$$(swift build --show-bin-path)/ledger"
	@tools/ci/step.sh deploy IntegrationTests/deploy/verify-unit.sh "$$(swift build --show-bin-path)/ledger"
	@tools/ci/step.sh apns-standin IntegrationTests/apns-standin/run.sh "$$(swift build --show-bin-path)/ledger"
	@tools/ci/step.sh cluster IntegrationTests/cluster/run.sh "$$(swift build --show-bin-path)/ledger"
	@tools/ci/step.sh witness IntegrationTests/witness/run.sh "$$(swift build --show-bin-path)/ledger"
	@tools/ci/step.sh alerts IntegrationTests/alerts/run.sh "$$(swift build --show-bin-path)/ledger"
	@tools/ci/step.sh seeds samples/seeds-scenario.sh
	@tools/ci/step.sh console-browser IntegrationTests/console-browser/run.sh "$$(swift build --show-bin-path)/ledger"
	@tools/ci/step.sh schemathesis IntegrationTests/schemathesis/run.sh "$$(swift build --show-bin-path)/ledger" 30

# Loads the sample operations into ./ledger-data once (no server needed) and verifies the ledger.
demo:
	@tools/install-deps.sh
	swift build --product ledger
	@tools/demo.sh

bench:
	tools/bench/run.sh quick

bench-full:
	tools/bench/run.sh full

# 30 minutes of mixed load on a release build; a CSV and a plot in tools/soak/results/.
soak:
	@tools/install-deps.sh
	swift build -c release --product ledger
	tools/soak/run.sh "$$(swift build -c release --show-bin-path)/ledger" 30

format-lint:
	swift format lint --strict --recursive Sources Tests tools/bench/Sources tools/fuzz samples/DeviceClient

# libFuzzer with AddressSanitizer on the condition parser, request bodies and stored events, 60 s each (a release
# build in .build-fuzz; tools/fuzz/run.sh SECONDS [TARGET…] for longer or fewer). Crashing inputs: tools/fuzz/findings.
fuzz:
	tools/fuzz/run.sh 60

# Refreshes the console screenshots docs/compliance.md shows (docs/console), by running the browser tests with
# their screenshots written there; `make test` writes its own into an ignored folder.
screenshots:
	@tools/install-deps.sh
	swift build --product ledger
	CONSOLE_SCREENSHOTS="$$(pwd)/docs/console" IntegrationTests/console-browser/run.sh "$$(swift build --show-bin-path)/ledger"
