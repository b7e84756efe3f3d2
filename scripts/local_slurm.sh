#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, for trying (and testing) sweeps that go through
# `hydra/launcher=submitit_slurm` without a cluster.
#
# Usage: scripts/local_slurm.sh start|stop|status|env
#   start   install what is missing (Debian/Ubuntu, as root: apt-get install slurm-wlm slurmdbd
#           munge mariadb-server), then start munged, mariadbd, slurmdbd, slurmctld and slurmd with
#           a generated config: one node (this machine's CPUs and memory), one partition `local`,
#           accounting (sacct) through slurmdbd. Idempotent: what already runs is kept.
#   stop    cancel the cluster's jobs and stop its daemons (its state and job history are kept)
#   status  what runs; exit 0 when all of it does, 3 when none does, 1 in between
#   env     the line that points SLURM's commands at this cluster: eval "$(scripts/local_slurm.sh env)"
#
# Then, in that shell:
#   sinfo; sbatch --wrap 'hostname'; sacct
#   ablate -m qkv_sharing=independent,qk_shared seed=0,1 hydra/launcher=submitit_slurm \
#       hydra.launcher.partition=local hydra.launcher.cpus_per_task=1 hydra.launcher.timeout_min=10
#
# Settings (environment):
#   ABLATE_SLURM_DIR   state, configs and logs (default /tmp/ablate-slurm)
#   ABLATE_SLURM_PORT  first of four TCP ports on 127.0.0.1: slurmctld, slurmd, slurmdbd, mariadbd
#                      (default 6817, i.e. 6817-6820)
#
# Everything listens on 127.0.0.1 only and lives in ABLATE_SLURM_DIR: no file under /etc is
# written (the packages' own services, if the init system starts them, are not used).
set -euo pipefail

dir=${ABLATE_SLURM_DIR:-/tmp/ablate-slurm}
port=${ABLATE_SLURM_PORT:-6817}
ctld_port=$port slurmd_port=$((port + 1)) dbd_port=$((port + 2)) db_port=$((port + 3))
etc=$dir/etc log=$dir/log
conf=$etc/slurm.conf
node=$(hostname -s 2>/dev/null || uname -n)
node=${node%%.*}
packages=(slurm-wlm slurmdbd munge mariadb-server)
commands=(slurmctld slurmd slurmdbd sbatch squeue sacct sacctmgr scontrol munged mariadbd mariadb-install-db mariadb-admin mariadb)
export SLURM_CONF=$conf

say() { echo "local_slurm: $*"; }
fail() {
  echo "local_slurm: $*" >&2
  exit 1
}

# ------------------------------------------------------------------------------------ processes
# alive PID: the process runs. A process that has exited but that its parent has not yet reaped
# (a zombie: state Z) has not: a daemon's parent is the init process, and in a container that
# init may reap only every few seconds (2 s here), which made every stop wait that long per step.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) } # the fields after "(comm) "; the first is the state
  [[ ${stat%% *} != [ZX] ]]
}

# pid_of NAME PIDFILE: the pid in PIDFILE if that process runs and is NAME (else nothing)
pid_of() {
  local pid
  [ -r "$2" ] || return 1
  pid=$(tr -dc '0-9' <"$2")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$1" ] && alive "$pid" && echo "$pid"
}

# the daemons this script starts, in start order: "NAME PIDFILE" lines
daemons() {
  cat <<EOF
munged $dir/munge/munged.pid
mariadbd $dir/mysql/mariadbd.pid
slurmdbd $dir/run/slurmdbd.pid
slurmctld $dir/run/slurmctld.pid
slurmd $dir/run/slurmd.pid
EOF
}

running_count() {
  local n=0 name file
  while read -r name file; do
    if pid_of "$name" "$file" >/dev/null; then n=$((n + 1)); fi
  done < <(daemons)
  echo "$n"
}

# wait_for SECONDS COMMAND...: retry COMMAND until it succeeds; false after SECONDS
wait_for() {
  local seconds=$1 end
  shift
  end=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.1
  done
}

