#!/bin/bash
# Try epochscope's Slurm views and its zero-touch TaskProlog on ONE machine (docs/slurm.md,
# "Try it on one machine"): a one-node Slurm 22.05 of plain foreground processes (munged,
# slurmctld, slurmd: no systemd), a `collector serve` on loopback with a token file, an
# agent pushing its jobs sampler there, and the TaskProlog and Epilog the Ansible role
# installs. Everything lives in one directory; `stop` ends what `start` started.
#
#   sudo bench/slurm/one_node.sh start /tmp/es-slurm    # prints the commands to try
#   sudo bench/slurm/one_node.sh stop /tmp/es-slurm
#
# Needs: root (slurmd makes job cgroups), Debian's slurm-wlm and munge, cgroup v1
# hierarchies (cpuacct, memory, cpuset, freezer) and the repository's .venv. The same
# setup as tests/support/slurm_cluster.py, as commands a person can read and re-run.
set -euo pipefail

action=${1:-}
base=${2:-/tmp/es-slurm}
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=${EPOCHSCOPE_PYTHON:-$repo/.venv/bin/python}
collector_port=${COLLECTOR_PORT:-8186}
agent_metrics_port=${AGENT_METRICS_PORT:-9712}

die() { echo "one_node.sh: $*" >&2; exit 2; }

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

spawn() {  # name, command...: in the background, its own session, pid in $base/pids
    local name=$1; shift
    setsid "$@" >"$base/log/$name.out" 2>&1 < /dev/null &
    echo $! >"$base/pids/$name"
}

wait_for() {  # seconds, description, test command...
    local seconds=$1 what=$2; shift 2
    for _ in $(seq $((seconds * 5))); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    die "$what within $seconds s (logs: $base/log)"
}

