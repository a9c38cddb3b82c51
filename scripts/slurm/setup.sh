#!/usr/bin/env bash
# scripts/slurm/setup.sh — a real Slurm accounting stack for llmflow's Slurm
# import tests (package slurmsync) on Debian 12, as root, loopback only:
#
#   munged -> MariaDB (127.0.0.1:3306) -> slurmdbd (127.0.0.1:6819) <- sacctmgr
#
# No slurmctld: sacctmgr and slurmdbd are all the import needs.
#
# Idempotent: every step checks first and prints one line only when it acts;
# a second run prints nothing. Fails loudly (non-zero exit, the reason on
# stderr, the slurmdbd log tail when slurmdbd is the problem).
#
# Writes only files carrying the marker line below (FORCE=1 overwrites a
# foreign file after keeping a copy):
#   /etc/slurm/slurmdbd.conf, /etc/slurm/slurm.conf
#   /etc/slurm/llmflow-slurmdbd.dsn  DSN of MariaDB user llmflow (SELECT on
#                                    slurm_acct_db: what `llmflow sync
#                                    --from-slurmdbd` needs)
#   /etc/slurm/llmflow-test.dsn      DSN of MariaDB user llmflow_test (the
#                                    integration tests: UPDATE on slurm_acct_db
#                                    to backdate rows, ALL on llmflow_test_%
#                                    scratch databases)
# (DSN files hold only the DSN, mode 0600; they are ours if they name our user.)
#
# Environment:
#   LLMFLOW_SLURM_CLUSTER  cluster named in slurm.conf and registered (default llmflow)
#   FORCE=1                overwrite foreign config files (a copy is kept)
#   VERBOSE=1              show apt-get output
#
# Stop with scripts/slurm/stop.sh.
set -euo pipefail
export LC_ALL=C
umask 022

CLUSTER=${LLMFLOW_SLURM_CLUSTER:-llmflow}
DB=slurm_acct_db
MARKER="# managed by llmflow scripts/slurm/setup.sh"
STATE=/run/llmflow-slurm # what this script started (for stop.sh)
LOGDIR=/var/log/slurm
DBD_LOG=$LOGDIR/slurmdbd.log
DBD_PID=/run/slurmdbd.pid
PKGS=(munge slurmdbd slurm-client)

say() { printf 'slurm/setup.sh: %s\n' "$*"; }
die() {
	trap - EXIT
	printf 'slurm/setup.sh: FAILED: %s\n' "$*" >&2
	exit 1
}
trap 'rc=$?; [[ $rc == 0 ]] || printf "slurm/setup.sh: FAILED (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' EXIT

[[ $(id -u) == 0 ]] || die "run as root (installs packages, writes /etc/slurm, starts daemons)"
[[ $CLUSTER =~ ^[a-z][a-z0-9_]{0,39}$ ]] || die "LLMFLOW_SLURM_CLUSTER=$CLUSTER: want [a-z][a-z0-9_]*"

