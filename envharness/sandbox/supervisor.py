"""The trusted first process of every sandboxed run, on both backends: jail, drop, watch, report.

Standard library only, and it imports nothing from ``envharness``: the subprocess backend
runs it with the host's interpreter (``python -I -S``) inside fresh namespaces, the Docker
backend with the image's ``python3`` as the container's PID 1. It

1. joins the run's cgroups (subprocess backend), so every process of the run is counted;
2. opens the report file, which only root can reach and the command never inherits;
3. builds the jail (subprocess backend): a new root holding only an allow-list of
   read-only system paths, the run's work dir at ``/work``, its own ``/tmp`` and
   ``/dev/shm``, a fresh ``/proc``;
4. forks the command with stdin on ``/dev/null``, rlimits, no supplementary groups and
   the run's own uid;
5. as PID 1 of the run's PID namespace, reaps every process, sums the CPU time of the
   whole run from the kernel's accounting and kills everything when it passes the limit;
   when the command exits, everything it started dies;
6. writes what the kernel said (exit status, signal, CPU seconds, most processes at once,
   cgroup events) as JSON to the report file.

Nothing the command prints is read here: the host decides which limit ended the run from
this report, its own clock and output counters, and the cgroup files.
"""

import ctypes
import json
import os
import resource
import signal
import sys
import time
import warnings  # noqa: F401 - os.execvpe imports it lazily, and after the chroot it could not be found

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
TICK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.02


def _bytes(value):
    return None if value is None else value.encode()


