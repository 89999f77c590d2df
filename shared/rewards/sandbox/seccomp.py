"""The seccomp filter bwrap installs before the program starts (x86_64 only)."""

from __future__ import annotations

import errno
import platform
import struct

# Syscalls a test program never needs and that widen the kernel surface or reach outside the
# sandbox: answered EPERM. Numbers are x86_64's; other architectures run without a filter.
_X86_64_DENY = {
    101: "ptrace",
    310: "process_vm_readv",
    311: "process_vm_writev",
    312: "kcmp",
    165: "mount",
    166: "umount2",
    155: "pivot_root",
    161: "chroot",
    272: "unshare",
    308: "setns",
    321: "bpf",
    298: "perf_event_open",
    323: "userfaultfd",
    248: "add_key",
    249: "request_key",
    250: "keyctl",
    175: "init_module",
    176: "delete_module",
    313: "finit_module",
    246: "kexec_load",
    320: "kexec_file_load",
    169: "reboot",
    167: "swapon",
    168: "swapoff",
    163: "acct",
    179: "quotactl",
    103: "syslog",
    303: "name_to_handle_at",
    304: "open_by_handle_at",
    424: "pidfd_send_signal",
    425: "io_uring_setup",
    426: "io_uring_enter",
    427: "io_uring_register",
    428: "open_tree",
    429: "move_mount",
    430: "fsopen",
    431: "fsconfig",
    432: "fsmount",
    433: "fspick",
    434: "pidfd_open",
    438: "pidfd_getfd",
    442: "mount_setattr",
}
_NR_CLONE, _NR_CLONE3, _NR_SOCKET = 56, 435, 41
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_CLONE_NS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_ALLOWED_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6 (the network namespace has only lo)
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_KILL_PROCESS, _RET_ALLOW = 0x80000000, 0x7FFF0000


def _ret_errno(e: int) -> int:
    return 0x00050000 | e


def seccomp_filter() -> bytes | None:
    """A classic-BPF seccomp program for `bwrap --seccomp`, or None where no table exists."""
    if platform.machine() != "x86_64":
        return None
    ins: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # arch: another ABI (i386 int 0x80) is killed
        (_JEQ, 1, 0, _AUDIT_ARCH_X86_64),
        (_RET, 0, 0, _RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, 0),  # nr: the x32 ABI is killed
        (_JGE, 0, 1, _X32_BIT),
        (_RET, 0, 0, _RET_KILL_PROCESS),
    ]
    for nr in sorted(_X86_64_DENY):
        ins += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _ret_errno(errno.EPERM))]
    # clone3 hides its flags behind a pointer: ENOSYS makes libc fall back to clone.
    ins += [(_JEQ, 0, 1, _NR_CLONE3), (_RET, 0, 0, _ret_errno(errno.ENOSYS))]
    clone = [
        (_LD_W_ABS, 0, 0, 16),  # args[0]: the flags
        (_JSET, 0, 1, _CLONE_NS),
        (_RET, 0, 0, _ret_errno(errno.EPERM)),
        (_RET, 0, 0, _RET_ALLOW),
    ]
    ins += [(_JEQ, 0, len(clone), _NR_CLONE), *clone]
    n = len(_ALLOWED_FAMILIES)
    sock = [(_LD_W_ABS, 0, 0, 16)]  # args[0]: the address family
    sock += [(_JEQ, n - i, 0, fam) for i, fam in enumerate(_ALLOWED_FAMILIES)]
    sock += [(_RET, 0, 0, _ret_errno(errno.EAFNOSUPPORT)), (_RET, 0, 0, _RET_ALLOW)]
    ins += [(_JEQ, 0, len(sock), _NR_SOCKET), *sock]
    ins.append((_RET, 0, 0, _RET_ALLOW))
    return b"".join(struct.pack("=HBBI", code, jt, jf, k) for code, jt, jf, k in ins)
