# TopicLedger — the two set-up commands (see README.md). Both install liblmdb-dev when missing.
.PHONY: run test demo bench bench-full format-lint

# Runs the server on the embedded default: the ledger in ./ledger-data, dev credentials printed,
# listening on 127.0.0.1:8080.
run:
	@tools/install-deps.sh
	swift build --product ledger
	"$$(swift build --show-bin-path)/ledger" serve --data ./ledger-data

# Builds everything once and runs every test: Swift tests, then the firebase-admin SDK conformance suite
# against the built server (pip installs firebase-admin 7.7.0).
test:
	@tools/install-deps.sh
	swift build --build-tests
	swift test --skip-build
	tools/sdk-conformance/run.sh "$$(swift build --show-bin-path)/ledger"
	samples/seeds-scenario.sh

# Loads the sample operations into ./ledger-data once (no server needed) and verifies the ledger.
demo:
	@tools/install-deps.sh
	swift build --product ledger
	@tools/demo.sh

bench:
	tools/bench/run.sh quick

bench-full:
	tools/bench/run.sh full

format-lint:
	swift format lint --strict --recursive Sources Tests tools/bench/Sources tools/fuzz samples/DeviceClient
