# TopicLedger — the two set-up commands (see README.md). Both install liblmdb-dev when missing.
.PHONY: run test bench bench-full format-lint

# Runs the main job on the embedded default: the ledger in ./ledger-data, project demo-project.
run:
	@tools/install-deps.sh
	swift build --product ledger
	@tools/run-demo.sh

# Builds everything once and runs every test.
test:
	@tools/install-deps.sh
	swift build --build-tests
	swift test --skip-build

bench:
	tools/bench/run.sh quick

bench-full:
	tools/bench/run.sh full

format-lint:
	swift format lint --strict --recursive Sources Tests tools/bench/Sources
