#!/usr/bin/env bash
# scripts/slurm/sshare-lab.sh — a private slurmctld + slurmd for one cluster
# next to the slurmdbd of scripts/slurm/setup.sh, to capture what sshare
# computes (Fair Tree) for a tree with Fairshare=parent at several depths, a
# project two levels below its team, user associations with shares and
# root's own user association with a share. Run setup.sh first, as root.
#
#   scripts/slurm/sshare-lab.sh start     config, cluster, tree, Unix users, daemons
#   scripts/slurm/sshare-lab.sh jobs      a fixed CPU workload (~3 min) so RawUsage is not 0
#   scripts/slurm/sshare-lab.sh capture D writes D/: sacctmgr listings, sshare -a -l -P, scontrol show assoc_mgr
#   scripts/slurm/sshare-lab.sh stop      stops the two daemons by their PIDs
#
# Everything is named after the cluster (LLMFLOW_SSHARE_CLUSTER, default
# s8fair): accounts and users start with "s8", so another test on the same
# slurmdbd cannot collide. Ports 6917/6918; files under /var/lib/llmflow-sshare.
# Billing counts CPUs (TRESBillingWeights=CPU=1.0): RawUsage is CPU-seconds.
set -euo pipefail
export LC_ALL=C TZ=UTC
CLUSTER=${LLMFLOW_SSHARE_CLUSTER:-s8fair}
DIR=/var/lib/llmflow-sshare
export SLURM_CONF=$DIR/slurm.conf
CTLD_PID=/run/llmflow-sshare-ctld.pid
SLURMD_PID=/run/llmflow-sshare-slurmd.pid
say() { printf 'sshare-lab: %s\n' "$*"; }
die() { printf 'sshare-lab: FAILED: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "run as root"
sam() { sacctmgr -i "$@" >/dev/null; }
alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

conf() {
	install -d -m 0755 "$DIR" "$DIR/ctld" "$DIR/slurmd" /var/log/slurm
	cat >"$DIR/slurm.conf" <<CONF
# written by llmflow scripts/slurm/sshare-lab.sh
ClusterName=$CLUSTER
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmctldPort=6917
SlurmdPort=6918
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=/var/log/slurm/sshare-lab-ctld.log
SlurmdLogFile=/var/log/slurm/sshare-lab-slurmd.log
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageEnforce=associations
JobCompType=jobcomp/none
PriorityType=priority/multifactor
PriorityDecayHalfLife=7-0
PriorityCalcPeriod=1
PriorityWeightFairshare=100000
NodeName=s8n01 NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=16 RealMemory=16000 State=UNKNOWN
PartitionName=s8cpu Nodes=s8n01 Default=YES MaxTime=INFINITE State=UP TRESBillingWeights=CPU=1.0
CONF
}

tree() {
	sacctmgr -nP show cluster format=Cluster | grep -qx "$CLUSTER" || sam add cluster "$CLUSTER"
	local u
	for u in s8ann s8ben s8cat s8dan; do
		id "$u" >/dev/null 2>&1 || useradd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$u"
	done
	acct() { # acct NAME PARENT FAIRSHARE
		[[ -n $(sacctmgr -nP show assoc cluster="$CLUSTER" account="$1" user= format=Account) ]] ||
			sam add account "$1" cluster="$CLUSTER" parent="$2" fairshare="$3" description="sshare lab $1"
	}
	user() { # user NAME ACCOUNT FAIRSHARE [partition]
		local p=${4:-}
		sacctmgr -nP show assoc cluster="$CLUSTER" account="$2" user="$1" format=Partition | grep -qx -- "$p" ||
			sam add user "$1" cluster="$CLUSTER" account="$2" fairshare="$3" ${p:+partition=$p}
	}
	# root's own user association with a share
	sam modify user root where cluster="$CLUSTER" account=root set fairshare=5
	acct s8uni-a root 10
	acct s8team-x s8uni-a 60
	acct s8proj-p s8team-x parent          # Fairshare=parent at depth 3
	acct s8sub-q s8proj-p 30               # a project two levels below its team
	acct s8proj-r s8team-x 40
	acct s8team-y s8uni-a parent           # Fairshare=parent at depth 2
	acct s8proj-z s8team-y 20
	acct s8uni-b root 5
	acct s8team-w s8uni-b 100
	acct s8uni-c root parent               # Fairshare=parent at depth 1
	acct s8team-v s8uni-c 2
	user s8ann s8team-x 5
	user s8ben s8proj-p 1
	user s8cat s8sub-q 2
	user s8ann s8sub-q 4
	user s8ann s8proj-r 10
	user s8ben s8proj-r 10
	user s8cat s8proj-z 3
	user s8dan s8proj-z parent
	user s8dan s8team-w 50
	user s8cat s8team-w 50
	user s8cat s8team-w 25 s8cpu           # a partition association
	user s8ben s8team-v 1
	sam modify user s8dan where cluster="$CLUSTER" set defaultaccount=s8team-w
}

start() {
	conf
	tree
	if ! alive "$CTLD_PID"; then
		say "starting slurmctld ($CLUSTER, 127.0.0.1:6917)"
		slurmctld
	fi
	if ! alive "$SLURMD_PID"; then
		say "starting slurmd (s8n01, 127.0.0.1:6918)"
		slurmd -N s8n01
	fi
	local i
	for i in $(seq 1 60); do
		sinfo -h -o %t 2>/dev/null | grep -qE '^idle' && return 0
		sleep 1
	done
	die "node s8n01 not idle after 60 s (see /var/log/slurm/sshare-lab-*.log)"
}

jobs() {
	submit() { # submit USER ACCOUNT CPUS SECONDS [extra]
		local u=$1 a=$2 c=$3 s=$4; shift 4
		runuser -u "$u" -- sbatch --parsable -A "$a" -c "$c" -t 10 -J "s8-$u-$a" -o /dev/null "$@" --wrap "sleep $s"
	}
	cd /tmp
	submit s8ann s8proj-r 4 100
	submit s8ben s8proj-r 1 60
	submit s8cat s8sub-q 2 80
	submit s8ben s8proj-p 1 40
	submit s8cat s8proj-z 2 50
	submit s8dan s8proj-z 1 90
	submit s8dan s8team-w 3 70
	submit s8cat s8team-w 1 30 -p s8cpu
	submit s8ben s8team-v 1 20
	# Slurm charges usage per PriorityCalcPeriod: jobs shorter than that
	# may leave none, so these run longer.
	submit s8ann s8team-x 1 150
	submit s8ben s8proj-p 2 150
	submit s8ann s8sub-q 1 130
	submit s8cat s8proj-z 1 140
	submit s8cat s8team-w 1 150 -p s8cpu
	submit s8ben s8team-v 3 150
	local i
	for i in $(seq 1 60); do
		[[ -z $(squeue -h -o %i) ]] && break
		sleep 5
	done
	sleep 70 # PriorityCalcPeriod=1: let the last intervals fold into usage
}

capture() {
	local out=${1:?capture DIR}
	install -d "$out"
	# the listings `llmflow sync --from-sacctmgr` runs (slurmsync.DefaultArgs)
	sacctmgr --parsable2 show assoc withdeleted where cluster="$CLUSTER" format=Cluster,Account,User,Partition,Share,ParentName >"$out/sacctmgr.assoc.withdeleted.P.txt"
	sacctmgr --parsable2 show assoc where cluster="$CLUSTER" format=Cluster,Account,User,Partition,Share,ParentName >"$out/sacctmgr.assoc.P.txt"
	sshare -a -l -P >"$out/sshare.a.l.P.txt"
	sshare -a -P -o Account,User,Partition,ID,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,LevelFS >"$out/sshare.format.P.txt"
	scontrol show assoc_mgr flags=assoc >"$out/scontrol-show-assoc.txt"
	say "wrote $out"
}

stop() {
	local f
	for f in "$SLURMD_PID" "$CTLD_PID"; do
		alive "$f" && kill "$(cat "$f")" || true
	done
}

case ${1:-} in
start) start ;;
jobs) jobs ;;
capture) capture "${2:-}" ;;
stop) stop ;;
*) die "usage: $0 start|jobs|capture DIR|stop" ;;
esac