wait_for() { # wait_for SECONDS WHAT CMD... ; polls every 0.2 s
	local t=$1 what=$2 i
	shift 2
	for ((i = 0; i < t * 5; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	return 1
}
pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# ------------------------------------------------------------------ packages
install_packages() {
	local need=() p out
	for p in "${PKGS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
	done
	command -v mysql >/dev/null || need+=(mariadb-client)
	((${#need[@]})) || return 0
	say "apt-get install ${need[*]}"
	local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}")
	if [[ ${VERBOSE:-0} == 1 ]]; then
		"${apt[@]}" || { apt-get update && "${apt[@]}"; } || die "apt-get install ${need[*]}"
		return
	fi
	# Try without the (slow) update first: the lists are usually fresh enough.
	if ! out=$("${apt[@]}" 2>&1); then
		say "apt-get update (install failed with the current lists)"
		out=$(apt-get update -q 2>&1) || die "apt-get update: $out"
		out=$("${apt[@]}" 2>&1) || die "apt-get install ${need[*]}: $out"
	fi
}

# ------------------------------------------------------------------ munge
start_munge() {
	if [[ ! -s /etc/munge/munge.key ]]; then
		say "creating /etc/munge/munge.key"
		install -d -m 0700 -o munge -g munge /etc/munge
		mungekey --create --keyfile=/etc/munge/munge.key
	fi
	chown munge:munge /etc/munge/munge.key
	chmod 0400 /etc/munge/munge.key
	if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
	say "starting munged"
	install -d -m 0755 -o munge -g munge /run/munge
	install -d -m 0700 -o munge -g munge /var/log/munge /var/lib/munge
	start-stop-daemon --start --quiet --oknodo --chuid munge:munge \
		--pidfile /run/munge/munged.pid --exec /usr/sbin/munged
	wait_for 20 munged bash -c 'munge -n </dev/null | unmunge' || die "munged did not start (see /var/log/munge/munged.log)"
	install -d "$STATE" && touch "$STATE/munged"
}

# ------------------------------------------------------------------ MariaDB
sql() { mysql --protocol=socket -uroot -N -B "$@"; }

start_mariadb() {
	if mysqladmin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1 ||
		mysqladmin --protocol=socket -uroot ping >/dev/null 2>&1; then
		return 0
	fi
	local server
	server=$(command -v mariadbd || echo /usr/sbin/mariadbd)
	[[ -x $server ]] || die "MariaDB is not running and $server is missing (apt-get install mariadb-server)"
	say "starting MariaDB ($server, 127.0.0.1:3306)"
	install -d -m 0755 -o mysql -g mysql /run/mysqld
	start-stop-daemon --start --oknodo --background --exec "$server" -- --user=mysql
	wait_for 60 MariaDB mysqladmin --protocol=socket -uroot ping ||
		die "MariaDB did not answer within 60 s (see /var/log/mysql/error.log)"
	install -d "$STATE" && touch "$STATE/mariadb"
}

# Password kept in a file we own: reuse it, so a re-run changes nothing.
# read_secret VAR FILE SED-EXPR
read_secret() {
	local v=""
	[[ -s $2 ]] && v=$(sed -n "$3" "$2" | head -1)
	[[ -n $v ]] || v=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24)
	printf -v "$1" '%s' "$v"
}

ensure_db_user() { # ensure_db_user USER PASSWORD GRANT-SQL...
	local user=$1 pass=$2 h
	shift 2
	for h in localhost 127.0.0.1; do
		# Only act when the password or a grant is missing.
		if sql -e "SELECT 1 FROM mysql.user WHERE user='$user' AND host='$h' AND authentication_string=PASSWORD('$pass')" | grep -q 1; then
			continue
		fi
		say "MariaDB user $user@$h"
		sql -e "CREATE USER IF NOT EXISTS '$user'@'$h' IDENTIFIED BY '$pass'; ALTER USER '$user'@'$h' IDENTIFIED BY '$pass';"
	done
	local g
	for g in "$@"; do
		for h in localhost 127.0.0.1; do
			local who="'$user'@'$h'"
			sql -e "${g//@HOST/$who}"
		done
	done
}

setup_databases() {
	read_secret DBD_PASS /etc/slurm/slurmdbd.conf 's/^StoragePass=//p'
	read_secret RO_PASS /etc/slurm/llmflow-slurmdbd.dsn 's/^llmflow:\([^@]*\)@.*/\1/p'
	read_secret TEST_PASS /etc/slurm/llmflow-test.dsn 's/^llmflow_test:\([^@]*\)@.*/\1/p'
	if ! sql -e "SHOW DATABASES LIKE '$DB'" | grep -qx "$DB"; then
		say "creating database $DB"
		sql -e "CREATE DATABASE IF NOT EXISTS \`$DB\`"
	fi
	ensure_db_user slurm "$DBD_PASS" "GRANT ALL ON \`$DB\`.* TO @HOST"
	ensure_db_user llmflow "$RO_PASS" "GRANT SELECT ON \`$DB\`.* TO @HOST"
	ensure_db_user llmflow_test "$TEST_PASS" \
		"GRANT SELECT, UPDATE ON \`$DB\`.* TO @HOST" \
		"GRANT ALL ON \`llmflow\\_test\\_%\`.* TO @HOST"
}

# ------------------------------------------------------------------ files
CHANGED_DBD=0
# write_file PATH MODE MARKED < content ; returns 0 if it wrote.
# MARKED=1: the content carries $MARKER; an existing file without it is foreign.
# MARKED=pattern: an existing file is ours if it matches pattern (DSN files).
write_file() {
	local path=$1 mode=$2 own=$3 tmp
	tmp=$(mktemp)
	cat >"$tmp"
	if [[ -e $path ]] && cmp -s "$tmp" "$path"; then
		rm -f "$tmp"
		return 1
	fi
	if [[ -e $path ]]; then
		local ours=0
		if [[ $own == 1 ]]; then grep -qxF "$MARKER" "$path" && ours=1; else grep -q "$own" "$path" && ours=1; fi
		if [[ $ours == 0 ]]; then
			[[ ${FORCE:-0} == 1 ]] || {
				rm -f "$tmp"
				die "$path exists and was not written by this script (FORCE=1 overwrites it, keeping $path.orig.*)"
			}
			cp -a "$path" "$path.orig.$(date +%s)"
		fi
	fi
	say "writing $path"
	install -m "$mode" -o root -g root "$tmp" "$path"
	rm -f "$tmp"
	return 0
}

write_configs() {
	install -d -m 0755 /etc/slurm "$LOGDIR" /var/lib/slurm
	write_file /etc/slurm/slurmdbd.conf 0600 1 <<EOF && CHANGED_DBD=1 || true
$MARKER
# slurmdbd for llmflow's Slurm import tests: loopback only, runs as root.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
# Bind the address \$(hostname) resolves to (loopback here), not 0.0.0.0.
CommunicationParameters=NoInAddrAny
SlurmUser=root
DebugLevel=info
LogFile=$DBD_LOG
PidFile=$DBD_PID
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=$DBD_PASS
StorageLoc=$DB
EOF
	write_file /etc/slurm/slurm.conf 0644 1 <<EOF || true
$MARKER
# Minimal slurm.conf for sacctmgr (no slurmctld runs): names the cluster and
# where slurmdbd is.
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
StateSaveLocation=/var/lib/slurm/slurmctld
EOF
	write_file /etc/slurm/llmflow-slurmdbd.dsn 0600 '^llmflow:' <<EOF || true
llmflow:$RO_PASS@tcp(127.0.0.1:3306)/$DB
EOF
	write_file /etc/slurm/llmflow-test.dsn 0600 '^llmflow_test:' <<EOF || true
llmflow_test:$TEST_PASS@tcp(127.0.0.1:3306)/$DB
EOF
}

# ------------------------------------------------------------------ slurmdbd
dbd_fail() {
	trap - EXIT
	{
		printf 'slurm/setup.sh: FAILED: %s\n' "$1"
		[[ -f $DBD_LOG ]] && { echo "--- last lines of $DBD_LOG:"; tail -n 15 "$DBD_LOG"; }
	} >&2
	exit 1
}

sacctmgr_ok() { timeout 10 sacctmgr -i show cluster >/dev/null 2>&1; }

start_slurmdbd() {
	if [[ $CHANGED_DBD == 1 ]] && pid_alive "$DBD_PID"; then
		local pid
		pid=$(cat "$DBD_PID")
		say "restarting slurmdbd (pid $pid): slurmdbd.conf changed"
		kill "$pid"
		wait_for 30 "slurmdbd exit" bash -c "! kill -0 $pid" || die "slurmdbd (pid $pid) did not exit"
	fi
	if ! pid_alive "$DBD_PID"; then
		say "starting slurmdbd (127.0.0.1:6819)"
		start-stop-daemon --start --quiet --oknodo --pidfile "$DBD_PID" --exec /usr/sbin/slurmdbd ||
			dbd_fail "slurmdbd did not start"
		install -d "$STATE" && touch "$STATE/slurmdbd"
	fi
	# The first start creates the tables (a few seconds).
	wait_for 120 "sacctmgr" sacctmgr_ok || dbd_fail "sacctmgr -i show cluster: no answer from slurmdbd after 120 s"
}

add_cluster() {
	if sacctmgr -nP show cluster format=Cluster | grep -qx "$CLUSTER"; then return 0; fi
	say "sacctmgr add cluster $CLUSTER"
	sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER"
}

# register_gpu_tres: a GPU site's slurmctld registers gres/gpu in tres_table
# (AccountingStorageTRES=gres/gpu); the lab has no slurmctld, so it is
# registered the same way here, once: GrpTRES=gres/gpu=N and the
# write-back need it.
register_gpu_tres() {
	if [[ -n $(sql slurm_acct_db -e "SELECT id FROM tres_table WHERE type = 'gres' AND name = 'gpu'") ]]; then return 0; fi
	say "registering TRES gres/gpu"
	sql slurm_acct_db -e "INSERT INTO tres_table (creation_time, deleted, type, name) VALUES (UNIX_TIMESTAMP(), 0, 'gres', 'gpu')" ||
		die "could not register TRES gres/gpu in tres_table"
}

install_packages
start_munge
start_mariadb
setup_databases
write_configs
start_slurmdbd
add_cluster
register_gpu_tres