log_tail() { [ -r "$1" ] && tail -n 15 "$1" | sed 's/^/    /' >&2 || true; }

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ------------------------------------------------------------------------------------- install
install() {
  local missing=() c
  for c in "${commands[@]}"; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
  command -v mungekey >/dev/null 2>&1 || [ -r /dev/urandom ] || missing+=(mungekey)
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || fail "not installed (${missing[*]}) and not root: install as root with
  apt-get install --no-install-recommends ${packages[*]}"
  command -v apt-get >/dev/null 2>&1 || fail "not installed (${missing[*]}) and no apt-get here:
  install SLURM (slurmctld, slurmd, slurmdbd, client commands), munge and MariaDB yourself"
  mkdir -p "$log"
  say "installing ${packages[*]} (apt-get; log: $log/apt.log)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${packages[@]}" >"$log/apt.log" 2>&1; then
    say "apt-get install failed; updating the package lists and trying again"
    apt-get update -q >>"$log/apt.log" 2>&1 &&
      apt-get install -y -q --no-install-recommends "${packages[@]}" >>"$log/apt.log" 2>&1 ||
      { log_tail "$log/apt.log"; fail "apt-get could not install ${packages[*]} (log: $log/apt.log)"; }
  fi
  for c in "${commands[@]}"; do
    command -v "$c" >/dev/null 2>&1 || fail "installed ${packages[*]} but '$c' is still missing"
  done
}

# ------------------------------------------------------------------------------------- configs
# The node's real CPUs and memory as slurmd sees them: "CPUs=2 Boards=1 ... RealMemory=24105"
hardware() {
  slurmd -C 2>/dev/null | head -n 1 | sed -E 's/^NodeName=[^ ]+ //'
}

write_configs() {
  local hw cpus mem
  hw=$(hardware)
  [[ $hw == *CPUs=* && $hw == *RealMemory=* ]] || fail "'slurmd -C' did not report this machine's CPUs and memory"
  cpus=$(sed -E 's/.*CPUs=([0-9]+).*/\1/' <<<"$hw")
  mem=$(sed -E 's/.*RealMemory=([0-9]+).*/\1/' <<<"$hw")
  [ -s "$etc/db.pass" ] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$etc/db.pass")

  # ProctrackType=linuxproc and TaskPlugin=none: no cgroups needed (containers, VMs without
  # systemd); cons_tres with CR_CPU_Memory: N one-cpu jobs run at once on N CPUs, and a job that
  # asks for no memory gets its CPUs' share (DefMemPerCPU) instead of the whole node.
  # cred_expire=5, SLURM's least: a requeued job (preemption, `scontrol requeue`) may start again
  # cred_expire + 1 s after it stopped (the default, 120, is for clusters whose nodes may take that
  # long to check a job's credential; here the node is this machine, and it checks it at once).
  cat >"$conf" <<EOF
# Generated by scripts/local_slurm.sh: a one-node cluster on this machine. Regenerated by
# 'start' when none of the cluster's daemons runs; edit the script, not this file.
ClusterName=ablate
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$log/slurmctld.log
SlurmdLogFile=$log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=$((mem / cpus))
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
AccountingStoragePass=$dir/munge/munge.socket
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=30
NodeName=$node NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF

  (umask 077 && cat >"$etc/slurmdbd.conf" <<EOF
# Generated by scripts/local_slurm.sh (slurmdbd reads it next to slurm.conf)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
LogFile=$log/slurmdbd.log
PidFile=$dir/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=$(cat "$etc/db.pass")
StorageLoc=slurm_acct_db
EOF
  )

  cat >"$etc/my.cnf" <<EOF
# Generated by scripts/local_slurm.sh: the accounting database, small and local
[mysqld]
datadir=$dir/mysql/data
socket=$dir/mysql/mysqld.sock
pid-file=$dir/mysql/mariadbd.pid
log-error=$dir/mysql/mariadbd.log
bind-address=127.0.0.1
port=$db_port
skip-name-resolve
performance_schema=OFF
innodb_buffer_pool_size=32M
innodb_log_file_size=16M
innodb_lock_wait_timeout=900
[client]
socket=$dir/mysql/mysqld.sock
EOF
  chmod 644 "$etc/my.cnf"
}

