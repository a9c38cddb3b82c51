#!/usr/bin/env bash
# Issue 25's measurements over real sockets between real processes
# (cmd/llmflow/fastpath_bench_test.go, openstreams_bench_test.go):
#
#   scripts/bench-fastpath.sh            # BenchmarkFastPath: nginx, ReverseProxy, llmflow (+ Redis) vs direct
#   scripts/bench-fastpath.sh streams    # BenchmarkOpenStreams: RSS with 10,000 open streams
#
# Installs nginx (nginx-light) and redis-server with apt-get when missing
# (as root); without redis-server the Redis rows are left out. Knobs (env):
# SAMPLES (c=1 and streaming rounds, default 5000), LLMFLOW_FASTPATH_ROUNDS
# (c=16 rounds per target, 3), LLMFLOW_FASTPATH_SECONDS (each, 3),
# LLMFLOW_FASTPATH_REDIS=off, LLMFLOW_FASTPATH_REPLICAS=off,
# LLMFLOW_BENCH_STREAMS (10000 here), LLMFLOW_BENCH_LOG_LEVEL (the
# gateway's, default info as in production). Run it on an otherwise idle
# machine: every process shares the CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'scripts/bench-fastpath.sh: %s\n' "$*" >&2; exit 1; }
command -v go >/dev/null || die "Go is not installed"

apt_install() {
	[ "$(id -u)" = 0 ] || die "need root to apt-get install $*; install it yourself or run as root"
	printf '== apt-get install %s\n' "$*" >&2
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

case "${1:-fastpath}" in
fastpath)
	command -v nginx >/dev/null || apt_install nginx-light
	command -v nginx >/dev/null || die "nginx is missing after apt-get install nginx-light"
	if [ "${LLMFLOW_FASTPATH_REDIS:-}" != off ] && ! command -v redis-server >/dev/null && [ "$(id -u)" = 0 ]; then
		apt_install redis-server || true
	fi
	exec go test -run '^$' -bench '^BenchmarkFastPath$' -benchtime "${SAMPLES:-5000}x" -timeout 60m ./cmd/llmflow/
	;;
streams)
	export LLMFLOW_BENCH_STREAMS=${LLMFLOW_BENCH_STREAMS:-10000}
	exec go test -run '^$' -bench '^BenchmarkOpenStreams$' -benchtime 1x -timeout 60m ./cmd/llmflow/
	;;
*)
	die "usage: scripts/bench-fastpath.sh [fastpath|streams]"
	;;
esac