start() {
    [ "$(id -u)" = 0 ] || die "run as root: slurmd makes the jobs' cgroups"
    for binary in munged slurmctld slurmd sbatch squeue sinfo; do
        command -v "$binary" >/dev/null || [ -x "/usr/sbin/$binary" ] \
            || die "$binary is not installed (apt-get install slurm-wlm munge)"
    done
    for controller in cpuacct memory cpuset freezer; do
        [ -e "/sys/fs/cgroup/$controller/cgroup.procs" ] \
            || die "no cgroup v1 $controller hierarchy under /sys/fs/cgroup"
    done
    [ -x "$python" ] || die "no $python: make env first, or set EPOCHSCOPE_PYTHON"
    [ -e "$base" ] && die "$base exists: stop it first, or name another directory"
    export PATH="$PATH:/usr/sbin"

    mkdir -p "$base"/{etc,state,spool,log,munge,jobs,pids,hooks,tokens,bin}
    chmod 755 "$base" "$base/munge" "$base/hooks" "$base/tokens"
    chmod 1777 "$base/jobs"  # jobs of any user write their output here

    # munge: its own key and socket, nothing of the machine's
    head -c 1024 /dev/urandom >"$base/munge/munge.key"
    chmod 400 "$base/munge/munge.key"

    # the collector's token, and the job user's own copy (root here: jobs run as root)
    "$python" -c 'import secrets; print(secrets.token_hex(16))' >"$base/collector.token"
    chmod 600 "$base/collector.token"
    install -m 600 "$base/collector.token" "$base/tokens/root"

    local node cpus memory
    node=$(slurmd -C | sed -n 's/^NodeName=\([^ ]*\).*/\1/p')
    cpus=$(slurmd -C | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
    memory=$(slurmd -C | sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p')
    cat >"$base/etc/slurm.conf" <<EOF
ClusterName=onenode
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$base/munge/socket
StateSaveLocation=$base/state
SlurmdSpoolDir=$base/spool
SlurmctldPidFile=$base/slurmctld.pid
SlurmdPidFile=$base/slurmd.pid
SlurmctldLogFile=$base/log/slurmctld.log
SlurmdLogFile=$base/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
KillWait=5
TaskProlog=$base/hooks/epochscope-task-prolog
Epilog=$base/hooks/epochscope-epilog
NodeName=$node CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$base/etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
CgroupAutomount=no
ConstrainCores=yes
ConstrainRAMSpace=yes
EOF

    # the site's file and the two hooks, as the Ansible role writes them
    cat >"$base/etc/slurm.toml" <<EOF
collector_url = "http://127.0.0.1:$collector_port"
token_file = "$base/tokens/{user}"
spool_root = "$base/spool-{user}"
summary_dir = "$base/summaries"
collector_command = ["$base/bin/collector"]
EOF
    # `collector` reading this collector's store, for the Epilog and for you
    printf '#!/bin/sh\nexec %s -m collector "$@" --db %s\n' "$python" "$base/collector.sqlite" \
        >"$base/bin/collector"
    chmod 755 "$base/bin/collector"
    for kind in task-prolog epilog; do
        "$python" -c 'import sys; from workloads.autoprofile.slurm import hook_script
sys.stdout.write(hook_script(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]))' \
            "$kind" "$python" "$base/etc/slurm.toml" "$repo" >"$base/hooks/epochscope-$kind"
        chmod 755 "$base/hooks/epochscope-$kind"
    done

    # the agent: the jobs sampler every second, pushing to the collector
    cat >"$base/etc/agent.toml" <<EOF
host = "$node"
interval_seconds = 1
samplers = ["jobs", "cpu", "memory"]
[push]
url = "http://127.0.0.1:$collector_port"
token_file = "$base/collector.token"
batch_seconds = 0
spool_dir = "$base/agent-spool"
[metrics]
listen = "127.0.0.1:$agent_metrics_port"
EOF
    chmod 600 "$base/etc/agent.toml"

    cd "$repo"
    spawn collector "$python" -m collector serve --db "$base/collector.sqlite" \
        --listen "127.0.0.1:$collector_port" --token-file "$base/collector.token"
    wait_for 60 "the collector did not listen" grep -q "listening on" "$base/log/collector.out"
    spawn agent "$python" -m agent run --config "$base/etc/agent.toml"
    wait_for 60 "the agent did not start" grep -q "agent started" "$base/log/agent.out"
    spawn munged munged -F -f --socket="$base/munge/socket" --key-file="$base/munge/munge.key" \
        --log-file="$base/log/munged.log" --pid-file="$base/munge/munged.pid" \
        --seed-file="$base/munge/seed"
    wait_for 10 "munged made no socket" test -S "$base/munge/socket"
    export SLURM_CONF="$base/etc/slurm.conf"
    spawn slurmctld slurmctld -D -f "$SLURM_CONF"
    spawn slurmd slurmd -D -f "$SLURM_CONF"
    wait_for 60 "the node did not come up idle" sh -c '[ "$(sinfo --noheader --format=%T)" = idle ]'

    cat <<EOF
one-node Slurm up in $base (node $node, $cpus CPUs); the collector on 127.0.0.1:$collector_port.
Try, in this shell:
  export SLURM_CONF=$SLURM_CONF PATH=$base/bin:\$PATH:/usr/sbin
  sbatch --export=ALL,EPOCHSCOPE_PROFILE=1 --output=$base/jobs/%j.out --wrap='$python $repo/tests/scripts/torch_random_train.py'
  squeue; cat $base/jobs/JOBID.out
  collector jobs
  collector job JOBID --summary
  collector runs                # the job's training, profiled unchanged: run slurm-JOBID
Stop: $0 stop $base
EOF
}

stop() {
    [ -d "$base/pids" ] || die "$base: nothing started there"
    export PATH="$PATH:/usr/sbin" SLURM_CONF="$base/etc/slurm.conf"
    local jobs
    jobs=$(squeue --noheader --format=%i 2>/dev/null || true)
    [ -n "$jobs" ] && scancel $jobs 2>/dev/null && sleep 6
    for name in slurmd slurmctld munged agent collector; do
        [ -f "$base/pids/$name" ] || continue
        pid=$(cat "$base/pids/$name")
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -rf "$base"
    echo "stopped and removed $base"
}

case $action in
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 start|stop [DIRECTORY] (default /tmp/es-slurm)" ;;
esac