# ------------------------------------------------------------------------------------- daemons
start_munged() {
  pid_of munged "$dir/munge/munged.pid" >/dev/null && return 0
  local key=$dir/munge/munge.key
  if [ ! -s "$key" ]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile="$key" >/dev/null
    else
      (umask 077 && head -c 1024 /dev/urandom >"$key")
    fi
  fi
  chown munge:munge "$dir/munge" "$key"
  chmod 755 "$dir/munge"
  chmod 600 "$key"
  rm -f "$dir/munge/munge.socket" "$dir/munge/munge.socket.lock"
  runuser -u munge -- munged --socket="$dir/munge/munge.socket" --key-file="$key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" </dev/null >"$log/munged.out" 2>&1 ||
    { log_tail "$log/munged.out"; log_tail "$dir/munge/munged.log"; fail "munged did not start"; }
  wait_for 10 munge -n --socket="$dir/munge/munge.socket" ||
    { log_tail "$dir/munge/munged.log"; fail "munged does not answer on $dir/munge/munge.socket"; }
}

db() { mariadb --defaults-file="$etc/my.cnf" -u root "$@"; }

start_mariadbd() {
  mkdir -p "$dir/mysql"
  chown mysql:mysql "$dir/mysql"
  if ! pid_of mariadbd "$dir/mysql/mariadbd.pid" >/dev/null; then
    port_taken "$db_port" && fail "port $db_port (the accounting database's) is taken by another program; set ABLATE_SLURM_PORT"
    if [ ! -d "$dir/mysql/data/mysql" ]; then
      say "creating the accounting database in $dir/mysql"
      mariadb-install-db --defaults-file="$etc/my.cnf" --user=mysql --auth-root-authentication-method=socket \
        --skip-test-db >"$log/mariadb-install.log" 2>&1 ||
        { log_tail "$log/mariadb-install.log"; fail "mariadb-install-db failed"; }
    fi
    setsid -f mariadbd --defaults-file="$etc/my.cnf" --user=mysql </dev/null >"$log/mariadbd.out" 2>&1
  fi
  wait_for 30 mariadb-admin --defaults-file="$etc/my.cnf" ping ||
    { log_tail "$dir/mysql/mariadbd.log"; fail "mariadbd did not start"; }
  db -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$etc/db.pass")';
         ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$etc/db.pass")';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" ||
    fail "could not create the database user for slurmdbd"
}

# start_slurm NAME PORT ARGS...: start a SLURM daemon (it forks itself) unless it already runs
start_slurm() {
  local name=$1 p=$2
  shift 2
  pid_of "$name" "$dir/run/$name.pid" >/dev/null && return 0
  port_taken "$p" && fail "port $p (for $name) is taken by another program (another SLURM?); stop it or set ABLATE_SLURM_PORT"
  "$name" "$@" </dev/null >"$log/$name.out" 2>&1 ||
    { log_tail "$log/$name.out"; log_tail "$log/$name.log"; fail "$name did not start (log: $log/$name.log)"; }
}

node_state() { sinfo -h -n "$node" -o %T 2>/dev/null | head -n 1; }

