#!/usr/bin/python3
"""Runs a command on a fresh pseudo-terminal of 33x111, as a person's terminal would.

  pty_drive.py COMMAND...

Prints everything the terminal shows on stdout. When the output shows the line "READY", the
terminal is resized to 44x132 (the kernel sends SIGWINCH to the foreground process group) and
"hello" plus Enter is typed. Exits with the command's exit status.
"""
import fcntl
import os
import select
import struct
import sys
import termios
import time


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def main():
    master, slave = os.openpty()
    set_size(slave, 33, 111)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        for fd in (0, 1, 2):
            os.dup2(slave, fd)
        os.close(master)
        os.environ["TERM"] = "xterm-256color"
        os.execvp(sys.argv[1], sys.argv[1:])
    os.close(slave)
    seen = b""
    typed = False
    status = None
    deadline = time.time() + 30
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            seen += data
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        if not typed and b"READY" in seen:
            typed = True
            time.sleep(0.3)
            set_size(master, 44, 132)
            time.sleep(0.3)
            os.write(master, b"hello\r")
        if status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
        if status is not None and not r:
            break
    if status is None:
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