def _mount(libc, source, target, fstype, flags, data=None):
    if libc.mount(_bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {target}: {os.strerror(error)}")


def jail(config):
    """Inside fresh mount/pid namespaces: chroot into a root that holds only the allow-list."""
    libc = ctypes.CDLL(None, use_errno=True)
    root = config["root"]
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for link, target in config["symlinks"]:
        os.symlink(target, root + link)
    for source, target, writable, device in config["binds"]:
        path = root + target
        if os.path.isdir(source):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        _mount(libc, source, path, None, MS_BIND | MS_REC)
        flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (0 if device else MS_NODEV) | (0 if writable else MS_RDONLY)
        _mount(libc, None, path, None, flags)
    for hidden in config["masks"]:  # our own packages, where they lie under an allowed path
        if os.path.isdir(root + hidden):
            _mount(libc, "tmpfs", root + hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
    os.makedirs(root + "/proc", exist_ok=True)
    _mount(libc, "proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{root}/dev/{name}")
    _mount(libc, None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    os.chroot(root)
    os.chdir("/")


def _limit(limits, strong):
    cpu = int(limits["cpu_s"]) + 1  # a per-process backstop; the run's total is watched below
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    procs = limits["pids"] + (8 if strong else 0)  # the uid is the run's own, so this counts the run's processes
    resource.setrlimit(resource.RLIMIT_NPROC, (procs, procs))
    size = limits["file_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not strong:  # no memory cgroup: the per-process address-space limit is all there is
        memory = limits["memory_mb"] * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


# Syscalls the command may not make: the kernel keyring is shared by uid, not by namespace,
# and would let one run leave data for another. (x86_64, aarch64: add_key, request_key, keyctl.)
DENIED_SYSCALLS = {"x86_64": (0xC000003E, (248, 249, 250)), "aarch64": (0xC00000B7, (217, 218, 219))}


def deny_syscalls():
    """Install a seccomp filter refusing the keyring syscalls with EPERM (and any foreign-ABI call)."""
    arch, numbers = DENIED_SYSCALLS[os.uname().machine]
    errno_eperm, allow = 0x00050000 | 1, 0x7FFF0000
    program = [
        (0x20, 0, 0, 4),  # load the architecture
        (0x15, 0, 6, arch),  # not ours: refuse
        (0x20, 0, 0, 0),  # load the syscall number
        (0x35, 4, 0, 0x40000000),  # the x32 ABI: refuse
        (0x15, 3, 0, numbers[0]),
        (0x15, 2, 0, numbers[1]),
        (0x15, 1, 0, numbers[2]),
        (0x06, 0, 0, allow),
        (0x06, 0, 0, errno_eperm),
    ]

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    filters = (Instruction * len(program))(*[Instruction(*row) for row in program])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: no setuid binary gains anything either
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(Program(len(program), filters)), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def _start(config):
    """In the forked child: stdin from /dev/null, limits, drop to the run's uid, exec."""
    try:
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for number in range(1, 32):  # default dispositions for the command
            try:
                signal.signal(number, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        _limit(config["limits"], config["strong"])
        uid = config["uid"]
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        if config["strong"]:
            deny_syscalls()
        os.chdir(config["cwd"])
        command = config["command"]
        os.execvpe(command[0], command, config["env"])
    except BaseException as error:  # noqa: BLE001 - nothing may escape the child
        os.write(2, f"sandbox: cannot start {config['command'][0]!r}: {error}\n".encode())
    os._exit(127)


def _processes(me):
    """(pid, CPU ticks used by it and by the children it has reaped) of every live process but us."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        found.append((int(name), sum(int(f) for f in fields[11:15])))
    return found


def _reaped_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


CPU_FILES = (  # where the run's cgroup CPU counter is, seen from inside a container
    ("/sys/fs/cgroup/cpuacct/cpuacct.usage", "ns"),
    ("/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "ns"),
    ("/sys/fs/cgroup/cpu.stat", "usec"),
)


class CgroupCpu:
    """The CPU seconds a cgroup has used, all its processes together, reaped by anyone or not."""

    def __init__(self, path, unit):
        self.fd, self.unit = os.open(path, os.O_RDONLY), unit  # kept open: it is read after the chroot

    @classmethod
    def find(cls, config):
        candidates = [tuple(config["cpu_file"])] if config.get("cpu_file") else (CPU_FILES if config.get("cgroup_events") else ())
        for path, unit in candidates:
            try:
                found = cls(path, unit)
                found.seconds()
                return found
            except (OSError, ValueError):
                continue
        return None

    def seconds(self):
        text = os.pread(self.fd, 4096, 0).decode()
        if self.unit == "ns":
            return int(text.split()[0]) / 1e9
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "usage_usec":
                return int(value) / 1e6
        raise ValueError("no usage_usec")


def _kill_all(watch_all, child):
    if watch_all:  # PID 1 of the run's namespace: -1 is every process of the run, and nothing else
        for _ in range(3):
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                break
    else:
        try:
            os.killpg(child, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def cgroup_counter(path, key):
    """``key N`` from a cgroup events file, or None."""
    try:
        with open(path) as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def cgroup_events():
    """The OOM kills and refused forks of the cgroup we are in (the Docker backend's container)."""
    events = {}
    for base in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
        found = cgroup_counter(base, "oom_kill")
        if found is not None:
            events["oom_kills"] = found
            break
    for base in ("/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events"):
        found = cgroup_counter(base, "max")
        if found is not None:
            events["pids_max_events"] = found
            break
    return events


def supervise(config):
    for path in config.get("cgroup_procs", []):
        with open(path, "w") as handle:
            handle.write("0")
    report = open(config["report"], "w")  # noqa: SIM115 - held for the whole run, never inherited by the command
    group_cpu = CgroupCpu.find(config)
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("-1000")  # the OOM killer takes the command, not its watcher
    except OSError:
        pass
    if config.get("jail"):
        jail(config["jail"])
    if config.get("setsid"):
        os.setsid()
    watch_all = config["watch_all"]
    me = os.getpid()
    child = os.fork()
    if child == 0:
        if not watch_all:
            os.setpgid(0, 0)
        _start(config)
    status, cpu_hit, wall_hit, most, live_cpu = None, False, False, 1, 0.0
    cpu_limit = config["limits"]["cpu_s"]
    deadline = time.monotonic() + config["limits"]["timeout_s"]  # ours, so the report survives a timeout too
    base = group_cpu.seconds() - _own_cpu() if group_cpu else 0.0

    def used(live):
        """The run's CPU seconds: the cgroup's counter (which sees every process, even ones the
        kernel reaped on its own) less our own, or else the live and reaped processes we can see."""
        seen = _reaped_cpu() + live
        if group_cpu:
            return max(seen, group_cpu.seconds() - _own_cpu() - base)
        return seen

    while status is None:
        while True:
            try:
                pid, code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, code = child, status if status is not None else 0
                status = code
                break
            if pid == 0:
                break
            if pid == child:
                status = code
        if status is not None:
            break
        if watch_all:
            found = _processes(me)
            most = max(most, len(found))
            live_cpu = sum(ticks for _, ticks in found) / TICK
            if used(live_cpu) >= cpu_limit:
                cpu_hit = True
                _kill_all(watch_all, child)
        if time.monotonic() >= deadline and not wall_hit:
            wall_hit = True
            _kill_all(watch_all, child)
        time.sleep(POLL_S)
    _kill_all(watch_all, child)  # nothing the command started outlives it
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    evidence = {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "cpu_s": round(used(0.0), 3),
        "cpu_limit_hit": cpu_hit,
        "wall_limit_hit": wall_hit,
        "max_procs": most,
    }
    if config.get("cgroup_events"):
        evidence.update(cgroup_events())
    report.write(json.dumps(evidence))
    report.close()
    os._exit(0)


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:  # a root-only file: the command cannot read its own limits or our paths
        settings = json.load(handle)
    os.unlink(sys.argv[1])
    supervise(settings)