node_ready() { [[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]; }

start() {
  if [ "$(running_count)" -eq "$(daemons | wc -l)" ] && node_ready; then
    say "already running ($conf)"
    status
    return 0
  fi
  install
  [ "$(id -u)" -eq 0 ] || fail "starting the cluster needs root (its daemons run as root, munge and mysql)"
  mkdir -p "$dir" "$etc" "$log" "$dir/run" "$dir/state" "$dir/spool" "$dir/munge"
  chmod 755 "$dir"
  [ "$(running_count)" -eq 0 ] || [ ! -s "$conf" ] || say "some daemons run: starting the others with the existing config"
  if [ "$(running_count)" -eq 0 ]; then
    for p in "$ctld_port" "$slurmd_port" "$dbd_port" "$db_port"; do
      port_taken "$p" && fail "port $p on 127.0.0.1 is taken by another program (another SLURM or database?); stop it or set ABLATE_SLURM_PORT (now $port: ports $port-$((port + 3)))"
    done
  fi
  if [ "$(running_count)" -eq 0 ] || [ ! -s "$conf" ]; then write_configs; fi
  start_munged
  start_mariadbd
  start_slurm slurmdbd "$dbd_port"
  wait_for 30 sacctmgr -n list cluster ||
    { log_tail "$log/slurmdbd.log"; fail "slurmdbd does not answer (log: $log/slurmdbd.log)"; }
  start_slurm slurmctld "$ctld_port"
  wait_for 30 scontrol ping ||
    { log_tail "$log/slurmctld.log"; fail "slurmctld does not answer (log: $log/slurmctld.log)"; }
  start_slurm slurmd "$slurmd_port" -N "$node"
  if ! wait_for 30 node_ready; then
    log_tail "$log/slurmd.log"
    fail "node $node is '$(node_state)', not idle, 30 s after slurmd started (log: $log/slurmd.log; reason: $(sinfo -h -R -n "$node" -o %E 2>/dev/null))"
  fi
  # sacct only knows the cluster once slurmctld has registered it with slurmdbd
  wait_for 30 bash -c "sacctmgr -n -P list cluster format=cluster | grep -qx ablate" ||
    fail "slurmctld did not register the cluster with slurmdbd (log: $log/slurmctld.log)"
  say "started: one node ($node, $(hardware | grep -oE 'CPUs=[0-9]+|RealMemory=[0-9]+' | tr '\n' ' ')MB), partition 'local'"
  status
}

gone() {
  local pid
  for pid in "$@"; do ! alive "$pid" || return 1; done
}

# stop_group NAME...: stop these daemons (those of them that run) and wait until they have
stop_group() {
  local name file pid pids=() names=()
  while read -r name file; do
    [[ " $* " == *" $name "* ]] || continue
    pid=$(pid_of "$name" "$file") || continue
    kill "$pid"
    pids+=("$pid") names+=("$name ($pid)")
  done < <(daemons)
  [ ${#pids[@]} -eq 0 ] && return 0
  if ! wait_for 20 gone "${pids[@]}"; then
    say "${names[*]} did not stop in 20 s: killing"
    kill -9 "${pids[@]}" 2>/dev/null || true
  fi
  say "stopped ${names[*]}"
}

stop() {
  local jobs
  if pid_of slurmctld "$dir/run/slurmctld.pid" >/dev/null; then
    jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
      say "cancelling jobs: $jobs"
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      wait_for 40 bash -c '[ -z "$(squeue -h -o %i 2>/dev/null)" ]' || say "some jobs are still ending"
    fi
  fi
  # the reverse of the start order, in three groups that stop together (each daemon by the pid
  # its own pid file names): the SLURM daemons, then slurmdbd, then the database and munged
  stop_group slurmd slurmctld
  stop_group slurmdbd
  stop_group mariadbd munged
  say "stopped (state kept in $dir)"
}

status() {
  local name file pid n total
  n=$(running_count)
  total=$(daemons | wc -l)
  while read -r name file; do
    if pid=$(pid_of "$name" "$file"); then echo "  $name: running (pid $pid)"; else echo "  $name: stopped"; fi
  done < <(daemons)
  if pid_of slurmctld "$dir/run/slurmctld.pid" >/dev/null; then
    sinfo -h -o "  partition %P: node %N, %T, %c CPUs, %m MB" 2>/dev/null || true
    echo "  point SLURM's commands at it: export SLURM_CONF=$conf"
  fi
  [ "$n" -eq "$total" ] && return 0
  [ "$n" -eq 0 ] && return 3
  return 1
}

case ${1:-} in
start) start ;;
stop) stop ;;
status)
  rc=0
  status || rc=$?
  exit $rc
  ;;
env) echo "export SLURM_CONF=$conf" ;;
*)
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
  ;;
esac
