#!/usr/bin/env bash
# scripts/slurm/stop.sh — stop what scripts/slurm/setup.sh started, by PID
# (never by process name): slurmdbd; with STOP_ALL=1 also munged and MariaDB,
# but only if setup.sh started them (MariaDB usually serves other things).
set -uo pipefail
STATE=/run/llmflow-slurm

stop() { # stop PIDFILE NAME
	local pf=$1 name=$2 pid
	[[ -s $pf ]] || { echo "slurm/stop.sh: $name: no pidfile $pf"; return 0; }
	pid=$(cat "$pf")
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "slurm/stop.sh: $name: pid $pid not running"
		return 0
	fi
	echo "slurm/stop.sh: stopping $name (pid $pid)"
	kill "$pid"
	for _ in $(seq 1 150); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	echo "slurm/stop.sh: $name (pid $pid) still running after 30 s" >&2
	return 1
}

rc=0
stop /run/slurmdbd.pid slurmdbd || rc=1
rm -f "$STATE/slurmdbd"
if [[ ${STOP_ALL:-0} == 1 ]]; then
	if [[ -e $STATE/munged ]]; then
		stop /run/munge/munged.pid munged || rc=1
		rm -f "$STATE/munged"
	fi
	if [[ -e $STATE/mariadb ]]; then
		stop /run/mysqld/mysqld.pid mariadbd || rc=1
		rm -f "$STATE/mariadb"
	fi
fi
exit $rc
