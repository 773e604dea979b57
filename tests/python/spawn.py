"""How the tests start child processes. tools/arm64_wheel.sh runs this suite on an arm64 CPython under
user-mode emulation (qemu-aarch64 -L, no binfmt_misc), where the kernel cannot start an aarch64 program
by itself: ZIPCCL_TEST_EMULATOR names the emulator's command, which goes before every aarch64 program
a test starts (the interpreter, the wheel's tool), and ZIPCCL_TEST_CC a C compiler for that machine.
Unset (the default): programs start as usual, and the compiler is cc. Both are read once, at import:
some tests clear every ZIPCCL_* variable from their environment."""
import os
import shlex
import sys

EMULATOR = shlex.split(os.environ.get("ZIPCCL_TEST_EMULATOR", ""))
CC = os.environ.get("ZIPCCL_TEST_CC", "cc")


def python(*args):
    """This interpreter, as a command line."""
    return [*EMULATOR, sys.executable, *args]


def program(path, *args):
    """A program built for this machine (the wheel's tool), as a command line."""
    return [*EMULATOR, path, *args]
