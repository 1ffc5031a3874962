"""The seccomp filter the sandbox's code runs under, compiled by libseccomp (through `pyseccomp`, a
ctypes binding) into the classic BPF program that `bwrap --seccomp FD` loads.

Everything is allowed except what could undo the namespaces or reach the kernel's attack surface:
mounts, namespace changes, tracing, the kernel keyring, eBPF, kernel modules and kexec, and a few
more that Flatpak's and Docker's profiles deny too. They fail with EPERM; `clone3` fails with ENOSYS
(its flags sit in memory a filter cannot read), so libc falls back to `clone`, whose namespace flags
the filter does see. A call from another architecture (32-bit `int 0x80`, x32) kills the process:
libseccomp's default for foreign architectures.

The standard streams cannot be replaced or freed: `dup2`/`dup3` onto fd 0, 1 or 2 and `close` or
`close_range` starting at one of them fail with EPERM (io_uring, which could close them without a
syscall the filter sees, is denied). The judge prints the results on fd 1, to a socket the
gateway drains, in a sandbox of its own; in any sandbox, no code can put its own pipe in between
and rewrite what a run prints. With 0-2 always open, `fcntl(F_DUPFD)` can only hand out 3 and above. A subprocess with redirected stdio
therefore fails inside the sandbox (its child would `dup2` onto 0-2).
"""

from __future__ import annotations

import errno
import os

import pyseccomp

DENIED = (
    "mount", "umount2", "setns", "unshare", "ptrace", "keyctl", "add_key", "request_key", "bpf",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "open_by_handle_at", "name_to_handle_at", "process_vm_readv", "process_vm_writev",
    "perf_event_open", "userfaultfd", "swapon", "swapoff", "reboot", "syslog", "acct", "quotactl",
    "iopl", "ioperm", "uselib", "lookup_dcookie", "vhangup",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
)
STANDARD_FDS = (0, 1, 2)
# (syscall, argument index) of the fd that would be replaced or freed; fds are 32-bit in the kernel.
FD_REPLACING = (("dup2", 1), ("dup3", 1), ("close", 0), ("close_range", 0))
CLONE_NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # push input into the terminal


def build_filter() -> pyseccomp.SyscallFilter:
    f = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    eperm = pyseccomp.ERRNO(errno.EPERM)
    for name in DENIED:
        f.add_rule(eperm, name)
    for flag in CLONE_NAMESPACE_FLAGS:
        f.add_rule(eperm, "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    f.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    for name, arg in FD_REPLACING:
        for fd in STANDARD_FDS:
            f.add_rule(eperm, name, pyseccomp.Arg(arg, pyseccomp.MASKED_EQ, 0xFFFFFFFF, fd))
    for request in (TIOCSTI, TIOCLINUX):
        f.add_rule(eperm, "ioctl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, 0xFFFFFFFF, request))
    return f


def compiled_filter_fd() -> int:
    """A memfd holding the compiled BPF program, at offset 0, for `bwrap --seccomp FD`."""
    fd = os.memfd_create("agent-sandbox-seccomp", 0)
    try:
        with open(fd, "wb", closefd=False) as out:
            build_filter().export_bpf(out)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
