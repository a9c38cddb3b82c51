#!/usr/bin/env bash
# The test command: sets up what the tests need on a fresh Debian machine
# (as root, with apt-get), then runs every test with the race detector.
#
#   scripts/test.sh              # everything
#   scripts/test.sh ./gateway    # some packages (extra args go to go test)
#
# Nothing is skipped silently: a test that needs something missing fails
# and says what to install. To skip on purpose: LLMFLOW_SKIP_NODE_SDK=1 (the
# npm SDK test), LLMFLOW_SKIP_PG=1 (PostgreSQL), LLMFLOW_SKIP_SLURM=1 (the
# real slurmdbd and sacctmgr), LLMFLOW_SKIP_CHROMIUM=1 (the console in a
# browser).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'scripts/test.sh: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "Go is not installed (need Go 1.26): see https://go.dev/dl/"

apt_install() {
	[ "$(id -u)" = 0 ] || die "need root to apt-get install $*; install it yourself or run as root"
	log "apt-get install $*"
	if [ -z "${_APT_UPDATED:-}" ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
		_APT_UPDATED=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Node.js and the official openai npm package, for the SDK end-to-end test.
setup_node_sdk() {
	if [ "${LLMFLOW_SKIP_NODE_SDK:-}" = 1 ]; then
		log "LLMFLOW_SKIP_NODE_SDK=1: the npm SDK test will be skipped"
		return
	fi
	command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
	local dir=testdata/sdk/node
	if [ ! -f "$dir/node_modules/openai/package.json" ] ||
		[ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
		log "npm ci in $dir"
		(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci failed in $dir"
	fi
}

# PostgreSQL on 127.0.0.1:5432 (trust auth, database test), for the store's
# contract suite against a real server.
setup_postgres() {
	if [ "${LLMFLOW_SKIP_PG:-}" = 1 ]; then
		log "LLMFLOW_SKIP_PG=1: the PostgreSQL tests will be skipped"
		return
	fi
	command -v pg_ctlcluster >/dev/null || apt_install postgresql
	if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
		log "starting PostgreSQL"
		local v
		v=$(ls /etc/postgresql | sort -V | tail -n 1)
		pg_ctlcluster --skip-systemctl-redirect "$v" main start || die "could not start PostgreSQL $v"
		for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
		pg_isready -q -h 127.0.0.1 -p 5432 || die "PostgreSQL does not answer on 127.0.0.1:5432"
	fi
	export LLMFLOW_TEST_PG_DSN=${LLMFLOW_TEST_PG_DSN:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
}

# munge + MariaDB + slurmdbd + sacctmgr, for the Slurm import tests.
setup_slurm() {
	if [ "${LLMFLOW_SKIP_SLURM:-}" = 1 ]; then
		log "LLMFLOW_SKIP_SLURM=1: the Slurm tests will be skipped"
		return
	fi
	scripts/slurm/setup.sh || die "scripts/slurm/setup.sh failed (LLMFLOW_SKIP_SLURM=1 skips the Slurm tests)"
}

# Redis on 127.0.0.1:6379 (no persistence), for the shared counters and
# the replica tests; the tests that kill Redis start their own redis-server
# on another port, so redis-server must be installed either way.
setup_redis() {
	if [ "${LLMFLOW_SKIP_REDIS:-}" = 1 ]; then
		log "LLMFLOW_SKIP_REDIS=1: the Redis tests will be skipped"
		export LLMFLOW_SKIP_REDIS
		return
	fi
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null || apt_install redis-server
	command -v redis-server >/dev/null || die "redis-server is missing after apt-get install redis-server (LLMFLOW_SKIP_REDIS=1 skips the Redis tests)"
	if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
		log "starting Redis on 127.0.0.1:6379"
		mkdir -p /var/lib/redis /var/log/redis
		redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
			--dir /var/lib/redis --logfile /var/log/redis/ci.log || die "could not start redis-server (see /var/log/redis/ci.log)"
		for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.2; done
		redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || die "Redis does not answer on 127.0.0.1:6379 (see /var/log/redis/ci.log)"
	fi
}

# Debian's chromium, for the console's browser test (chromedp, headless).
# Installed here, the test then requires it (LLMFLOW_REQUIRE_CHROMIUM=1):
# it fails rather than skips when the browser is gone.
setup_chromium() {
	if [ "${LLMFLOW_SKIP_CHROMIUM:-}" = 1 ]; then
		log "LLMFLOW_SKIP_CHROMIUM=1: the console's browser test will be skipped"
		return
	fi
	command -v chromium >/dev/null || apt_install chromium
	command -v chromium >/dev/null || die "chromium is missing after apt-get install chromium (LLMFLOW_SKIP_CHROMIUM=1 skips the browser test)"
	export LLMFLOW_REQUIRE_CHROMIUM=1
}

# Debian's prometheus and promtool, for the alert rules' unit tests and the
# test that runs a real Prometheus against a gateway (cmd/llmflow
# TestAlertRules, TestPrometheusRulesAndDashboard; they skip, saying so,
# only where prometheus is not installed). Not its recommended node
# exporter, and the package's service is never started: the tests run
# their own.
setup_prometheus() {
	command -v prometheus >/dev/null && command -v promtool >/dev/null || apt_install --no-install-recommends prometheus
	command -v promtool >/dev/null || die "promtool is missing after apt-get install prometheus"
}

setup_node_sdk
setup_chromium
setup_prometheus
setup_postgres
setup_slurm
setup_redis

log "go test -race ${*:-./...}"
go test -race -count=1 -timeout 20m "${@:-./...}"
