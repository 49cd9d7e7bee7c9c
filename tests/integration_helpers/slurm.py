"""A throw-away one-node Slurm (munge, MariaDB, slurmdbd, slurmctld, slurmd) in a temp folder.

Follows /work/shared/reference/slurm-notes.md: no systemd, every daemon started by hand in the
foreground with its own config, socket, pid and log files under one folder, and stopped by pid.
Needs root (slurmd, munged) and Debian's ``slurm-wlm slurmdbd munge mariadb-server``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

NODE = "fl-node1"
CLUSTER = "flcluster"
BINARIES = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if not shutil.which(b, path="/usr/sbin:/usr/bin:/sbin:/bin")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check: Callable[[], object], timeout: float, every: float = 0.5) -> object:
    """Poll ``check`` until it returns something truthy; raise TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@dataclass
class Slurm:
    root: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.root / "etc" / "slurm.conf"), "TZ": "UTC"}

    def log(self, name: str) -> Path:
        return self.root / "log" / f"{name}.log"

    # -- commands ------------------------------------------------------------------------------
    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, check=check, timeout=60
        )

    def sbatch(self, *args: str) -> str:
        out = self.run("sbatch", "--parsable", f"--chdir={self.root / 'jobs'}", *args).stdout
        return out.strip().split(";")[0]

    def squeue_state(self, job: str) -> str:
        return self.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()

    def sacct_states(self, jobs: list[str]) -> dict[str, str]:
        out = self.run(
            "sacct", "-X", "-n", "-P", "-j", ",".join(jobs), "--format=JobIDRaw,State"
        ).stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    # -- daemons -------------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> None:
        out = self.log(f"{name}-stdout").open("ab")
        self.procs[name] = subprocess.Popen(
            args, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def stop_all(self) -> None:
        # Jobs first (their slurmstepd outlive slurmd), then the daemons in reverse start order.
        if "slurmctld" in self.procs:
            self.run("scancel", "--full", "-u", "root", check=False)
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadb", "munged"):
            self.stop(name)
        self._kill_strays()

    def _kill_strays(self) -> None:
        """Job processes left by a killed slurmd: those running in this cluster's job folder."""
        import psutil

        jobs = str(self.root / "jobs")
        for proc in psutil.process_iter(["pid", "cwd"]):
            cwd = proc.info.get("cwd") or ""
            if cwd.startswith(jobs) and proc.pid != os.getpid():
                try:
                    proc.kill()
                except psutil.Error:
                    pass

    def start_slurmd(self) -> None:
        self._spawn("slurmd", ["slurmd", "-D", "-N", NODE, "-L", str(self.log("slurmd"))])

    def alive(self, name: str) -> bool:
        return name in self.procs and self.procs[name].poll() is None

    def assert_alive(self, *names: str) -> None:
        for n in names:
            if not self.alive(n):
                tail = self.log(f"{n}-stdout").read_text(errors="replace")[-2000:]
                other = self.log(n)
                if other.exists():
                    tail += other.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{n} exited: {tail}")


def start(root: Path, *, slurmd_timeout: int = 10) -> Slurm:
    """Write the configs under ``root`` and start every daemon; returns when the node is idle."""
    s = Slurm(root)
    for d in ("etc", "log", "run", "spool/ctld", "spool/d", "mysql", "jobs"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "jobs", 0o777)
    s.ports = {k: _free_port() for k in ("mysql", "dbd", "ctld", "d")}
    try:
        _start_munge(s)
        _start_mariadb(s)
        _write_slurm_conf(s, slurmd_timeout)
        s._spawn("slurmdbd", ["slurmdbd", "-D"])
        wait_for("slurmdbd", lambda: _port_open(s.ports["dbd"]) or s.assert_alive("slurmdbd"), 60)
        s._spawn("slurmctld", ["slurmctld", "-D", "-i", "-L", str(s.log("slurmctld"))])
        wait_for(
            "slurmctld", lambda: _port_open(s.ports["ctld"]) or s.assert_alive("slurmctld"), 60
        )
        s.start_slurmd()
        wait_for("the node to be idle", lambda: _node_idle(s), 60)
    except BaseException:
        s.stop_all()
        raise
    return s


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _node_idle(s: Slurm) -> bool:
    s.assert_alive("slurmd", "slurmctld", "slurmdbd")
    out = s.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.strip()
    return out.startswith("idle")


def _start_munge(s: Slurm) -> None:
    key = s.root / "etc" / "munge.key"
    key.write_bytes(os.urandom(128))
    os.chmod(key, 0o600)
    sock = s.root / "run" / "munge.socket"
    s._spawn(
        "munged",
        [
            "munged", "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
            f"--pid-file={s.root / 'run' / 'munged.pid'}", f"--log-file={s.log('munged')}",
            f"--seed-file={s.root / 'run' / 'munge.seed'}",
        ],
    )  # fmt: skip
    wait_for("munged", lambda: sock.exists() or s.assert_alive("munged"), 20, 0.1)


def _start_mariadb(s: Slurm) -> None:
    data = s.root / "mysql"
    subprocess.run(
        ["mariadb-install-db", "--user=root", f"--datadir={data}",
         "--auth-root-authentication-method=normal", "--skip-test-db"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    init = s.root / "etc" / "init.sql"
    init.write_text(
        "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';\n"
        "GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';\nFLUSH PRIVILEGES;\n"
    )
    s._spawn(
        "mariadb",
        ["mariadbd", "--no-defaults", "--user=root", f"--datadir={data}",
         f"--socket={s.root / 'run' / 'mysqld.sock'}", f"--port={s.ports['mysql']}",
         "--bind-address=127.0.0.1", f"--pid-file={s.root / 'run' / 'mysqld.pid'}",
         f"--init-file={init}", "--skip-name-resolve", "--innodb-buffer-pool-size=32M",
         "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2"],
    )  # fmt: skip
    wait_for("MariaDB", lambda: _port_open(s.ports["mysql"]) or s.assert_alive("mariadb"), 60, 0.2)


def _write_slurm_conf(s: Slurm, slurmd_timeout: int) -> None:
    r, p = s.root, s.ports
    auth = f"AuthInfo=socket={r / 'run' / 'munge.socket'}\n"
    (r / "etc" / "slurmdbd.conf").write_text(
        f"AuthType=auth/munge\n{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={p['dbd']}\n"
        f"SlurmUser=root\nLogFile={s.log('slurmdbd')}\nPidFile={r / 'run' / 'slurmdbd.pid'}\n"
        "StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
        f"StoragePort={p['mysql']}\nStorageUser=slurm\nStoragePass=slurm\n"
        "StorageLoc=slurm_acct_db\n"
    )
    os.chmod(r / "etc" / "slurmdbd.conf", 0o600)
    (r / "etc" / "slurm.conf").write_text(
        f"ClusterName={CLUSTER}\nSlurmctldHost=localhost(127.0.0.1)\nSlurmUser=root\n"
        f"SlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n{auth}"
        f"SlurmctldPort={p['ctld']}\nSlurmdPort={p['d']}\n"
        f"StateSaveLocation={r / 'spool' / 'ctld'}\nSlurmdSpoolDir={r / 'spool' / 'd'}\n"
        f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}\n"
        f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=5\n"
        "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
        f"AccountingStoragePort={p['dbd']}\nAccountingStoreFlags=job_comment\n"
        f"AccountingStoragePass={r / 'run' / 'munge.socket'}\n"
        "JobCompType=jobcomp/none\nSchedulerType=sched/backfill\n"
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
        "MpiDefault=none\nReturnToService=2\n"
        f"SlurmdTimeout={slurmd_timeout}\nSlurmctldTimeout=30\nInactiveLimit=0\n"
        "MinJobAge=300\nKillWait=5\nOverTimeLimit=0\nWaitTime=0\nMessageTimeout=10\n"
        "SchedulerParameters=bf_interval=5\nSlurmdParameters=config_overrides\n"
        "SlurmctldDebug=info\nSlurmdDebug=info\nMailProg=/bin/true\n"
        f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs=16 RealMemory=4000 State=UNKNOWN\n"
        f"PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP\n"
    )
